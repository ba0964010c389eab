"""What MemoryGuard reads and changes in a RayCluster: which clusters a guard
takes (clusters.py) and their worker groups (groups.py), the sidecar
injection (injection.py), remediation patches (remediation.py, patches.py)
and their reviews (reviews.py), and KubeRay's rules for template changes
(kuberayrules.py)."""
