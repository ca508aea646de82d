"""Step 3: the score and its terms (a reference solution).

Every heuristic of the paper is one formula with three switchable terms,

    score(t) = C(t) / (M(t) * S(t))

C is the cost term (below), M the size m(t) in bytes or 1, S the staleness s(t) =
now - last access or 1. The lowest score is evicted first.
"""

from __future__ import annotations

from minidtr.runtime.heuristics import MIN_STALENESS, ScoreContext
from minidtr.runtime.storage import Storage


def cost_term(storage: Storage, context: ScoreContext, cost: str) -> float:
    """C(t): ``estar`` c(t) + c(e*(t)), ``eq`` c(t) + c(eq(t)), ``local`` c(t),
    ``ancestors`` c(t) + the cost of its evicted ancestors, ``none`` 1."""
    if cost == "estar":
        return storage.cost + context.estar(storage)
    if cost == "eq":
        return storage.cost + context.eq(storage)
    if cost == "local":
        return storage.cost
    if cost == "ancestors":
        return storage.cost + context.ancestors(storage)
    if cost == "none":
        return 1.0
    raise ValueError(f"unknown cost term {cost!r}")


def score(
    storage: Storage,
    context: ScoreContext,
    cost: str = "estar",
    size: bool = True,
    staleness: bool = True,
) -> float:
    """The score of ``storage`` now; with the defaults, h_DTR."""
    value = cost_term(storage, context, cost)
    if size:
        value /= max(storage.nbytes, 1)
    if staleness:
        value /= max(context.clock - storage.last_access, MIN_STALENESS)
    return value
