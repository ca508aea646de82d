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

A third: the ``ANNOTATE START`` line of a log written by minidtr carries
``"LINES"``, the number of lines of the whole log, so a log cut short, even at
a line boundary, is reported as truncated instead of replayed as if its
program ended there. (The prototype's logs have no such count; a cut between
two of their instructions cannot be told from an end.)

MEMORY, TIME and ALIAS are strings in the prototype's logs; numbers are
accepted too. TIME is in nanoseconds and may be fractional (minidtr writes the
exact cost it used, so a replay reproduces its decisions). A path ending in
``.gz`` is read and written gzip-compressed.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class TraceError(ValueError):
    """A malformed or truncated log; names the file and the line."""

    def __init__(self, source: str, line: int | None, message: str):
        self.source, self.line = source, line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    nbytes: int
    alias: int = -1  # index into ARGS of the argument whose storage this result views

    @property
    def fresh(self) -> bool:
        return self.alias < 0


@dataclass(frozen=True, slots=True)
class Constant:
    name: str
    nbytes: int
    line: int = 0


@dataclass(frozen=True, slots=True)
class Call:
    op: str
    args: tuple[str, ...]
    results: tuple[Result, ...]
    time: float
    constant: bool = False
    line: int = 0


@dataclass(frozen=True, slots=True)
class Mutate:
    op: str
    args: tuple[str, ...]
    mutate: tuple[int, ...]
    time: float
    line: int = 0


@dataclass(frozen=True, slots=True)
class Copy:
    dst: str
    src: str
    line: int = 0


@dataclass(frozen=True, slots=True)
class CopyFrom:
    dst: str
    src: str
    line: int = 0


@dataclass(frozen=True, slots=True)
class Release:
    name: str
    line: int = 0


# The annotation a recorder writes where a live run marked the start of a training step.
STEP = "STEP"


@dataclass(frozen=True, slots=True)
class Annotate:
    annotation: str
    line: int = 0


@dataclass(frozen=True, slots=True)
class MakeConstant:
    """The value of NAME loses its recipe and becomes a constant (minidtr extension); with
    ``if_resident``, only if it is resident at that point (an evicted one keeps its recipe)."""

    name: str
    line: int = 0
    if_resident: bool = False


Instruction = Constant | Call | Mutate | Copy | CopyFrom | Release | Annotate | MakeConstant


@dataclass
class Trace:
    """The instructions to replay (from START on) and what is known about them."""

    instructions: list[Instruction]
    name: str = "trace"
    outputs: tuple[str, ...] = ()  # names still held at the end
    ops: int = field(init=False)  # CALLs with results and MUTATEs
    accesses: int = field(init=False)  # CALLs without results
    total_compute: float = field(init=False)  # sum of TIME
    constant_bytes: int = field(init=False)  # all CONSTANTs and constant results
    # the compute of each step: from each ANNOTATE STEP (a live run's ``mark_step``) to
    # the next, or to the end
    step_costs: tuple[float, ...] = field(init=False)
    _baseline: Any = field(default=None, init=False, repr=False)

    def __post_init__(self):
        ops = accesses = 0
        compute = 0.0
        constants = 0
        step_starts = []
        for ins in self.instructions:
            if isinstance(ins, Annotate):
                if ins.annotation == STEP:
                    step_starts.append(compute)
            elif isinstance(ins, Call):
                compute += ins.time
                if ins.results:
                    ops += 1
                else:
                    accesses += 1
                if ins.constant:
                    constants += sum(r.nbytes for r in ins.results)
            elif isinstance(ins, Mutate):
                compute += ins.time
                ops += 1
            elif isinstance(ins, Constant):
                constants += ins.nbytes
        self.ops, self.accesses = ops, accesses
        self.total_compute, self.constant_bytes = compute, constants
        ends = [*step_starts[1:], compute] if step_starts else []
        self.step_costs = tuple(end - start for start, end in zip(step_starts, ends, strict=True))

    def __len__(self) -> int:
        return len(self.instructions)

    def baseline(self):
        """The unbounded replay (peak memory, floors), computed once (see ``simulator``)."""
        if self._baseline is None:
            from .simulator import measure_baseline

            self._baseline = measure_baseline(self)
        return self._baseline

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "instructions": len(self.instructions),
            "ops": self.ops,
            "accesses": self.accesses,
            "total_compute": self.total_compute,
            "constant_bytes": self.constant_bytes,
            "outputs": len(self.outputs),
        }


# ---- reading ---------------------------------------------------------------------------


class _Lines:
    """The parsed JSON objects of a log with their line numbers, consumed in order."""

    def __init__(self, source: str, rows: list[tuple[int, dict]], last_line: int):
        self.source, self.rows, self.pos, self.last_line = source, rows, 0, last_line

    def error(self, line: int | None, message: str) -> TraceError:
        return TraceError(self.source, line, message)

    def next(self, kind: str, name: str, after: int) -> tuple[int, dict]:
        """The next row, which must be a ``kind`` line for ``name`` (MEMORY or ALIAS)."""
        if self.pos >= len(self.rows):
            raise self.error(
                self.last_line,
                f"truncated: the log ends where a {kind} line for "
                f"{name!r} (announced on line {after}) should follow",
            )
        line, row = self.rows[self.pos]
        self.pos += 1
        if row.get("INSTRUCTION") != kind:
            raise self.error(
                line,
                f"expected a {kind} line for {name!r} (announced on line "
                f"{after}), found {row.get('INSTRUCTION')!r}",
            )
        if _str(self, line, row, "NAME") != name:
            raise self.error(line, f"{kind} line names {row['NAME']!r}, expected {name!r}")
        return line, row


def _field(lines: _Lines, line: int, row: dict, key: str) -> Any:
    if key not in row:
        raise lines.error(line, f"{row.get('INSTRUCTION')} is missing the key {key!r}")
    return row[key]


def _str(lines: _Lines, line: int, row: dict, key: str) -> str:
    value = _field(lines, line, row, key)
    if not isinstance(value, str) or not value:
        raise lines.error(line, f"{key} must be a non-empty string, got {value!r}")
    return value


def _names(lines: _Lines, line: int, row: dict, key: str) -> tuple[str, ...]:
    value = _field(lines, line, row, key)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise lines.error(line, f"{key} must be a list of names, got {value!r}")
    return tuple(value)


def _int(lines: _Lines, line: int, row: dict, key: str, minimum: int) -> int:
    value = _field(lines, line, row, key)
    try:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise lines.error(line, f"{key} must be an integer >= {minimum}, got {value!r}")
    return number


def _time(lines: _Lines, line: int, row: dict) -> float:
    value = _field(lines, line, row, "TIME")
    try:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise lines.error(line, f"TIME must be a finite number of ns >= 0, got {value!r}")
    return number


def _parse(lines: _Lines) -> list[Instruction]:
    out: list[Instruction] = []
    while lines.pos < len(lines.rows):
        line, row = lines.rows[lines.pos]
        lines.pos += 1
        kind = row.get("INSTRUCTION")
        if kind == "CONSTANT":
            name = _str(lines, line, row, "NAME")
            mline, mrow = lines.next("MEMORY", name, line)
            out.append(Constant(name, _int(lines, mline, mrow, "MEMORY", 0), line))
        elif kind == "CALL":
            args = _names(lines, line, row, "ARGS")
            names = _names(lines, line, row, "RESULT")
            time_ns = _time(lines, line, row)
            op = _str(lines, line, row, "NAME")
            results = []
            for name in names:
                mline, mrow = lines.next("MEMORY", name, line)
                aline, arow = lines.next("ALIAS", name, line)
                alias = _int(lines, aline, arow, "ALIAS", -1)
                if alias >= len(args):
                    raise lines.error(
                        aline,
                        f"ALIAS {alias} of {name!r} is not an argument "
                        f"index of {op} (it has {len(args)} arguments)",
                    )
                results.append(Result(name, _int(lines, mline, mrow, "MEMORY", 0), alias))
            constant = str(row.get("CONSTANT_RESULTS", "0")) == "1"
            if constant and any(not r.fresh for r in results):
                raise lines.error(line, "a CALL with CONSTANT_RESULTS cannot alias its arguments")
            out.append(Call(op, args, tuple(results), time_ns, constant, line))
        elif kind == "MUTATE":
            args = _names(lines, line, row, "ARGS")
            mutate = _field(lines, line, row, "MUTATE")
            if (
                not isinstance(mutate, list)
                or not all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(args)
                    for i in mutate
                )
                or len(set(mutate)) != len(mutate)
            ):
                raise lines.error(
                    line,
                    f"MUTATE must list distinct argument indices below {len(args)}, got {mutate!r}",
                )
            if len({args[i] for i in mutate}) != len(mutate):
                raise lines.error(line, "MUTATE names the same handle twice")
            out.append(
                Mutate(
                    _str(lines, line, row, "NAME"),
                    args,
                    tuple(mutate),
                    _time(lines, line, row),
                    line,
                )
            )
        elif kind == "COPY":
            out.append(Copy(_str(lines, line, row, "DST"), _str(lines, line, row, "SRC"), line))
        elif kind == "COPY_FROM":
            out.append(CopyFrom(_str(lines, line, row, "DST"), _str(lines, line, row, "SRC"), line))
        elif kind == "RELEASE":
            out.append(Release(_str(lines, line, row, "NAME"), line))
        elif kind == "ANNOTATE":
            annotation = _str(lines, line, row, "ANNOTATION")
            if annotation == "CONSTANT" and "NAME" in row:
                if_resident = str(row.get("IF_RESIDENT", "0")) == "1"
                out.append(MakeConstant(_str(lines, line, row, "NAME"), line, if_resident))
            else:
                out.append(Annotate(annotation, line))
        elif kind in ("MEMORY", "ALIAS"):
            raise lines.error(line, f"a {kind} line must follow a CONSTANT or CALL result")
        else:
            raise lines.error(line, f"unknown INSTRUCTION {kind!r}")
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


def check_names(
    instructions: Iterable[Instruction],
    source: str = "trace",
    before_start: frozenset[str] = frozenset(),
) -> tuple[tuple[str, ...], list[int]]:
    """Check every name is defined before use and not redefined while held. Returns the
    names held at the end (the outputs, in definition order) and the positions of the
    RELEASEs of names defined only before START (to be dropped)."""
    live: dict[str, None] = {}
    dropped: list[int] = []

    def use(name: str, line: int, what: str) -> None:
        if name not in live:
            raise TraceError(source, line, f"{what} {name!r} is not a live name")

    def define(name: str, line: int) -> None:
        if name in live:
            raise TraceError(source, line, f"{name!r} is defined again while still held")
        live[name] = None

    for position, ins in enumerate(instructions):
        if isinstance(ins, Constant):
            define(ins.name, ins.line)
        elif isinstance(ins, Call):
            for a in ins.args:
                use(a, ins.line, f"{ins.op}: argument")
            if len({r.name for r in ins.results}) != len(ins.results):
                raise TraceError(source, ins.line, f"{ins.op}: a result name repeats")
            for r in ins.results:
                define(r.name, ins.line)
        elif isinstance(ins, Mutate):
            for a in ins.args:
                use(a, ins.line, f"{ins.op}: argument")
        elif isinstance(ins, Copy):
            use(ins.src, ins.line, "COPY source")
            define(ins.dst, ins.line)
        elif isinstance(ins, CopyFrom):
            use(ins.src, ins.line, "COPY_FROM source")
            use(ins.dst, ins.line, "COPY_FROM destination")
        elif isinstance(ins, MakeConstant):
            use(ins.name, ins.line, "CONSTANT annotation of")
        elif isinstance(ins, Release):
            if ins.name in live:
                del live[ins.name]
            elif ins.name in before_start:
                dropped.append(position)
            else:
                raise TraceError(source, ins.line, f"RELEASE of {ins.name!r}, not a live name")
    return tuple(live), dropped


def open_log(path: str | os.PathLike):
    """Open a log for reading as text; gunzip it when the name ends in ``.gz``."""
    source = os.fspath(path)
    if source.endswith(".gz"):
        return gzip.open(source, "rt", encoding="utf-8")
    return open(source, encoding="utf-8")


def log_label(path: str | os.PathLike) -> str:
    """A trace's default name: the file name without ``.gz`` and ``.log`` (or other suffix)."""
    base = os.path.basename(os.fspath(path))
    if base.endswith(".gz"):
        base = base[:-3]
    return os.path.splitext(base)[0]


def load_log(path: str | os.PathLike, name: str | None = None) -> Trace:
    """Read a log in the prototype's format (see the module docstring) into a ``Trace``.

    Raises ``TraceError`` naming the line for malformed JSON, missing keys, bad
    numbers, a CALL whose MEMORY/ALIAS lines are missing (a truncated log), or a
    name used before it is defined.
    """
    source = os.fspath(path)
    rows: list[tuple[int, dict]] = []
    lines = _Lines(source, rows, 0)
    announced: tuple[int, int] | None = None  # (line of START, LINES it announces)
    with open_log(source) as f:
        number = 0
        try:
            numbered = list(enumerate(f, start=1))
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise TraceError(source, None, f"cannot be read as a text log ({e})") from None
        for number, text in numbered:
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise lines.error(number, f"not valid JSON ({e.msg}); truncated?") from None
            if not isinstance(row, dict) or "INSTRUCTION" not in row:
                raise lines.error(number, "expected a JSON object with an INSTRUCTION key")
            if announced is None and row.get("ANNOTATION") == "START" and "LINES" in row:
                announced = (number, _int(lines, number, row, "LINES", 1))
            rows.append((number, row))
        lines.last_line = number
    if not rows:
        raise lines.error(None, "empty: no instructions (is this a trace log?)")
    if announced is not None and announced[1] != number:
        start_line, expected = announced
        raise lines.error(
            number,
            f"truncated: the log ends at line {number}, but its START line (line "
            f"{start_line}) announces {expected} lines"
            if number < expected
            else f"the log has {number} lines, but its START line (line {start_line}) "
            f"announces {expected}: something was appended",
        )
    instructions = _parse(lines)
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
    if not any(isinstance(ins, Constant | Call | Mutate) for ins in instructions):
        raise lines.error(None, "no CONSTANT, CALL or MUTATE to replay (is this a trace log?)")
    for position in reversed(dropped):
        del instructions[position]
    return Trace(instructions, name or log_label(source), outputs)


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


def make_trace(instructions: list[Instruction], name: str = "trace") -> Trace:
    """A checked ``Trace`` from instructions built in code (generators, the recorder)."""
    return Trace(list(instructions), name, check_names(instructions, name)[0])
