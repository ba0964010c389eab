"""The sidecars: polling each pod's sidecar for its samples (sidecar_client.py)
over pooled, bounded HTTP connections (podhttp.py)."""
