"""Eviction heuristics: lower score = evicted first.

Every heuristic of the paper is one formula with three switchable terms,

    score(t) = C(t) / (M(t) * S(t))

where the cost term C is one of

    estar      c(t) + c(e*(t))       exact evicted neighbourhood: evicted ancestors and
                                     evicted descendants (h_DTR; estar.py)
    eq         c(t) + c(eq(t))       union-find approximation (h_DTR^eq; eqclasses.py)
    local      c(t)                  (h_DTR^local)
    ancestors  c(t) + c(evicted ancestors)   (h_MSPS, from Capuchin)
    none       1

M is the size m(t) in bytes or 1, and S the staleness s(t) = now - last
access or 1. So h_LRU is ``none`` with staleness only and h_size is ``none``
with size only. ``random`` draws a seeded uniform score.

A heuristic scores a storage against a ``ScoreContext``: the clock and the
neighbourhood terms, which is all a score may read of the runtime.

To add a heuristic: add a cost term to ``COST_TERMS`` or a name to
``NAMED``, or pass any object with a ``name`` and ``score(storage, context)``
to ``md.Runtime(heuristic=...)``. Any point of the paper's ablation grid is
selected by a name of the form ``"<cost>+<size|nosize>+<stale|nostale>"``,
e.g. ``"eq+size+nostale"``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from .storage import Storage

MIN_STALENESS = 1e-9  # the staleness of a storage accessed at this very tick


class ScoreContext:
    """What a score may read of the runtime, as of one decision: the logical ``clock``,
    and the neighbourhood terms of a resident storage: ``estar(t)`` = c(e*(t)),
    ``eq(t)`` = c(eq(t)), ``ancestors(t)`` = the cost of its evicted ancestors, and
    ``descendant_ids(t)``, the ids of its evicted descendants (what would need it)."""

    __slots__ = ("clock", "_neighbourhood", "_eq_classes")

    def __init__(self, clock: float, neighbourhood: Any, eq_classes: Any):
        self.clock = clock
        self._neighbourhood = neighbourhood
        self._eq_classes = eq_classes

    def estar(self, storage: Storage) -> float:
        return self._neighbourhood.estar_cost(storage)

    def eq(self, storage: Storage) -> float:
        return self._eq_classes.cost(storage)

    def ancestors(self, storage: Storage) -> float:
        return self._neighbourhood.ancestors_cost(storage)

    def descendant_ids(self, storage: Storage) -> list[int]:
        return self._neighbourhood.descendant_ids(storage)


COST_TERMS: dict[str, Callable[[Storage, ScoreContext], float]] = {
    "estar": lambda s, context: s.cost + context.estar(s),
    "eq": lambda s, context: s.cost + context.eq(s),
    "local": lambda s, context: s.cost,
    "ancestors": lambda s, context: s.cost + context.ancestors(s),
    "none": lambda s, context: 1.0,
}


class NeighbourhoodTerm(NamedTuple):
    """The neighbourhood part of a cost term: its name in the paper and its value."""

    notation: str
    value: Callable[[Storage, ScoreContext], float]


# The neighbourhood part of each cost term, for the event log (``Heuristic.terms``).
NEIGHBOURHOOD_COST: dict[str, NeighbourhoodTerm] = {
    "estar": NeighbourhoodTerm("c(e*)", lambda s, context: context.estar(s)),
    "eq": NeighbourhoodTerm("c(eq)", lambda s, context: context.eq(s)),
    "ancestors": NeighbourhoodTerm("c(evicted ancestors)", lambda s, context: context.ancestors(s)),
}


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

    def score(self, storage: Storage, context: ScoreContext) -> float:
        value = COST_TERMS[self.cost](storage, context)
        if self.size:
            value /= max(storage.nbytes, 1)
        if self.staleness:
            value /= max(context.clock - storage.last_access, MIN_STALENESS)
        return value

    @property
    def formula(self) -> str:
        """The score in the paper's notation, e.g. ``(c + c(e*)) / (m * s)``."""
        top = {"local": "c", "none": "1"}.get(self.cost)
        if top is None:
            top = f"(c + {NEIGHBOURHOOD_COST[self.cost].notation})"
        bottom = [name for name, used in (("m", self.size), ("s", self.staleness)) if used]
        if not bottom:
            return top
        return f"{top} / " + (bottom[0] if len(bottom) == 1 else f"({' * '.join(bottom)})")

    def terms(self, storage: Storage, context: ScoreContext) -> dict[str, float]:
        """The parts of ``storage``'s score, for the event log: its cost c, its
        neighbourhood's cost (when the cost term has one), its size m and staleness s."""
        out = {"cost": storage.cost}
        if self.cost in NEIGHBOURHOOD_COST:
            out["neighbourhood"] = NEIGHBOURHOOD_COST[self.cost].value(storage, context)
        out["nbytes"] = storage.nbytes
        out["staleness"] = context.clock - storage.last_access
        return out


class RandomHeuristic:
    """h_rand: a uniform random score from a generator seeded per runtime."""

    name = "random"
    formula = "uniform random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def score(self, storage: Storage, context: ScoreContext) -> float:
        return self.rng.random()

    def terms(self, storage: Storage, context: ScoreContext) -> dict[str, float]:
        return {"nbytes": storage.nbytes, "staleness": context.clock - storage.last_access}


class WindowHeuristic:
    """``window``, under ``fit="contiguous"`` only (``window.py``): rather than the
    lowest-scoring values wherever they lie, evict the run of adjacent blocks of the
    arena (free blocks included) that frees a block large enough at the lowest total
    cost, as Coop (NeurIPS 2023) does. A value's cost there is h_DTR's cost term over its
    staleness, (c + c(e*)) / s: its h_DTR score times its size, so that a window of many
    small values weighs what they would cost to recompute, not their count. With
    ``once`` (the default) an evicted storage in the e* of several values of a window
    counts once (``window.WindowCosts.run_cost``); without, each value's e* counts on its
    own. Asked for one victim (a budget lowered under the byte rule, entering a runtime),
    it scores as h_DTR."""

    name = "window"
    cost = "estar"  # the neighbourhood term it reads, kept up to date (``Eviction.track``)
    window = True
    formula = "sum over a window of (c + c(e*)) / s, e* counted once"

    def __init__(self, once: bool = True):
        self.dtr = Heuristic("window", "estar", True, True)
        self.once = once

    def score(self, storage: Storage, context: ScoreContext) -> float:
        return self.dtr.score(storage, context)

    def terms(self, storage: Storage, context: ScoreContext) -> dict[str, float]:
        return self.dtr.terms(storage, context)

    def window_cost(self, storage: Storage, context: ScoreContext) -> float:
        """What evicting ``storage`` costs in a window: (c + c(e*)) / s."""
        stale = max(context.clock - storage.last_access, MIN_STALENESS)
        return COST_TERMS["estar"](storage, context) / stale


NAMED: dict[str, tuple[str, bool, bool]] = {
    "dtr": ("estar", True, True),
    "dtr_eq": ("eq", True, True),
    "dtr_local": ("local", True, True),
    "msps": ("ancestors", True, False),
    "lru": ("none", False, True),
    "size": ("none", True, False),
}

HEURISTIC_NAMES = (*NAMED, "random", "learned")
TRACE_ONLY = ("belady",)  # minidtr.sim.clairvoyant: needs a trace to read ahead in


def ablation_names() -> list[str]:
    """The paper's grid: {estar, eq, local, none} x {size, nosize} x {stale, nostale}."""
    return [
        f"{cost}+{size}+{stale}"
        for cost in ("estar", "eq", "local", "none")
        for size in ("size", "nosize")
        for stale in ("stale", "nostale")
    ]


def make_heuristic(name: str, seed: int = 0) -> Any:
    """A heuristic by name: one of ``HEURISTIC_NAMES``, an ablation-grid name, or
    ``window`` (which needs ``fit="contiguous"``: ``RuntimeOptions`` checks)."""
    if name == "random":
        return RandomHeuristic(seed)
    if name.split("+")[0] == "learned":
        from .learned import Learned

        return Learned(name)
    if name == "window":
        return WindowHeuristic()
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
        f"unknown heuristic {name!r}; expected one of {list(HEURISTIC_NAMES)}, "
        f"'<cost>+<size|nosize>+<stale|nostale>' with cost in {list(COST_TERMS)}, "
        "or 'window' (with fit='contiguous')"
    )
