"""Reading an event log (``minidtr explain``, ``minidtr plot``, the explorer page): every
line is checked, field by field, before anything uses it.

A log is untrusted data: it may come from anyone. ``load_events`` reads it as it
streams in, within ``minidtr.reading``'s limits on a line's length and the log's
size, and refuses, naming the file, the line and the field, a line that is not
a minidtr event or a field of the wrong type or out of range: ids, sizes and
steps are whole numbers, clocks, costs and scores finite numbers, names strings.
NaN and Infinity are refused too (JSON has neither; Python's ``json`` writes
them). ``check_events`` applies the same checks to events built in memory.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .reading import LineReader, json_line, read_limits, shown, text_line

EVENT_KINDS = ("runtime", "alloc", "evict", "remat", "free", "banish", "step")
STORAGE_KINDS = ("alloc", "evict", "remat", "free", "banish")
REQUIRED_FIELDS = ("id", "op", "nbytes", "clock", "memory")
MAX_INT = 2**53 - 1  # the largest whole number a float holds exactly (the page's JavaScript)


class EventLogError(ValueError):
    """An event log that cannot be read: names the file and, where it can, the line."""


# ---- one field ---------------------------------------------------------------------------


FLOAT_MAX = sys.float_info.max


def _number_subclass(value: Any) -> bool:
    """An instance of a subclass of int or float (NumPy's float64), not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def whole(minimum: int = 0) -> Callable[[Any], bool]:
    """A whole number from ``minimum`` to ``MAX_INT``."""

    def check(value: Any) -> bool:
        return (type(value) is int or _number_subclass(value) and isinstance(value, int)) and (
            minimum <= value <= MAX_INT
        )

    check.expected = (  # type: ignore[attr-defined]
        f"a whole number >= {minimum:,}" if minimum > -MAX_INT else "a whole number"
    )
    return check


def finite(minimum: float = -math.inf) -> Callable[[Any], bool]:
    """A finite number at least ``minimum``: NaN and the infinities fail the comparisons,
    and so does an int too large for a float."""
    low = max(minimum, -FLOAT_MAX)

    def check(value: Any) -> bool:
        return (type(value) in (int, float) or _number_subclass(value)) and (
            low <= value <= FLOAT_MAX
        )

    check.expected = (  # type: ignore[attr-defined]
        "a finite number" + (f" >= {minimum:g}" if minimum > -math.inf else "")
    )
    return check


def _text(value: Any) -> bool:
    return isinstance(value, str)


_text.expected = "a string"  # type: ignore[attr-defined]


def or_null(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def either(value: Any) -> bool:
        return value is None or check(value)

    either.expected = check.expected + " or null"  # type: ignore[attr-defined]
    return either


def _runner_up(value: Any) -> bool:
    return value is None or (
        isinstance(value, list | tuple)  # a tuple in memory, a list once written
        and len(value) == 2
        and STORAGE_ID(value[0])
        and (value[1] is None or SCORE(value[1]))
    )


_runner_up.expected = "null or [storage id, score or null]"  # type: ignore[attr-defined]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool) or ANY_NUMBER(value)


_scalar.expected = "a string, a finite number, true, false or null"  # type: ignore[attr-defined]


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


_flag.expected = "true or false"  # type: ignore[attr-defined]

STORAGE_ID = whole(0)
ANY_NUMBER = SCORE = finite()
COST = finite(0.0)
CLOCK = finite(0.0)
MEMORY = whole(0)

ADDRESS = {"address": or_null(whole(0))}  # under fit="contiguous": where the value lies
ARENA = {"free_bytes": whole(0), "largest_free": whole(0), "extra": _flag}  # at such an eviction
VIEWS = {"view_cost": COST}  # the view ops (which have no event) run since the event before
# the fields each kind of event must have (required) and may have (optional)
COMMON = {"id": STORAGE_ID, "op": _text, "nbytes": whole(0), "clock": CLOCK, "memory": MEMORY}
REQUIRED: dict[str, dict[str, Callable[[Any], bool]]] = {
    **{kind: COMMON for kind in STORAGE_KINDS},
    "step": {"step": MEMORY, "clock": CLOCK},
    "runtime": {},
}
OPTIONAL: dict[str, dict[str, Callable[[Any], bool]]] = {
    "alloc": {"cost": COST, "workspace": whole(0), **ADDRESS, **VIEWS},
    "evict": {"reason": _text, "score": or_null(SCORE), "runner_up": _runner_up}
    | ADDRESS
    | ARENA
    | VIEWS,
    "remat": {
        "cost": COST,
        "workspace": whole(0),
        "replay": whole(0),
        "cascade": whole(0),
        "trigger": _text,
        "parent": or_null(STORAGE_ID),
        **ADDRESS,
        **VIEWS,
    },
    "free": ADDRESS | VIEWS,
    "banish": ADDRESS | VIEWS,
    "step": {"memory": MEMORY, **VIEWS},
    "runtime": {
        "budget": or_null(whole(0)),
        "heuristic": or_null(_text),
        "score": or_null(_text),
        "dealloc": or_null(_text),
        "cost": or_null(_text),
        "end_view_cost": COST,  # the view ops run after the last event
    },
}
CANDIDATE_REQUIRED = {"id": STORAGE_ID, "op": _text, "score": or_null(SCORE)}
CANDIDATE_OPTIONAL = {"cost": COST, "neighbourhood": COST, "nbytes": whole(0), "staleness": SCORE}


def _check_fields(
    event: dict, required: dict, optional: dict, what: str, where: str, extra: Any = None
) -> None:
    """Every required field present and valid, every optional one valid where present;
    ``extra`` checks the fields neither names (None: any value)."""
    if not required.keys() <= event.keys():
        missing = next(key for key in required if key not in event)
        raise EventLogError(f"{where}: this {what} lacks the field {missing!r}")
    for key, value in event.items():
        check = required.get(key) or optional.get(key)
        if check is None:
            if key == "event" or extra is None:
                continue
            check = extra
        if not check(value):
            _wrong(where, what, key, value, check)


def _wrong(where: str, what: str, key: str, value: Any, check: Callable) -> None:
    raise EventLogError(
        f"{where}: the field {shown(key)} of this {what} must be {check.expected}, "
        f"got {shown(value)}"
    )


# ---- one event -----------------------------------------------------------------------------


def check_event(event: Any, where: str) -> None:
    """Raise ``EventLogError`` (starting with ``where``) unless ``event`` is a minidtr event
    whose every field has the type and range the readers of a log rely on."""
    if not isinstance(event, dict) or event.get("event") not in EVENT_KINDS:
        raise EventLogError(
            f"{where}: not a minidtr event (expected a JSON object with 'event' in {EVENT_KINDS})"
        )
    kind = event["event"]
    what = f"{kind} event" if kind != "runtime" else "runtime header"
    extra = _scalar if kind == "runtime" else None
    _check_fields(event, REQUIRED[kind], OPTIONAL[kind], what, where, extra)
    if kind == "evict" and event.get("largest_free", 0) > event.get("free_bytes", math.inf):
        raise EventLogError(
            f"{where}: the field 'largest_free' ({event['largest_free']:,}) is more than "
            f"'free_bytes' ({event['free_bytes']:,}), of which the largest free block is part"
        )
    candidates = event.get("candidates") if kind == "evict" else None
    if kind == "evict" and "candidates" in event:
        if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates):
            raise EventLogError(
                f"{where}: the field 'candidates' of this evict event must be a list of "
                f"objects, got {shown(candidates)}"
            )
        for n, candidate in enumerate(candidates, 1):
            _check_fields(
                candidate, CANDIDATE_REQUIRED, CANDIDATE_OPTIONAL, f"event's candidate {n}", where
            )


def check_events(events: Iterable[Any], source: str = "events") -> None:
    """``check_event`` on events built in memory, and their clock (``check_clock``);
    errors name the event's position."""
    clock = 0.0
    for n, event in enumerate(events, 1):
        check_event(event, f"{source}: event {n}")
        check_header_place(event, n == 1, f"{source}: event {n}")
        clock = check_clock(clock, event, f"{source}: event {n}")


def check_header_place(event: dict[str, Any], first: bool, where: str) -> None:
    """A runtime header is the log's first line or not there: one later on gave explain a
    negative span, and the readers disagreed on which of several counted."""
    if event["event"] == "runtime" and not first:
        raise EventLogError(
            f"{where}: a runtime header after the first event; a log has at most one, first"
        )


def check_clock(before: float, event: dict[str, Any], where: str) -> float:
    """The clock after ``event``, which must not be earlier than ``before``: a runtime's
    clock only advances (a crafted log whose clock went back drew a flat timeline, and
    explain a negative span)."""
    clock = event.get("clock", before)
    if clock < before:
        raise EventLogError(f"{where}: the clock goes back, from {before:,} to {clock:,}")
    return clock


# ---- a file --------------------------------------------------------------------------------


def load_events(
    path: str, *, max_line: int | None = None, max_bytes: int | None = None
) -> list[dict[str, Any]]:
    """Read a JSON-lines event log, checking every line (``check_event``) and that the log
    holds at least one event (a runtime header alone is an empty log). A line longer than
    ``max_line`` bytes, or a log of more than ``max_bytes``, is refused as soon as it is
    seen (both default to ``minidtr.reading``'s limits, which the environment can set)."""
    limits = read_limits(max_line, max_bytes)
    events = []

    def error(line: int | None, message: str) -> EventLogError:
        return EventLogError(f"{path}:{line}: {message}" if line else f"{path}: {message}")

    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            raise EventLogError(
                f"{path}: a gzip file, not an event log (a trace from minidtr train "
                "--trace? read it with minidtr sim info); event logs are the JSON lines "
                "of minidtr train --events"
            )
        f.seek(0)
        cost = clock = 0.0
        for number, raw in LineReader(f, limits, error, "an event log"):
            event = json_line(text_line(raw, number, error), number, error)
            check_event(event, f"{path}:{number}")
            check_header_place(event, not events, f"{path}:{number}")
            clock = check_clock(clock, event, f"{path}:{number}")
            cost += event.get("cost", 0.0) if event["event"] in ("alloc", "remat") else 0.0
            cost += event.get("view_cost", 0.0) + event.get("end_view_cost", 0.0)
            if math.isinf(cost):
                raise error(number, "the costs add up past the largest float here")
            events.append(event)
    if not any(e["event"] in STORAGE_KINDS for e in events):
        where = "is empty" if not events else "holds only its runtime header"
        raise EventLogError(
            f"{path}: the event log {where}: it records no op (was it written by a "
            "runtime with record_events=True that ran some ops?)"
        )
    return events
