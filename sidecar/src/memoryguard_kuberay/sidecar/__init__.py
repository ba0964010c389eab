"""The sidecar: reads the Ray container's memory (cgroup v2, v1, or
/proc smaps as a last resort) and the Ray object store, keeps a ring buffer of
samples and serves them (``/v1/samples``), Prometheus metrics (``/metrics``)
and ``/healthz``. No Kubernetes API access, no kopf, no ray import needed.
"""
