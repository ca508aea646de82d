"""Step 6's grader: the student's deallocation rules in place of the reference's.

``orphans_of`` and ``useful_dead`` are plugged in alone (the reference's
``apply_policy`` and ``rebuild_orphans`` call them), then ``apply_policy`` with
both (``Lifetimes.apply_policy``), on programs that drop their values, under the
paper's three policies and the plain eager eviction (``rebuild_orphans=False``).
Every event must be the reference's: each dead storage evicted, kept or banished
when the reference does it, each orphan rebuilt when it rebuilds it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..runtime import lifetime
from ..runtime.lifetime import Lifetimes
from .compare import first_difference
from .grading import Check, needs, property_check
from .plug import plugged, reference
from .programs import Program, budget_for, listing, parse, run_program

SETTINGS: dict[str, dict[str, Any]] = {
    "eager": {"dealloc": "eager"},
    "eager without orphan rebuild": {"dealloc": "eager", "rebuild_orphans": False},
    "banish": {"dealloc": "banish"},
    "ignore": {"dealloc": "ignore"},
}
WEIGHTS = {"drop": 25, "read": 10}  # more deaths, and reads that rebuild what died
PLACES = {"apply_policy": Lifetimes, "orphans_of": lifetime, "useful_dead": lifetime}


# Programs that reach each rule (random programs reach them only now and then).
SCENARIOS = {
    # x3 is evicted while referenced; when its parent x2 dies, x3 is an orphan: eager
    # eviction rebuilds it from x2 first, so that its rebuild never needs x2's
    "an orphan": """
        x1 = leaf(8)
        x2 = tanh(x1)
        x3 = tanh(x2)
        evict x3
        del x2
        read x3
    """,
    # x3 is an orphan of x2 twice its size: rebuilding it would hold more bytes than
    # keeping x2, so x2 stays resident (useful) and x3 is rebuilt from it when read
    "an orphan larger than its parent": """
        x1 = leaf(8)
        x2 = tanh(x1)
        x3 = cat(x2, x1)
        evict x3
        del x2
        read x3
    """,
    # x4 is rebuilt as an orphan of x2, then evicted again unread: when x3 dies it is
    # not rebuilt a second time (x3 stays resident instead: x4's rebuild needs it)
    "an orphan rebuilt once": """
        x1 = leaf(8)
        x2 = tanh(x1)
        x3 = neg(x1)
        x4 = x2 + x3
        evict x4
        del x2
        evict x4
        del x3
        read x4
    """,
    # x3 dies resident and is evicted; x4, referenced, is evicted below it: when x2
    # dies, x4's rebuild would need x2 (through x3), so x2 stays resident while it does
    "a useful dead storage": """
        x1 = leaf(8)
        x2 = tanh(x1)
        x3 = tanh(x2)
        x4 = tanh(x3)
        del x3
        evict x4
        del x2
        read x4
    """,
}


def scenarios(settings: tuple[str, ...]) -> list[tuple[Program, str]]:
    return [(parse(text, 1.0), s) for text in SCENARIOS.values() for s in settings]


def same_deaths(
    module: ModuleType, case: tuple[Program, str], names: tuple[str, ...]
) -> str | None:
    functions = needs(module, *names)
    program, setting = case
    settings = SETTINGS[setting]
    budget, _ = budget_for(program, **settings)
    with reference():
        theirs = run_program(program, budget, **settings)
    with plugged(*((PLACES[n], n, f) for n, f in zip(names, functions, strict=True))):
        yours = run_program(program, budget, **settings)
    from ..runtime.errors import BudgetError

    if yours.error is not None and not isinstance(yours.error, BudgetError):
        raise yours.error
    return first_difference(program, budget, theirs, yours, setting=f"dealloc {setting}")


def _check(names: tuple[str, ...], settings: tuple[str, ...]) -> Any:
    def run(module: ModuleType, examples: int) -> None:
        from hypothesis import strategies as st

        from .strategies import fixed, programs

        cases = st.tuples(programs(min_lines=8, weights=WEIGHTS), st.sampled_from(settings))
        known = scenarios(settings) + [(p, s) for p in fixed() for s in settings]
        shown = lambda c: f"(dealloc {c[1]})\n{listing(c[0], **SETTINGS[c[1]])}"  # noqa: E731
        property_check(lambda c: same_deaths(module, c, names), cases, examples, known, shown)

    return run


CHECKS = [
    Check(
        "orphans_of",
        "plugged in alone: eager eviction rebuilds the orphans the reference rebuilds",
        _check(("orphans_of",), ("eager",)),
    ),
    Check(
        "useful_dead",
        "plugged in alone: a dead storage stays resident exactly while the reference keeps it",
        _check(("useful_dead",), ("eager",)),
    ),
    Check(
        "apply_policy",
        "plugged in with both: every death is handled as the reference handles it, under "
        "eager (with and without orphan rebuild), banish and ignore",
        _check(("apply_policy", "orphans_of", "useful_dead"), tuple(SETTINGS)),
    ),
]
