"""Eviction heuristics: lower score = evicted first.

Every heuristic of the paper is one formula with three switchable terms,

    score(t) = C(t) / (M(t) * S(t))

where the cost term C is one of

    estar      c(t) + c(e*(t))       exact evicted neighbourhood: evicted ancestors and
                                     evicted descendants (h_DTR)
    eq         c(t) + c(eq(t))       union-find approximation (h_DTR^eq)
    local      c(t)                  (h_DTR^local)
    ancestors  c(t) + c(evicted ancestors)   (h_MSPS, from Capuchin)
    none       1

M is the size m(t) in bytes or 1, and S the staleness s(t) = now - last
access or 1. So h_LRU is ``none`` with staleness only and h_size is ``none``
with size only. ``random`` draws a seeded uniform score.

To add a heuristic: add a cost term to ``COST_TERMS`` or a name to
``NAMED``. Any point of the paper's ablation grid is selected by a name of
the form ``"<cost>+<size|nosize>+<stale|nostale>"``, e.g. ``"eq+size+nostale"``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .neighbourhood import evicted_ancestors_cost
from .storage import Storage

if TYPE_CHECKING:
    from .allocator import Allocator

MIN_STALENESS = 1e-9
_FLOOR = np.full(1024, MIN_STALENESS)


def staleness_floor(n: int) -> np.ndarray:
    """``n`` copies of ``MIN_STALENESS`` (a view of one shared array): ``np.maximum`` of
    two arrays takes a third of the time of an array and a scalar."""
    global _FLOOR
    if len(_FLOOR) < n:
        _FLOOR = np.full(max(n, 2 * len(_FLOOR)), MIN_STALENESS)
    return _FLOOR[:n]


COST_TERMS: dict[str, Callable[[Storage, Allocator], float]] = {
    "estar": lambda s, a: s.cost + a.neighbourhood.cost(s),
    "eq": lambda s, a: s.cost + a.eq_classes.cost(s),
    "local": lambda s, a: s.cost,
    "ancestors": lambda s, a: s.cost + evicted_ancestors_cost(s),
    "none": lambda s, a: 1.0,
}

# The neighbourhood part of each cost term, for the event log (``Heuristic.terms``).
NEIGHBOURHOOD_COST: dict[str, tuple[str, Callable[[Storage, Allocator], float]]] = {
    "estar": ("c(e*)", lambda s, a: a.neighbourhood.cost(s)),
    "eq": ("c(eq)", lambda s, a: a.eq_classes.cost(s)),
    "ancestors": ("c(evicted ancestors)", lambda s, a: evicted_ancestors_cost(s)),
}


# The terms ``Heuristic.scores`` computes on arrays; a cost term added to (or replaced in)
# the two dicts above is scored by ``Heuristic.score``, one storage at a time.
BUILT_IN_COST_TERMS = dict(COST_TERMS)
BUILT_IN_NEIGHBOURHOOD_COST = dict(NEIGHBOURHOOD_COST)


@dataclass(frozen=True)
class Heuristic:
    """score = cost_term / (size? * staleness?) — see the module docstring."""

    name: str
    cost: str = "estar"
    size: bool = True
    staleness: bool = True

    def __post_init__(self):
        if self.cost not in COST_TERMS:
            raise ValueError(f"unknown cost term {self.cost!r}; expected one of {list(COST_TERMS)}")

    def score(self, storage: Storage, allocator: Allocator) -> float:
        value = COST_TERMS[self.cost](storage, allocator)
        if self.size:
            value /= max(storage.nbytes, 1)
        if self.staleness:
            value /= max(allocator.clock - storage.last_access, MIN_STALENESS)
        return value

    @property
    def vectorized(self) -> bool:
        """Whether ``scores`` gives this heuristic's scores: its cost term is built in."""
        cost = self.cost
        return (
            cost in BUILT_IN_COST_TERMS
            and COST_TERMS[cost] is BUILT_IN_COST_TERMS[cost]
            and NEIGHBOURHOOD_COST.get(cost) is BUILT_IN_NEIGHBOURHOOD_COST.get(cost)
        )

    def scores(
        self,
        cost: np.ndarray,
        neighbourhood: np.ndarray | float | None,
        size: np.ndarray,
        staleness: np.ndarray | None,
        unit: np.ndarray | None = None,
    ) -> np.ndarray:
        """``score`` of many storages at once, from arrays of their cost c, neighbourhood
        cost (``NEIGHBOURHOOD_COST``'s term, ignored when the cost term has none), size as
        a float ``max(m, 1)``, staleness ``clock - last_access`` (overwritten; ignored
        without the staleness term) and ``unit``, the cost term ``none``'s 1.0 per storage
        (ones when omitted; the candidate table's has +inf for rows it does not score).
        The same floating-point operations in the same order as ``score``, so the same
        floats (eviction.py's fast path; ``score`` stays the definition); the arrays
        given are not modified, except ``staleness``."""
        fresh = False  # whether ``top`` is an array of our own, to divide in place
        if self.cost == "none":
            top = np.ones(len(cost)) if unit is None else unit
        elif self.cost == "local" or (type(neighbourhood) is float and neighbourhood == 0.0):
            top = cost  # c + 0.0 is c (costs are not -0.0)
        else:
            top = cost + neighbourhood
            fresh = True
        if self.staleness:
            staleness = np.maximum(staleness, staleness_floor(len(staleness)), out=staleness)
            if self.size:
                value = np.divide(top, size, out=top if fresh else None)
                value /= staleness
                return value
            return np.divide(top, staleness, out=top if fresh else None)
        if self.size:
            return np.divide(top, size, out=top if fresh else None)
        return top if fresh else np.array(top, float)

    def ratio_scores(self, ratio: np.ndarray, staleness: np.ndarray | None) -> np.ndarray:
        """``scores`` from ``ratio``, each storage's cost term divided by its size term
        (by the same operations: ``CandidateTable.ratios``) and its staleness ``clock -
        last_access`` (ignored without the staleness term): the scores, in ``staleness``
        (overwritten), or ``ratio`` itself (not to be modified) without staleness."""
        if not self.staleness:
            return ratio
        staleness = np.maximum(staleness, staleness_floor(len(staleness)), out=staleness)
        return np.divide(ratio, staleness, out=staleness)

    @property
    def formula(self) -> str:
        """The score in the paper's notation, e.g. ``(c + c(e*)) / (m * s)``."""
        top = {"local": "c", "none": "1"}.get(self.cost)
        if top is None:
            top = f"(c + {NEIGHBOURHOOD_COST[self.cost][0]})"
        bottom = [name for name, used in (("m", self.size), ("s", self.staleness)) if used]
        if not bottom:
            return top
        return f"{top} / " + (bottom[0] if len(bottom) == 1 else f"({' * '.join(bottom)})")

    def terms(self, storage: Storage, allocator: Allocator) -> dict[str, float]:
        """The parts of ``storage``'s score, for the event log: its cost c, its
        neighbourhood's cost (when the cost term has one), its size m and staleness s."""
        out = {"cost": storage.cost}
        if self.cost in NEIGHBOURHOOD_COST:
            out["neighbourhood"] = NEIGHBOURHOOD_COST[self.cost][1](storage, allocator)
        out["nbytes"] = storage.nbytes
        out["staleness"] = allocator.clock - storage.last_access
        return out


class RandomHeuristic:
    """h_rand: a uniform random score from a generator seeded per runtime."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    formula = "uniform random"

    def score(self, storage: Storage, allocator: Allocator) -> float:
        return self.rng.random()

    def terms(self, storage: Storage, allocator: Allocator) -> dict[str, float]:
        return {"nbytes": storage.nbytes, "staleness": allocator.clock - storage.last_access}


NAMED: dict[str, tuple[str, bool, bool]] = {
    "dtr": ("estar", True, True),
    "dtr_eq": ("eq", True, True),
    "dtr_local": ("local", True, True),
    "msps": ("ancestors", True, False),
    "lru": ("none", False, True),
    "size": ("none", True, False),
}

HEURISTIC_NAMES = (*NAMED, "random")
TRACE_ONLY = ("belady", "learned")  # minidtr.sim.clairvoyant: need a trace


def ablation_names() -> list[str]:
    """The paper's grid: {estar, eq, local, none} x {size, nosize} x {stale, nostale}."""
    return [
        f"{cost}+{size}+{stale}"
        for cost in ("estar", "eq", "local", "none")
        for size in ("size", "nosize")
        for stale in ("stale", "nostale")
    ]


def make_heuristic(name: str, seed: int = 0) -> Heuristic | RandomHeuristic:
    """A heuristic by name: one of ``HEURISTIC_NAMES`` or an ablation-grid name."""
    if name == "random":
        return RandomHeuristic(seed)
    if name.split("+")[0] in TRACE_ONLY:
        raise ValueError(
            f"heuristic {name!r} reads when each storage is used next from a recorded trace, "
            "so it runs only in the simulator (minidtr sim LOG --heuristics "
            f"{name}, or sim.simulate(trace, heuristic={name!r})), not in a live Runtime"
        )
    if name in NAMED:
        cost, size, staleness = NAMED[name]
        return Heuristic(name, cost, size, staleness)
    parts = name.split("+")
    if (
        len(parts) == 3
        and parts[0] in COST_TERMS
        and parts[1] in ("size", "nosize")
        and parts[2] in ("stale", "nostale")
    ):
        return Heuristic(name, parts[0], parts[1] == "size", parts[2] == "stale")
    raise ValueError(
        f"unknown heuristic {name!r}; expected one of {list(HEURISTIC_NAMES)} "
        f"or '<cost>+<size|nosize>+<stale|nostale>' with cost in {list(COST_TERMS)}"
    )
