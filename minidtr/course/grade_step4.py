"""Step 4's grader: the student's e* walk against ``minidtr.runtime.estar`` at every
score.

Each program runs on the reference policy with h_DTR, eager or banishing
deallocation, and a spy heuristic: at every score the runtime asks for, the
student's evicted ancestors, evicted descendants and c(e*) of the storage are
compared with the reference's (as sets of storage ids, and the cost to 1e-9), the
first difference noted; the run itself is the reference's.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from ..runtime import estar
from ..runtime.heuristics import make_heuristic
from .compare import storage_words
from .grading import Check, needs, property_check
from .plug import reference
from .programs import Program, budget_for, describe, listing, parse, run_program

POLICIES = ("eager", "banish")
# two evicted values in a row when a score is taken: a walk that stops after one step
# misses x2 among x5's evicted ancestors (budget 32 bytes), and x4 among x2's evicted
# descendants (budget 32 bytes: x3 and x4 evicted by hand, x7 makes room)
LONG_WALKS = [
    parse(
        """
        x1 = leaf(1)
        x2 = tanh(x1)
        x3 = leaf(1)
        x4 = tanh(x2)
        x5 = tanh(x4)
        x6 = tanh(x1)
        x7 = tanh(x1)
        """,
        0.0,
    ),
    parse(
        """
        x1 = leaf(1)
        x2 = tanh(x1)
        x3 = tanh(x2)
        x4 = tanh(x3)
        evict x3
        evict x4
        x5 = tanh(x1)
        x6 = tanh(x1)
        x7 = tanh(x1)
        """,
        0.5,
    ),
]


class Spy:
    """h_DTR, comparing the student's walk with the reference's at every score."""

    def __init__(self, student: Any, what: str):
        self.heuristic = make_heuristic("dtr")
        self.name, self.cost, self.formula = "dtr", "estar", self.heuristic.formula
        self.terms = self.heuristic.terms
        self.student, self.what = student, what
        self.first: str | None = None
        self.names: dict[int, str] = {}  # the program's names of the storages (Run.names)

    def score(self, storage: Any, context: Any) -> float:
        if self.first is None:
            self.first = self.compare(storage)
        return self.heuristic.score(storage, context)

    def compare(self, storage: Any) -> str | None:
        reference = getattr(estar, self.what)(storage)
        yours = self.student(storage)
        call = f"{self.what}({storage_words(storage, self.names)})"
        if self.what == "estar_cost":
            if isinstance(yours, int | float) and math.isclose(yours, reference, rel_tol=1e-9):
                return None
            parts = estar.evicted_ancestors(storage) + estar.evicted_descendants(storage)
            return (
                f"{call} returned {yours!r}; the reference {reference!r}, the cost of "
                f"{self.listed(parts)}"
            )
        try:
            mine = sorted(s.id for s in yours)
        except (TypeError, AttributeError):
            return f"{call} returned {yours!r}, not a list of storages"
        theirs = sorted(s.id for s in reference)
        if mine == theirs and len(list(yours)) == len(theirs):
            return None
        return f"{call} returned {self.listed(yours)}; the reference {self.listed(reference)}"

    def listed(self, storages: Any) -> str:
        return "[" + ", ".join(storage_words(s, self.names) for s in storages) + "]"


def same_walk(module: ModuleType, what: str, case: tuple[Program, str]) -> str | None:
    (student,) = needs(module, what)
    program, dealloc = case
    spy = Spy(student, what)
    budget, _ = budget_for(program, dealloc=dealloc)
    with reference():
        run = run_program(program, budget, names=spy.names, heuristic=spy, dealloc=dealloc)
    from ..runtime.errors import BudgetError

    if run.error is not None and not isinstance(run.error, BudgetError):
        raise run.error
    if spy.first is None:
        return None
    return f"{spy.first}\non this program (dealloc {dealloc}):\n{describe(program, budget)}"


def _check(what: str) -> Any:
    def run(module: ModuleType, examples: int) -> None:
        from hypothesis import strategies as st

        from .strategies import fixed, programs

        cases = st.tuples(programs(), st.sampled_from(POLICIES))
        known = [(p, d) for p in fixed() + LONG_WALKS for d in POLICIES]
        shown = lambda c: f"(dealloc {c[1]})\n{listing(c[0], dealloc=c[1])}"  # noqa: E731
        property_check(lambda c: same_walk(module, what, c), cases, examples, known, shown)

    return run


CHECKS = [
    Check(
        "evicted ancestors",
        "what rebuilding a storage would rebuild first, at every score",
        _check("evicted_ancestors"),
    ),
    Check(
        "evicted descendants",
        "what would need a storage to be rebuilt, at every score",
        _check("evicted_descendants"),
    ),
    Check("c(e*)", "the summed cost of both, at every score", _check("estar_cost")),
]
