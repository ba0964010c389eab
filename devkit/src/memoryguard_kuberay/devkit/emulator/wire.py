"""The pieces of the EMULATED API its modules share: the kinds it serves,
the error it answers with (a Kubernetes ``Status``, with ``details.causes`` when the real
server gives them) and its timestamps."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.causes = status, reason, message, causes



def now_iso(ahead_s: float = 0.0) -> str:
    t = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=ahead_s)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def status_doc(code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": code,
                           "reason": reason, "message": message}
    if causes:
        doc["details"] = {"causes": causes}
    return doc


@dataclasses.dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    schema: dict[str, Any] | None = None  # openAPIV3Schema, validated on writes when set

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN_KINDS = (
    Kind("", "v1", "pods", "Pod"),
    Kind("", "v1", "events", "Event"),
    Kind("", "v1", "configmaps", "ConfigMap"),
    Kind("", "v1", "namespaces", "Namespace", namespaced=False),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", status_subresource=True),
    Kind("coordination.k8s.io", "v1", "leases", "Lease"),
)
