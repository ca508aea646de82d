"""Step 2's grader: the student's victim search and eviction loop in place of the
reference's.

``choose_victim`` is first compared with ``minidtr.runtime.victims.choose_victim`` on
made-up candidates (scores with ties, locked ones); then each function is plugged
into the reference policy in place of its own (``plug.plugged``) and must give the
same event log as the reference on the same programs, every budget eviction with
the same score, runner-up and shortlist, and the same ``BudgetError`` where the
budget cannot be met.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from ..runtime import eviction as eviction_module
from ..runtime import victims
from ..runtime.eviction import Eviction
from .compare import DECISION, first_difference
from .grading import Check, needs, property_check
from .plug import plugged, reference
from .programs import Program, budget_for, listing, run_program

HEURISTICS = ("dtr", "lru", "size")  # size and lru have many ties: the order decides


class Candidate:
    """A made-up candidate: what a search reads of a storage."""

    def __init__(self, id: int, score: float, locks: int):
        self.id, self.name, self.locks, self.score = id, f"op{id}", locks, score

    def __repr__(self) -> str:
        return f"#{self.id} (score {self.score}{', locked' if self.locks else ''})"


class TableHeuristic:
    """Scores from the candidates themselves (no terms: the shortlist has id, op, score)."""

    name = "table"

    def score(self, storage: Candidate, context: Any) -> float:
        return storage.score


def _choice_words(choice: Any) -> str:
    victim = None if choice.victim is None else f"#{choice.victim.id}"
    return (
        f"victim {victim}, score {choice.score}, runner-up {choice.runner_up}, "
        f"{choice.scored} scored, shortlist {choice.shortlist}"
    )


def same_choice(module: ModuleType, case: tuple[list[tuple[int, int]], bool]) -> str | None:
    (choose_victim,) = needs(module, "choose_victim")
    rows, record = case
    scores = (0.5, 1.0, 2.0, math.inf)
    pooled = [Candidate(i + 1, scores[s % 4], locked) for i, (s, locked) in enumerate(rows)]
    theirs = victims.choose_victim(pooled, TableHeuristic(), None, record)
    yours = choose_victim(pooled, TableHeuristic(), None, record)
    if not isinstance(yours, victims.Choice):
        return f"choose_victim returned {type(yours).__name__}, not a Choice"
    fields = ("victim", "score", "runner_up", "shortlist", "scored")
    differs = [f for f in fields if getattr(yours, f) != getattr(theirs, f)]
    if not differs:
        return None
    return (
        f"choose_victim(candidates, heuristic, context, record={record}) differs in "
        f"{', '.join(differs)} on the candidates {pooled} (in candidate order):\n"
        f"  the reference: {_choice_words(theirs)}\n  yours:         {_choice_words(yours)}"
    )


def _runs(program: Program, heuristic: str, *replacements: Any) -> str | None:
    budget, _ = budget_for(program)
    setting = f"heuristic {heuristic}"
    with reference():
        theirs = run_program(program, budget, heuristic=heuristic)
    with plugged(*replacements):
        yours = run_program(program, budget, heuristic=heuristic)
    _raise_if_student_failed(yours)
    message = first_difference(program, budget, theirs, yours, DECISION, setting)
    if message is None and theirs.error is not None and str(theirs.error) != str(yours.error):
        message = (
            f"both raise BudgetError at the same line, but the messages differ:\n"
            f"  the reference: {theirs.error}\n  yours:         {yours.error}\n"
            f"on this program ({setting}):\n{program}"
        )
    return message


def _raise_if_student_failed(run: Any) -> None:
    from ..runtime.errors import BudgetError

    if run.error is not None and not isinstance(run.error, BudgetError):
        raise run.error


def plugged_search(module: ModuleType, case: tuple[Program, str]) -> str | None:
    (choose_victim,) = needs(module, "choose_victim")
    program, heuristic = case
    return _runs(program, heuristic, (eviction_module, "choose_victim", choose_victim))


def plugged_loop(module: ModuleType, case: tuple[Program, str]) -> str | None:
    (make_room,) = needs(module, "make_room")
    program, heuristic = case
    return _runs(program, heuristic, (Eviction, "make_room", make_room))


def _candidates_check(module: ModuleType, examples: int) -> None:
    from hypothesis import strategies as st

    rows = st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0, 0, 0, 1])), max_size=8)
    fixed = [
        ([(0, 0), (0, 0)], True),
        ([(1, 1), (2, 0), (1, 0)], True),
        ([(3, 0)], False),
        ([], True),
    ]
    property_check(
        lambda c: same_choice(module, c), st.tuples(rows, st.booleans()), examples, fixed
    )


def _program_check(prop: Any, ratios: tuple[float, ...]) -> Any:
    def run(module: ModuleType, examples: int) -> None:
        from hypothesis import strategies as st

        from .strategies import fixed, programs

        cases = st.tuples(programs(ratios=ratios), st.sampled_from(HEURISTICS))
        known = [(p, h) for p in fixed() for h in HEURISTICS]
        property_check(lambda c: prop(module, c), cases, examples, known, _shown)

    return run


def _shown(case: tuple[Program, str]) -> str:
    program, heuristic = case
    return f"(heuristic {heuristic})\n{listing(program)}"


RATIOS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
CHECKS = [
    Check(
        "choose_victim alone",
        "the lowest unlocked score wins, the first among equals; the runner-up, the count "
        "and the shortlist are the reference's",
        _candidates_check,
    ),
    Check(
        "choose_victim in the runtime",
        "plugged into the reference policy, every eviction is the reference's",
        _program_check(plugged_search, RATIOS),
    ),
    Check(
        "make_room in the runtime",
        "plugged into the reference policy, every eviction is the reference's, and a budget "
        "that cannot be met raises the same BudgetError at the same line",
        _program_check(plugged_loop, (-0.5, *RATIOS)),
    ),
]
