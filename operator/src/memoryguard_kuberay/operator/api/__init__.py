"""The Kubernetes API: kube.py is the one module that talks to it (its
answers as exceptions in errors.py, how it is reached in credentials.py,
what it may use in apiuse.py); the pod cache (podcache.py) watches the pods;
podinfo.py reads a pod object (pure)."""
