"""The kopf operator: thin handlers (``handlers``), one guard's cycle
(``guarding``), the rotation state machine (``rotation``), pure patch and
budget builders (``patches``, ``budgets``), the one module that talks to the
Kubernetes API (``kube``), what guards may put into pods (``trust``), and
status and metrics. Runs with ``memoryguard-kuberay operator``.
"""
