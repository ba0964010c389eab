"""The Kubernetes API's answers as exceptions: an error by its HTTP status
(404 NotFound, 409 Conflict, 410 Gone, 429 TooManyRequests, 5xx or no
answer ServerError), with the Status's reason, message and causes; and what
an eviction answered. Raised by ``kube.Kube``, caught by every caller."""

from __future__ import annotations

import enum
from collections.abc import Sequence

import aiohttp


class ApiError(Exception):
    """An answer of the API server other than success, or none at all
    (status 0: unreachable, a broken watch). Made by ``api_error``, which
    picks the subclass callers test for; ``status`` stays for logs."""

    def __init__(self, status: int, reason: str, message: str, causes: Sequence[str] = ()) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message
        self.causes = tuple(causes)  # the Status's details.causes messages (an eviction's 429 names the PDB)


class NotFound(ApiError):
    """404: the object (or its namespace) is not there."""


class Conflict(ApiError):
    """409: a stale resourceVersion, or the object already exists."""


class Gone(ApiError):
    """410: a watch or a continue token expired: list again."""


class TooManyRequests(ApiError):
    """429: throttled, or an eviction refused by a PodDisruptionBudget."""


class ServerError(ApiError):
    """5xx, or no answer (status 0): worth retrying."""


class EvictionAnswer(str, enum.Enum):
    EVICTED = "evicted"
    GONE = "gone"  # the pod is no longer there
    REFUSED = "refused"  # not now: retry later


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone, 429: TooManyRequests}


def api_error(status: int, reason: str, message: str, causes: Sequence[str] = ()) -> ApiError:
    cls = _BY_STATUS.get(status) or (ServerError if status == 0 or status >= 500 else ApiError)
    return cls(status, reason, message, causes)


async def _api_error(r: aiohttp.ClientResponse) -> ApiError:
    """The API's Status answer (or whatever came) as an ApiError."""
    try:
        doc = await r.json(content_type=None)
    except (aiohttp.ContentTypeError, ValueError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    details = doc.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return api_error(r.status, str(doc.get("reason", r.reason)), str(doc.get("message", ""))[:1024],
                    [str(c.get("message", ""))[:512] for c in (causes or [])[:4] if isinstance(c, dict)])
