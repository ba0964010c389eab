"""The decision policy: from a pod's samples to ``none``/``remediate``/``rotate``.

Purely computational: no I/O, no clock, no Kubernetes. The operator, the
``simulate`` command and the tests all call the same two entry points:

- ``PodWindow.add(sample)`` folds a new sample into the pod's state
  (amortised O(1); the trend is refitted once per bucket, not per sample);
- ``decide(settings=..., window=..., history=..., now_s=...)`` returns the
  decisions, each with a reason a person can read and its evidence;
- ``urgency(decision)`` orders pods that want a rotation (nearest harm first).
"""

from memoryguard_kuberay.core.policy.decide import decide, urgency
from memoryguard_kuberay.core.policy.types import Action, Decision, Evidence, Reason, RotationHistory
from memoryguard_kuberay.core.policy.window import PodWindow

__all__ = ["Action", "Decision", "Evidence", "PodWindow", "Reason", "RotationHistory", "decide", "urgency"]
