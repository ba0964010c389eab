"""The Kubernetes API: kube.py is the one module that talks to it; the pod
cache (podcache.py) watches the pods; podinfo.py reads a pod object (pure)."""
