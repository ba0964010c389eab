"""What MemoryGuard changes in a RayCluster: which clusters a guard takes
(clusters.py), the sidecar injection (injection.py), remediation patches
(remediation.py, patches.py) and their reviews (reviews.py), KubeRay's rules
for template changes (kuberayrules.py), and the clean-up on delete
(finalizer.py)."""
