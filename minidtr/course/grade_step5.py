"""Step 5's grader: the student's ``lock`` and ``rematerialize`` in place of the
reference's (``Rematerializer.lock``, ``Rematerializer.rematerialize``).

Each is plugged into the reference policy (``plug.plugged``) and must give the
reference's event log on the same programs: the same evictions and remats in the
same order, every remat with the same cascade (its number, the access that
triggered it, the storage whose rebuild needed it), the same values read, and
every lock released by the end of each access.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ..runtime.remat import Rematerializer
from .compare import CASCADE, first_difference, storage_words
from .grading import Check, needs, property_check
from .plug import plugged, reference
from .programs import Program, budget_for, describe, listing, parse, run_program

HEURISTICS = ("dtr", "lru", "msps")  # msps: no staleness, the access locks at once
# x6's input x4 is resident when x6 asks for its inputs, and evicted to make room for
# rebuilding x3: it must be rebuilt before x6 runs (the inputs resident at first are
# locked only once the evicted ones are back)
DEFERRED = parse(
    """
    x1 = leaf(1)
    x2 = tanh(x1)
    x3 = tanh(x2)
    x4 = tanh(x1)
    x5 = tanh(x2)
    x6 = x3 - x4
    """,
    0.0,
)
# x5's inputs are both evicted: x3, whose rebuild needs x2's too (16 bytes), goes before
# x4 (8 bytes), the most memory first
MOST_NEED_FIRST = parse(
    """
    x1 = leaf(1)
    x2 = tanh(x1)
    x3 = tanh(x2)
    x4 = tanh(x1)
    evict x2
    evict x3
    evict x4
    x5 = x3 + x4
    """,
    0.0,
)
# x7's inputs x3 and x2 are evicted (to make room for x4 to x6), their rebuilds needing
# as much: the newest, x3, goes first
NEWEST_FIRST = parse(
    """
    x1 = leaf(1)
    x2 = tanh(x1)
    x3 = tanh(x1)
    x4 = tanh(x1)
    x5 = tanh(x1)
    x6 = tanh(x1)
    del x1
    x7 = x3 + x2
    """,
    0.0,
)


def _locks_left(
    number: int, env: dict[str, Any], allocator: Any, found: list[str], names: dict[int, str]
) -> None:
    """After a line, no storage the program can reach may still be locked."""
    if found:
        return
    seen: set[int] = set()
    stack = [t.cell.storage for t in env.values()] + list(allocator.eviction.candidates)
    while stack:
        storage = stack.pop()
        if id(storage) in seen:
            continue
        seen.add(id(storage))
        if storage.locks:
            what = storage_words(storage, names)
            found.append(f"after line {number + 1}, {what} is still locked ({storage.locks})")
            return
        stack.extend(storage.parents)


def _resident_on_return(name: str, function: Any, found: list[str], names: dict[int, str]) -> Any:
    """``function`` (lock or rematerialize), noting the first input it leaves evicted: the
    op that asked would run on a missing input."""

    def checked(remat: Any, storages: Any, *args: Any) -> Any:
        locked = function(remat, storages, *args)
        for storage in storages:
            if not found and storage.buffer is None and storage.allocator is remat.allocator:
                found.append(
                    f"{storage_words(storage, names)}, an input of the access, is evicted when "
                    f"{name}() returns: the op would run without it (an input resident at "
                    "first may be evicted while others are rebuilt: rebuild it too)"
                )
        return locked

    return checked


def same_remats(
    module: ModuleType, case: tuple[Program, str], names: tuple[str, ...]
) -> str | None:
    functions = needs(module, *names)
    program, heuristic = case
    budget, _ = budget_for(program)
    setting = f"heuristic {heuristic}"
    with reference():
        theirs = run_program(program, budget, heuristic=heuristic)
    locked: list[str] = []
    evicted: list[str] = []
    known: dict[int, str] = {}  # the program's names of the storages (Run.names)
    checked = [
        _resident_on_return(n, f, evicted, known) for n, f in zip(names, functions, strict=True)
    ]
    with plugged(*((Rematerializer, n, f) for n, f in zip(names, checked, strict=True))):
        yours = run_program(
            program,
            budget,
            lambda n, e, a: _locks_left(n, e, a, locked, known),
            names=known,
            heuristic=heuristic,
        )
    from ..runtime.errors import BudgetError

    if evicted:
        return f"{evicted[0]}\non this program ({setting}):\n{describe(program, budget)}"
    if yours.error is not None and not isinstance(yours.error, BudgetError):
        raise yours.error
    message = first_difference(program, budget, theirs, yours, CASCADE, setting)
    listing = describe(program, budget)
    if message is None and locked:
        message = f"{locked[0]}: every lock must be released when its access is done\n{listing}"
    if message is None:
        for key, value in theirs.values.items():
            if not np.array_equal(yours.values.get(key), value):
                return f"{key} read {yours.values.get(key)!r}; the value is {value!r}\n{listing}"
    return message


def _check(names: tuple[str, ...]) -> Any:
    def run(module: ModuleType, examples: int) -> None:
        from hypothesis import strategies as st

        from .strategies import fixed, programs

        cases = st.tuples(programs(max_lines=30), st.sampled_from(HEURISTICS))
        known = [(p, h) for p in fixed() for h in HEURISTICS]
        known += [(DEFERRED, "dtr"), (DEFERRED, "msps")]  # x4 evicted and rebuilt; locked
        known += [(MOST_NEED_FIRST, "dtr"), (NEWEST_FIRST, "dtr")]  # the order of rebuilds
        shown = lambda c: f"(heuristic {c[1]})\n{listing(c[0])}"  # noqa: E731
        property_check(lambda c: same_remats(module, c, names), cases, examples, known, shown)

    return run


CHECKS = [
    Check(
        "lock",
        "plugged in alone: inputs all resident are locked and touched; otherwise rematerialize",
        _check(("lock",)),
    ),
    Check(
        "rematerialize",
        "plugged in with lock: every remat, its order and its cascade are the reference's, "
        "the values read are the same, and no lock outlives its access",
        _check(("lock", "rematerialize")),
    ),
]
