"""Accelerates ``victims.choose_victim`` for ``learned`` with h_DTR's cost term: the same
victim, score and count of candidates scored, with e* computed only for the candidates
that can win.

``Learned.score`` is (c + c(e*)) / m / D, and c(e*) >= 0, so the same operations with
c(e*) = 0 give a lower bound on each candidate's score (dividing by the same positive
numbers keeps the order, rounding included). The candidates are taken in the order of
their bounds, each given its exact score, until the next bound is above the lowest exact
score found: no candidate after it can win. c(e*) (the closures of the evicted
neighbourhood, ``closures.py``) is most of what a search costs, and most candidates
border no evicted value or score far above the victim. Among equal scores the first in
candidate order wins, as in the loop. ``Learned.divisors`` (m and D) is asked for every
candidate, as the loop does, so ``Learned``'s counts of predicted and guessed distances
stay the same. With events recorded (the shortlist names the lowest few, exactly) the
loop decides.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..heuristics import COST_TERMS
from ..learned import Learned, divided
from ..victims import Choice, pool_settings

if TYPE_CHECKING:
    from .search import TableSearch


def handles(heuristic: Any, built_in: dict) -> bool:
    """Whether ``choose_learned`` gives ``heuristic``'s decisions: ``learned`` with h_DTR's
    cost term, as built in (``built_in``: ``search.BUILT_IN_COST_TERMS``)."""
    return (
        type(heuristic) is Learned
        and heuristic.cost == "estar"
        and COST_TERMS["estar"] is built_in["estar"]
    )


def choose_learned(search: TableSearch, runtime: Any, whole: bool = False) -> Choice:
    """The lowest-scoring unlocked candidate of the pool, as ``victims.choose_victim``."""
    eviction, table = search.eviction, search.table
    learned: Learned = runtime.heuristic
    table.sync()
    rows = search.pool_rows(*pool_settings(runtime, whole), table.rows)
    pooled = list(map(table.storages.__getitem__, rows.tolist()))
    if runtime.events is not None:
        return search.loop(pooled, runtime)
    eviction.track("estar")
    context = eviction.context
    eviction.scoring = True
    try:
        return lowest(learned, pooled, context)
    finally:
        eviction.scoring = False


def lowest(learned: Learned, pooled: list, context: Any) -> Choice:
    divisors = [learned.divisors(storage, context) for storage in pooled]
    bounds = [divided(s.cost, d) for s, d in zip(pooled, divisors, strict=True)]
    best, best_score = None, math.inf
    for i in sorted(range(len(pooled)), key=bounds.__getitem__):
        if bounds[i] > best_score:
            break
        storage = pooled[i]
        score = divided(storage.cost + context.estar(storage), divisors[i])
        if score < best_score or best is None or (score == best_score and i < best):
            best, best_score = i, score
    victim = None if best is None else pooled[best]
    return Choice(victim, best_score, None, None, len(pooled))
