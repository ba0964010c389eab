"""The kopf operator, one folder per part (docs/structure.md draws them):

- ``handlers.py``: the thin kopf handlers; ``config.py`` the process's
  settings; ``guardspec.py`` a guard's spec read; ``crd.py`` the CRD;
  ``status.py`` what a guard's status says, read by ``metrics.py`` and
  ``top``; ``decided.py``, ``events.py``, ``clock.py`` the words and the
  time every part shares;
- ``cycle/``: a guard's cycle and its steps;
- ``api/``: the one module that talks to the Kubernetes API, and the pod cache;
- ``sidecars/``: polling the sidecars;
- ``rotations/``: rotating a worker within its budgets;
- ``rayclusters/``: what MemoryGuard changes in a RayCluster;
- ``forensics/``: the evidence kept before a rotation;
- ``sharding/``: the guards shared among replicas;
- ``cli/``: ``operator``, ``top``, ``uninstall``.

Runs with ``memoryguard-kuberay operator``.
"""
