"""Traces: the DTR prototype's JSON-lines log format, read, checked and written.

A log holds one JSON object per line, its kind in the key ``INSTRUCTION``
(docs/simulator.md). Names are *handles*: each name is one external reference to a
value, the way a live ``Tensor`` object is. The instructions:

- ``CONSTANT {NAME}`` then ``MEMORY {NAME, MEMORY}``: an input or parameter
  (no recipe, never evicted); the name holds it.
- ``CALL {NAME, ARGS, RESULT, TIME}``, then for each result a ``MEMORY`` and an
  ``ALIAS`` line: an op on the values of ARGS; each result is a new name.
  ``ALIAS`` is the index of the argument whose storage the result views, or
  -1 for a fresh storage of ``MEMORY`` bytes. A CALL with no results is an
  *access* (minidtr records ``Tensor.numpy()`` that way): its arguments must
  be resident at that point.
- ``MUTATE {NAME, ARGS, MUTATE, TIME}``: an in-place op. Copy-on-write: the op
  produces one new storage per mutated argument (the size of that argument's
  storage) from all the arguments, and each mutated *name* is rebound to its
  new value (the old value loses that reference). Other names of the old value
  keep the old value, as in the prototype's simulator.
- ``COPY {DST, SRC}``: a new name DST for SRC's value.
- ``COPY_FROM {DST, SRC}``: the existing name DST now refers to SRC's value.
- ``RELEASE {NAME}``: the reference NAME is dropped.
- ``ANNOTATE {ANNOTATION}``: ``START`` (replay begins after it) or ``BACKWARD``.

Replay starts after the first ``START`` (at the top when there is none). Names
still held at the end are the outputs: they must be resident when the step
ends. A name may be defined again after it was released. A RELEASE of a name
defined only before ``START`` is dropped (the prototype's logs can do that);
any other use of an unknown name is an error.

Two extensions, which other readers ignore: a CALL may carry
``"CONSTANT_RESULTS": "1"``, meaning its results are constants (minidtr's
``as_constants()``, used by optimizer updates): computed once, never evicted;
and ``ANNOTATE {ANNOTATION: "CONSTANT", NAME}`` means the value of NAME
(rematerialized first if evicted) drops its recipe and becomes a constant
(minidtr keeps finished gradients that way). With ``"IF_RESIDENT": "1"`` it does so
only if the value is resident at that point; an evicted one keeps its recipe and
nothing is recomputed (minidtr's rule for a used-up loss, whose residency depends
on the budget).

A third: a CALL may carry ``"WORKSPACE"``, the bytes of scratch memory its kernel
needs besides its results (``Op.workspace``: im2col columns, a reduction's
intermediates); a replay reserves them under the budget with the results and
releases them after the kernel, as the live runtime does. A CALL without it (every
CALL of the prototype's logs, and of minidtr's before it was counted) needs none.

A fourth: the ``ANNOTATE START`` line of a log written by minidtr carries
``"LINES"``, the number of lines of the whole log, so a log cut short, even at
a line boundary, is reported as truncated instead of replayed as if its
program ended there. (The prototype's logs have no such count; a cut between
two of their instructions cannot be told from an end.)

MEMORY, TIME and ALIAS are strings in the prototype's logs; numbers are
accepted too. TIME is in nanoseconds and may be fractional (minidtr writes the
exact cost it used, so a replay reproduces its decisions). A path ending in
``.gz`` is read and written gzip-compressed.

A log is read as it streams in, within ``minidtr.reading``'s limits on a line's
length, on the log's size once decompressed and on how far a ``.gz`` log may
expand, so a crafted file (a gzip bomb, a single line of a gigabyte) ends in a
``TraceError`` within moments. The TIMEs must add up to a finite total, the
MEMORY of all the storages a log makes to at most 2**63 - 1 bytes, and names are
printable text (no control character, such as the ESC of an ANSI escape sequence,
reaches a terminal through ``minidtr sim info``).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any

from ..reading import LineReader, json_line, printable, read_limits, shown
from .instructions import (
    MAX_MEMORY,
    STEP,
    Annotate,
    Call,
    Constant,
    Copy,
    CopyFrom,
    Instruction,
    MakeConstant,
    Mutate,
    Release,
    Result,
    Trace,
    TraceError,
    check_alias,
    check_constant_results,
    check_integer,
    check_mutate,
    check_names,
    check_text,
    check_text_list,
    check_time,
    check_totals,
    make_trace,
)

__all__ = [
    "STEP",
    "Annotate",
    "Call",
    "Constant",
    "Copy",
    "CopyFrom",
    "Instruction",
    "MakeConstant",
    "Mutate",
    "Release",
    "Result",
    "Trace",
    "TraceError",
    "check_names",
    "load_log",
    "log_label",
    "make_trace",
    "open_log",
    "write_log",
]

# ---- reading ---------------------------------------------------------------------------


class _Lines:
    """The JSON objects of a log with their line numbers, read one at a time as the file
    streams in, and the line count its ``ANNOTATE START`` line announces (``LINES``)."""

    def __init__(self, source: str, stream: IO[bytes], **limits: int | None):
        self.source = source
        self.reader = LineReader(stream, read_limits(**limits), self.error, "a trace")
        self.rows = iter(self.reader)
        self.announced: tuple[int, int] | None = None  # (line of START, LINES it announces)
        self.taken = 0

    def error(self, line: int | None, message: str) -> TraceError:
        return TraceError(self.source, line, message)

    def take(self) -> tuple[int, dict] | None:
        """The next row with its line number, or None at the end of the log."""
        item = next(self.rows, None)
        if item is None:
            return None
        line, raw = item
        if self.announced is not None and line > self.announced[1]:
            raise self.error(line, self._count_mismatch(line))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(
                None, f"cannot be read as a text log (line {line} is not UTF-8 text)"
            ) from None
        row = json_line(text, line, self.error)
        if not isinstance(row, dict) or "INSTRUCTION" not in row:
            hint = ""
            if isinstance(row, dict) and "event" in row:
                hint = (
                    ": this is an event log (minidtr train --events), read it with minidtr "
                    "explain; traces are written by minidtr train --trace"
                )
            raise self.error(line, f"expected a JSON object with an INSTRUCTION key{hint}")
        if self.announced is None and row.get("ANNOTATION") == "START" and "LINES" in row:
            self.announced = (line, _int(self, line, row, "LINES", 1))
        self.taken += 1
        return line, row

    def next(self, kind: str, name: str, after: int) -> tuple[int, dict]:
        """The next row, which must be a ``kind`` line for ``name`` (MEMORY or ALIAS)."""
        item = self.take()
        if item is None:
            last = self.reader.lines
            raise self.error(
                last,
                self._count_mismatch(last)
                if self.announced is not None
                else f"truncated: the log ends where a {kind} line for "
                f"{shown(name)} (announced on line {after}) should follow",
            )
        line, row = item
        if row.get("INSTRUCTION") != kind:
            raise self.error(
                line,
                f"expected a {kind} line for {shown(name)} (announced on line "
                f"{after}), found {shown(row.get('INSTRUCTION'))}",
            )
        if _str(self, line, row, "NAME") != name:
            raise self.error(
                line, f"{kind} line names {shown(row['NAME'])}, expected {shown(name)}"
            )
        return line, row

    def check_end(self) -> None:
        """At the end: the log has as many lines as its START line announced, if it did."""
        last = self.reader.lines
        if self.announced is not None and self.announced[1] != last:
            raise self.error(last, self._count_mismatch(last))

    def _count_mismatch(self, line: int) -> str:
        start, expected = self.announced
        if line < expected:
            return (
                f"truncated: the log ends at line {line}, but its START line (line "
                f"{start}) announces {expected} lines"
            )
        return (
            f"line {line} is past the {expected} lines its START line (line {start}) "
            "announces: something was appended"
        )


def _field(lines: _Lines, line: int, row: dict, key: str) -> Any:
    if key not in row:
        raise lines.error(line, f"{shown(row.get('INSTRUCTION'))} is missing the key {shown(key)}")
    return row[key]


def _checked(lines: _Lines, line: int, check: Callable[..., Any], *args: Any) -> Any:
    """``check(*args)`` (one of ``instructions``' value checks), its error at ``line``."""
    try:
        return check(*args)
    except ValueError as e:
        raise lines.error(line, str(e)) from None


def _from_text(value: Any, kind: Callable[[str], Any]) -> Any:
    """A number written as text (the prototype's logs write them so) as a number; any
    other value as it is, for the check to show."""
    if isinstance(value, str):
        try:
            return kind(value)
        except (ValueError, OverflowError):
            pass
    return value


def _str(lines: _Lines, line: int, row: dict, key: str) -> str:
    return sys.intern(_checked(lines, line, check_text, key, _field(lines, line, row, key)))


def _names(lines: _Lines, line: int, row: dict, key: str) -> tuple[str, ...]:
    value = _checked(lines, line, check_text_list, key, _field(lines, line, row, key))
    return tuple(map(sys.intern, value))


def _int(
    lines: _Lines, line: int, row: dict, key: str, minimum: int, maximum: int = MAX_MEMORY
) -> int:
    value = _from_text(_field(lines, line, row, key), int)
    return _checked(lines, line, check_integer, key, value, minimum, maximum)


def _time(lines: _Lines, line: int, row: dict) -> float:
    return _checked(lines, line, check_time, _from_text(_field(lines, line, row, "TIME"), float))


def _constant(lines: _Lines, line: int, row: dict) -> Constant:
    name = _str(lines, line, row, "NAME")
    mline, mrow = lines.next("MEMORY", name, line)
    return Constant(name, _int(lines, mline, mrow, "MEMORY", 0), line)


def _call(lines: _Lines, line: int, row: dict) -> Call:
    args = _names(lines, line, row, "ARGS")
    names = _names(lines, line, row, "RESULT")
    time_ns = _time(lines, line, row)
    op = _str(lines, line, row, "NAME")
    results = []
    for name in names:
        mline, mrow = lines.next("MEMORY", name, line)
        aline, arow = lines.next("ALIAS", name, line)
        alias = _from_text(_field(lines, aline, arow, "ALIAS"), int)
        alias = _checked(lines, aline, check_alias, alias, name, op, len(args))
        results.append(Result(name, _int(lines, mline, mrow, "MEMORY", 0), alias))
    constant = str(row.get("CONSTANT_RESULTS", "0")) == "1"
    _checked(lines, line, check_constant_results, constant, results)
    workspace = _int(lines, line, row, "WORKSPACE", 0) if "WORKSPACE" in row else 0
    return Call(op, args, tuple(results), time_ns, constant, line, workspace)


def _mutate(lines: _Lines, line: int, row: dict) -> Mutate:
    args = _names(lines, line, row, "ARGS")
    mutate = _checked(lines, line, check_mutate, _field(lines, line, row, "MUTATE"), args)
    op = _str(lines, line, row, "NAME")
    return Mutate(op, args, mutate, _time(lines, line, row), line)


def _annotate(lines: _Lines, line: int, row: dict) -> Annotate | MakeConstant:
    annotation = _str(lines, line, row, "ANNOTATION")
    if annotation == "CONSTANT" and "NAME" in row:
        if_resident = str(row.get("IF_RESIDENT", "0")) == "1"
        return MakeConstant(_str(lines, line, row, "NAME"), line, if_resident)
    return Annotate(annotation, line)


_PARSERS = {
    "CONSTANT": _constant,
    "CALL": _call,
    "MUTATE": _mutate,
    "COPY": lambda lines, line, row: Copy(
        _str(lines, line, row, "DST"), _str(lines, line, row, "SRC"), line
    ),
    "COPY_FROM": lambda lines, line, row: CopyFrom(
        _str(lines, line, row, "DST"), _str(lines, line, row, "SRC"), line
    ),
    "RELEASE": lambda lines, line, row: Release(_str(lines, line, row, "NAME"), line),
    "ANNOTATE": _annotate,
}


def _parse(lines: _Lines) -> list[Instruction]:
    out: list[Instruction] = []
    while (item := lines.take()) is not None:
        line, row = item
        kind = row.get("INSTRUCTION")
        parser = _PARSERS.get(kind) if isinstance(kind, str) else None
        if parser is not None:
            out.append(parser(lines, line, row))
        elif kind in ("MEMORY", "ALIAS"):
            raise lines.error(line, f"a {kind} line must follow a CONSTANT or CALL result")
        else:
            raise lines.error(line, f"unknown INSTRUCTION {shown(kind)}")
    lines.check_end()
    return out


def _defined_before_start(instructions: list[Instruction]) -> set[str]:
    names: set[str] = set()
    for ins in instructions:
        if isinstance(ins, Constant):
            names.add(ins.name)
        elif isinstance(ins, Call):
            names.update(r.name for r in ins.results)
        elif isinstance(ins, Copy):
            names.add(ins.dst)
    return names


def open_log(path: str | os.PathLike) -> IO[bytes]:
    """Open a log for reading as bytes; gunzip it when the name ends in ``.gz``."""
    source = os.fspath(path)
    if source.endswith(".gz"):
        return gzip.open(source, "rb")
    return open(source, "rb")


def log_label(path: str | os.PathLike) -> str:
    """A trace's default name: the file name without ``.gz`` and ``.log`` (or other suffix)."""
    base = os.path.basename(os.fspath(path))
    if base.endswith(".gz"):
        base = base[:-3]
    return printable(os.path.splitext(base)[0])  # a file's name may hold control characters


def load_log(
    path: str | os.PathLike,
    name: str | None = None,
    *,
    max_line: int | None = None,
    max_bytes: int | None = None,
    max_ratio: float | None = None,
) -> Trace:
    """Read a log in the prototype's format (see the module docstring) into a ``Trace``.

    Raises ``TraceError`` naming the line for malformed JSON, missing keys, bad
    numbers, a CALL whose MEMORY/ALIAS lines are missing (a truncated log), a name
    used before it is defined, a line longer than ``max_line`` bytes, a log of more
    than ``max_bytes`` bytes (decompressed) or a ``.gz`` log that expands to more than
    ``max_ratio`` times its size (all three default to ``minidtr.reading``'s limits,
    which the environment can change).
    """
    source = os.fspath(path)
    with open_log(source) as stream:
        lines = _Lines(source, stream, max_line=max_line, max_bytes=max_bytes, max_ratio=max_ratio)
        instructions = _parse(lines)
    if not lines.taken:
        raise lines.error(None, "empty: no instructions (is this a trace log?)")
    start = next(
        (
            i
            for i, ins in enumerate(instructions)
            if isinstance(ins, Annotate) and ins.annotation == "START"
        ),
        None,
    )
    before: frozenset[str] = frozenset()
    if start is not None:
        before = frozenset(_defined_before_start(instructions[:start]))
        instructions = instructions[start:]
    outputs, dropped = check_names(instructions, source, before)
    if start is None and not any(isinstance(ins, Constant | Call | Mutate) for ins in instructions):
        # (a log that starts as write_log's may be empty: the record of an empty program)
        raise lines.error(None, "no CONSTANT, CALL or MUTATE to replay (is this a trace log?)")
    for position in reversed(dropped):
        del instructions[position]
    trace = Trace(instructions, name or log_label(source), outputs)
    check_totals(trace, source)
    return trace


# ---- writing ---------------------------------------------------------------------------


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def instruction_rows(ins: Instruction) -> list[dict[str, Any]]:
    """The JSON objects (log lines) of one instruction."""
    if isinstance(ins, Constant):
        return [
            {"INSTRUCTION": "CONSTANT", "NAME": ins.name},
            {"INSTRUCTION": "MEMORY", "NAME": ins.name, "MEMORY": str(ins.nbytes)},
        ]
    if isinstance(ins, Call):
        head = {
            "INSTRUCTION": "CALL",
            "NAME": ins.op,
            "ARGS": list(ins.args),
            "RESULT": [r.name for r in ins.results],
            "TIME": _number(ins.time),
        }
        if ins.constant:
            head["CONSTANT_RESULTS"] = "1"
        if ins.workspace:
            head["WORKSPACE"] = str(ins.workspace)
        rows = [head]
        for r in ins.results:
            rows.append({"INSTRUCTION": "MEMORY", "NAME": r.name, "MEMORY": str(r.nbytes)})
            rows.append({"INSTRUCTION": "ALIAS", "NAME": r.name, "ALIAS": str(r.alias)})
        return rows
    if isinstance(ins, Mutate):
        return [
            {
                "INSTRUCTION": "MUTATE",
                "NAME": ins.op,
                "ARGS": list(ins.args),
                "MUTATE": list(ins.mutate),
                "TIME": _number(ins.time),
            }
        ]
    if isinstance(ins, Copy):
        return [{"INSTRUCTION": "COPY", "DST": ins.dst, "SRC": ins.src}]
    if isinstance(ins, CopyFrom):
        return [{"INSTRUCTION": "COPY_FROM", "DST": ins.dst, "SRC": ins.src}]
    if isinstance(ins, Release):
        return [{"INSTRUCTION": "RELEASE", "NAME": ins.name}]
    if isinstance(ins, Annotate):
        return [{"INSTRUCTION": "ANNOTATE", "ANNOTATION": ins.annotation}]
    if isinstance(ins, MakeConstant):
        row = {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "CONSTANT", "NAME": ins.name}
        if ins.if_resident:
            row["IF_RESIDENT"] = "1"
        return [row]
    raise TypeError(f"not a trace instruction: {ins!r}")


def write_log(trace: Trace, path: str | os.PathLike) -> None:
    """Write a trace in the prototype's format, beginning with ``ANNOTATE START`` (which
    carries the log's line count, ``LINES``, so that a cut copy is found truncated;
    gzip-compressed when ``path`` ends in ``.gz``, with no timestamp in the header, so
    that the same trace always gives the same bytes)."""

    if not isinstance(trace, Trace):
        raise TypeError(
            f"write_log: trace must be a Trace (write_log(trace, path)), got "
            f"{type(trace).__name__} {trace!r}"
        )

    def line(row: dict[str, Any]) -> str:
        return json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n"

    instructions = trace.instructions
    if instructions and instructions[0] == Annotate("START", instructions[0].line):
        instructions = instructions[1:]
    rows = [row for ins in instructions for row in instruction_rows(ins)]
    start = {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START", "LINES": str(len(rows) + 1)}
    text = "".join(line(row) for row in (start, *rows))
    if os.fspath(path).endswith(".gz"):
        with open(path, "wb") as f:
            f.write(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
