"""Comparing two runs of a program event by event, and saying in words where they part.

The runs are of the same program on fresh allocators, so storage ids and the clock
start from zero in both and the event logs can be compared line by line. The first
event that differs (or the error that one run met and the other did not) is
described with the program's own names (``x3``), the line that was running, and
both events.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .grading import raised
from .programs import Program, Run, describe

BASIC = ("event", "id", "reason")  # what every comparison looks at
DECISION = (*BASIC, "score", "runner_up", "candidates")  # a search's record too
CASCADE = (*BASIC, "cascade", "trigger", "parent")  # where a remat sits in its cascade

VERBS = {
    "alloc": "allocated",
    "evict": "evicted",
    "remat": "rematerialized",
    "free": "freed",
    "banish": "banished",
}


def first_difference(
    program: Program,
    budget: int | None,
    reference: Run,
    yours: Run,
    fields: Sequence[str] = BASIC,
    setting: str = "",
) -> str | None:
    """None when both runs did the same (the ``fields`` of every event, and the same
    error if any), else what differed first, in words, with the program."""
    head = _where(program, budget, setting)
    for n, (mine, theirs) in enumerate(zip(yours.events, reference.events, strict=False)):
        differs = [f for f in fields if not same(mine.get(f), theirs.get(f))]
        if differs:
            return (
                f"event {n + 1} differs ({', '.join(differs)}):\n"
                f"  the reference {event_words(theirs, reference)}, {_during(reference, n)}\n"
                f"  yours         {event_words(mine, yours)}, {_during(yours, n)}\n{head}"
            )
    if len(yours.events) != len(reference.events):
        n = min(len(yours.events), len(reference.events))
        if n < len(reference.events):
            longer, who = reference, "the reference"
        else:
            longer, who = yours, "yours"
        return (
            f"after event {n} the runs part: {who} goes on with "
            f"{event_words(longer.events[n], longer)}, {_during(longer, n)}, and the other "
            f"{_ending(yours if who == 'the reference' else reference, program)}\n{head}"
        )
    return _error_difference(program, reference, yours, head)


def _error_difference(program: Program, reference: Run, yours: Run, head: str) -> str | None:
    if type(reference.error) is type(yours.error) and reference.failed_at == yours.failed_at:
        return None
    return f"the reference {_ending(reference, program)}, yours {_ending(yours, program)}\n{head}"


def _ending(run: Run, program: Program) -> str:
    if run.error is None:
        return "ran the program to its end"
    line = program.instructions[run.failed_at] if run.failed_at is not None else "?"
    what = raised(run.error) if not _is_budget(run.error) else f"BudgetError ({run.error})"
    return f"stopped at line {(run.failed_at or 0) + 1} ({line}): {what}"


def _is_budget(error: BaseException) -> bool:
    from ..runtime.errors import BudgetError

    return isinstance(error, BudgetError)


def _where(program: Program, budget: int | None, setting: str) -> str:
    settings = f" ({setting})" if setting else ""
    return f"on this program{settings}:\n{describe(program, budget)}"


def _during(run: Run, n: int) -> str:
    """Which line of the program was running when event ``n`` happened."""
    line = next((i for i, count in enumerate(run.marks) if count > n), None)
    if line is None:
        return "at the end of the program"
    return f"running line {line + 1} ({run.lines[line]})"


def event_words(event: dict[str, Any], run: Run) -> str:
    """``evicted x3 (#3 tanh, 32 bytes; reason budget, score 0.5)`` and so on."""
    kind = event.get("event", "?")
    name = run.names.get(event.get("id"), "a value with no name")
    parts = [f"#{event.get('id')} {event.get('op')}, {event.get('nbytes')} bytes"]
    for key in ("reason", "score", "runner_up", "cascade", "trigger", "parent"):
        if key in event:
            parts.append(f"{key} {_short(event[key])}")
    return f"{VERBS.get(kind, kind)} {name} ({'; '.join(parts)}) at clock {event.get('clock'):g}"


def storage_words(storage: Any, names: dict[int, str]) -> str:
    """``x3 (#3 tanh)``: a storage by the program's name for it (``Run.names``), then its
    id and op, as ``event_words`` names the storage of an event."""
    what = f"#{storage.id} {storage.name}"
    return f"{names[storage.id]} ({what})" if storage.id in names else what


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_short(v) for v in value) + ")"
    return str(value)


def same(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-9 relative (a score computed in another order may differ in
    its last bits); lists, tuples and dicts element by element."""
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            return False
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b
