"""The devkit: an EMULATED Kubernetes API that behaves as a real
kube-apiserver with kube-controller-manager did (``emulator/``), a KubeRay
and kubelet stand-in, faulty and hostile sidecar proxies, a referee that
counts rule breaches, and the embedded demo (``demo``) built on them. The
tests, the benchmarks and ``memoryguard-kuberay demo`` use it; nothing in the
operator or the sidecar does. Installed with the ``[demo]`` extra.
"""
