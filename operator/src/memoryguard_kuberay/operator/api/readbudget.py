"""What one reader may take of the API's answers in one pass (a guard's
RayClusters in one cycle): charged by ``Kube`` as each answer is read."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ReadBudget:
    """The bytes of answers one reader may take in one pass (a guard's
    RayClusters in one cycle): what the objects a tenant writes can cost
    the operator, bounded by configuration, not by their size. A read that
    starts within it is finished, and no answer is over ``limit``, so at
    most twice ``limit`` is read; none starts after. Made for one pass and
    dropped."""

    limit: int
    spent_bytes: int = 0
    cut: bool = False  # a read was not made: what it would have brought is unknown

    def charge(self, n: int) -> None:
        self.spent_bytes += n

    @property
    def spent(self) -> bool:
        return self.spent_bytes >= self.limit
