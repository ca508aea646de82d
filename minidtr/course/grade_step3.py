"""Step 3's grader: the student's score against ``Heuristic.score`` at every decision.

Each program runs on the reference policy with a *spy* heuristic: at every score
the runtime asks for, it computes the reference's score and the student's for the
same storage and context, notes the first pair that differ (relative difference
over 1e-9) and hands the reference's back, so the run is the reference's and every
score the runtime really asked for is compared. Each of the paper's named heuristics
and a few points of its ablation grid are tried.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any, NamedTuple

from ..runtime.heuristics import NAMED, NEIGHBOURHOOD_COST, Heuristic, make_heuristic
from .compare import storage_words
from .grading import Check, needs, property_check
from .plug import reference
from .programs import Program, budget_for, describe, listing, parse, run_program

HEURISTICS = (*NAMED, "estar+nosize+stale", "local+size+nostale", "none+size+stale")
# x2 and its other child x4 evicted by hand: when x3 is scored (x7 makes room), e*(x3) is
# {x2} but x2's class holds x4 too, so c(eq) is twice c(e*) (budget 32 bytes)
EQ_BEYOND_ESTAR = parse(
    """
    x1 = leaf(1)
    x2 = tanh(x1)
    x3 = tanh(x2)
    x4 = tanh(x2)
    evict x2
    evict x4
    x5 = tanh(x1)
    x6 = tanh(x1)
    x7 = tanh(x1)
    """,
    0.5,
)


class Seen(NamedTuple):
    """A storage's terms as the reference scored it: read before the student's ``score``
    runs, which may change them (``storage.last_access``, say)."""

    cost: float
    nbytes: int
    last_access: float
    clock: float


class Spy:
    """A heuristic that scores with the reference and compares the student's ``score``."""

    def __init__(self, heuristic: Heuristic, student: Any):
        self.reference = heuristic
        self.student = student
        self.name = heuristic.name
        self.cost = heuristic.cost
        self.formula = heuristic.formula
        self.terms = heuristic.terms
        self.first: str | None = None
        self.names: dict[int, str] = {}  # the program's names of the storages (Run.names)

    def score(self, storage: Any, context: Any) -> float:
        theirs = self.reference.score(storage, context)
        h = self.reference
        before = Seen(storage.cost, storage.nbytes, storage.last_access, context.clock)
        yours = self.student(storage, context, h.cost, h.size, h.staleness)
        if self.first is None and not _close(yours, theirs):
            self.first = self.describe(storage, context, before, yours, theirs)
        return theirs

    def describe(self, storage: Any, context: Any, seen: Seen, yours: Any, theirs: float) -> str:
        h = self.reference
        terms = [f"c = {seen.cost:g}"]
        if h.cost in NEIGHBOURHOOD_COST:
            notation, value = NEIGHBOURHOOD_COST[h.cost]
            terms.append(f"{notation} = {value(storage, context):g}")
        if h.cost == "eq":
            terms[-1] += f" (c(e*) = {context.estar(storage):g}: a class may hold more)"
        terms.append(f"m = {seen.nbytes} bytes")
        terms.append(
            f"s = {seen.clock - seen.last_access:g} (clock {seen.clock:g} - last "
            f"access {seen.last_access:g})"
        )
        call = (
            f"score({storage_words(storage, self.names)}, context, cost={h.cost!r}, size={h.size}, "
            f"staleness={h.staleness})"
        )
        return (
            f"{call} returned {yours!r}; the reference ({h.name}: {h.formula}) gives "
            f"{theirs!r}, with {', '.join(terms)}"
        )


def _close(yours: Any, theirs: float) -> bool:
    if not isinstance(yours, int | float):
        return False
    if math.isinf(theirs) or math.isinf(yours):
        return yours == theirs
    return math.isclose(yours, theirs, rel_tol=1e-9, abs_tol=1e-300)


def same_scores(module: ModuleType, case: tuple[Program, str]) -> str | None:
    (score,) = needs(module, "score")
    program, name = case
    spy = Spy(make_heuristic(name), score)
    budget, _ = budget_for(program)
    with reference():
        run = run_program(program, budget, names=spy.names, heuristic=spy)
    from ..runtime.errors import BudgetError

    if run.error is not None and not isinstance(run.error, BudgetError):
        raise run.error
    if spy.first is None:
        return None
    return f"{spy.first}\non this program (heuristic {name}):\n{describe(program, budget)}"


def _check(names: tuple[str, ...]) -> Any:
    def run(module: ModuleType, examples: int) -> None:
        from hypothesis import strategies as st

        from .strategies import fixed, programs

        cases = st.tuples(programs(), st.sampled_from(names))
        known = [(p, n) for p in [*fixed(), EQ_BEYOND_ESTAR] for n in names]
        property_check(lambda c: same_scores(module, c), cases, examples, known, _shown)

    return run


def _shown(case: tuple[Program, str]) -> str:
    return f"(heuristic {case[1]})\n{listing(case[0])}"


CHECKS = [
    Check(
        "h_DTR",
        "score with the defaults is h_DTR = (c + c(e*)) / (m * s) at every decision",
        _check(("dtr",)),
    ),
    Check(
        "the paper's heuristics",
        "every named heuristic (dtr_eq, dtr_local, msps, lru, size) scores as the reference",
        _check(tuple(n for n in NAMED if n != "dtr")),
    ),
    Check(
        "the ablation grid",
        "points of the grid '<cost>+<size|nosize>+<stale|nostale>' score as the reference",
        _check(HEURISTICS[len(NAMED) :]),
    ),
]
