"""A trace's instructions (``minidtr.sim.trace`` reads and writes them as a log; its
docstring describes the format), the ``Trace`` that holds them, and the checks of a
trace: each instruction's values (``check_values``, whose parts the log reader applies
line by line), every name defined before it is used (``check_names``) and the totals
(``check_totals``). ``make_trace`` runs them all, so that what it accepts a log holds."""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..reading import shown

MAX_MEMORY = 2**63 - 1  # bytes: what an int64 holds


class TraceError(ValueError):
    """A malformed or truncated log; names the file and the line."""

    def __init__(self, source: str, line: int | None, message: str):
        self.source, self.line, self.message = source, line, message
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # whole from a worker process (a sweep's pool)
        return type(self), (self.source, self.line, self.message)


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
    workspace: int = 0  # bytes of scratch the kernel needs besides its results (WORKSPACE)


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
    # the unbounded replay (``simulator.baseline``), kept once measured: it travels with
    # the trace to a sweep's workers
    measured_baseline: Any = field(default=None, init=False, repr=False)

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


def slowdown_of(recompute: float, total: float) -> float:
    """(``total`` + ``recompute``) / ``total``: the slowdown of a schedule that recomputes
    ``recompute`` on top of a trace's whole compute; 1 for a trace that computes nothing
    (every TIME 0), which no schedule can slow down."""
    return (total + recompute) / total if total > 0 else 1.0


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
            raise TraceError(source, line, f"{what} {shown(name)} is not a live name")

    def define(name: str, line: int) -> None:
        if name in live:
            raise TraceError(source, line, f"{shown(name)} is defined again while still held")
        live[name] = None

    for position, ins in enumerate(instructions):
        if isinstance(ins, Constant):
            define(ins.name, ins.line)
        elif isinstance(ins, Call):
            for a in ins.args:
                use(a, ins.line, f"{shown(ins.op)}: argument")
            if len({r.name for r in ins.results}) != len(ins.results):
                raise TraceError(source, ins.line, f"{shown(ins.op)}: a result name repeats")
            for r in ins.results:
                define(r.name, ins.line)
        elif isinstance(ins, Mutate):
            for a in ins.args:
                use(a, ins.line, f"{shown(ins.op)}: argument")
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
                raise TraceError(source, ins.line, f"RELEASE of {shown(ins.name)}, not a live name")
    return tuple(live), dropped


# ---- the values of one instruction ----------------------------------------------------------
# Each check returns the value or raises a ValueError naming the key and the value; the log
# reader turns it into a TraceError at the line, make_trace at the instruction.


def check_text(key: str, value: object) -> str:
    """A name, op or annotation: non-empty printable text (nothing a terminal acts on)."""
    if not isinstance(value, str) or not value or not value.isprintable():
        raise ValueError(f"{key} must be a non-empty string of printable text, got {shown(value)}")
    return value


def check_text_list(key: str, value: object) -> list[str] | tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, str) and v and v.isprintable() for v in value
    ):
        raise ValueError(f"{key} must be a list of names (printable text), got {shown(value)}")
    return value


def check_integer(key: str, value: object, minimum: int, maximum: int = MAX_MEMORY) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not minimum <= value <= maximum
    ):
        raise ValueError(
            f"{key} must be an integer from {minimum} to {maximum:,}, got {shown(value)}"
        )
    return int(value)


def check_time(value: object) -> float:
    """A TIME: a finite number of ns >= 0."""
    number = math.nan
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int past the largest float
            pass
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"TIME must be a finite number of ns >= 0, got {shown(value)}")
    return number


def check_alias(alias: object, result: str, op: str, arguments: int) -> int:
    """A result's ALIAS: -1 (a fresh storage) or the index of one of the op's arguments."""
    index = check_integer("ALIAS", alias, -1)
    if index >= arguments:
        raise ValueError(
            f"ALIAS {index} of {shown(result)} is not an argument index of {shown(op)} "
            f"(it has {arguments} arguments)"
        )
    return index


def check_constant_results(constant: bool, results: Iterable[Result]) -> None:
    if constant and any(not r.fresh for r in results):
        raise ValueError("a CALL with CONSTANT_RESULTS cannot alias its arguments")


def check_mutate(mutate: object, args: tuple[str, ...]) -> tuple[int, ...]:
    """MUTATE: distinct indices of arguments, which name distinct handles."""
    if (
        not isinstance(mutate, list | tuple)
        or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) and 0 <= i < len(args)
            for i in mutate
        )
        or len(set(mutate)) != len(mutate)
    ):
        raise ValueError(
            f"MUTATE must list distinct argument indices below {len(args)}, got {shown(mutate)}"
        )
    handles = [args[i] for i in mutate]
    uses = Counter(handles)  # not handles.count per handle: quadratic in a long ARGS list
    twice = next((h for h in handles if uses[h] > 1), None)
    if twice is not None:
        raise ValueError(f"MUTATE names the same handle twice ({shown(twice)})")
    return tuple(int(i) for i in mutate)


def check_values(ins: Instruction) -> None:
    """The checks ``load_log`` makes of the values of an instruction's lines, on one built
    in code: a ValueError naming the value if one fails."""
    if isinstance(ins, Constant):
        check_text("NAME", ins.name)
        check_integer("MEMORY", ins.nbytes, 0)
    elif isinstance(ins, Call):
        check_text("NAME", ins.op)
        check_text_list("ARGS", ins.args)
        check_text_list("RESULT", [r.name for r in ins.results])
        check_time(ins.time)
        for r in ins.results:
            check_integer("MEMORY", r.nbytes, 0)
            check_alias(r.alias, r.name, ins.op, len(ins.args))
        check_constant_results(ins.constant, ins.results)
        check_integer("WORKSPACE", ins.workspace, 0)
    elif isinstance(ins, Mutate):
        check_text("NAME", ins.op)
        check_text_list("ARGS", ins.args)
        check_mutate(ins.mutate, ins.args)
        check_time(ins.time)
    elif isinstance(ins, Copy | CopyFrom):
        check_text("DST", ins.dst)
        check_text("SRC", ins.src)
    elif isinstance(ins, Release | MakeConstant):
        check_text("NAME", ins.name)
    elif isinstance(ins, Annotate):
        check_text("ANNOTATION", ins.annotation)
    else:
        raise ValueError(f"not a trace instruction: {shown(ins)}")


def check_totals(trace: Trace, source: str) -> None:
    """The TIMEs must add up to a finite total (each is finite, but a sum can overflow to
    inf, which would make every slowdown NaN), and the bytes of every storage the trace
    makes to at most ``MAX_MEMORY`` (what a budget can be)."""
    compute, nbytes = 0.0, 0
    for ins in trace.instructions:
        if isinstance(ins, Call | Mutate):
            compute += ins.time
            if math.isinf(compute):
                raise TraceError(
                    source,
                    ins.line,
                    "the TIMEs add up past the largest float here (the total compute would "
                    "be infinite, and every slowdown undefined)",
                )
        if isinstance(ins, Constant):
            nbytes += ins.nbytes
        elif isinstance(ins, Call):
            nbytes += sum(r.nbytes for r in ins.results if r.fresh)
            if nbytes + ins.workspace > MAX_MEMORY:
                nbytes += ins.workspace  # reported below
        if nbytes > MAX_MEMORY:
            raise TraceError(
                source,
                ins.line,
                f"the MEMORY of the storages made so far adds up past {MAX_MEMORY:,} "
                "bytes (2**63 - 1, the largest budget)",
            )


def make_trace(instructions: Iterable[Instruction], name: str = "trace") -> Trace:
    """A checked ``Trace`` from instructions built in code (generators, the recorder): the
    checks ``load_log`` makes, so that ``write_log`` writes a log it reads back. Raises
    ``TraceError`` naming the instruction (its position and op or name) and the value."""
    instructions = list(instructions)
    for position, ins in enumerate(instructions):
        try:
            check_values(ins)
        except ValueError as e:
            what = next(
                (getattr(ins, a) for a in ("op", "name", "dst", "annotation") if hasattr(ins, a)),
                "",
            )
            line = getattr(ins, "line", 0) or None
            label = f"{type(ins).__name__} {shown(what)}" if what else type(ins).__name__
            raise TraceError(name, line, f"instruction {position} ({label}): {e}") from None
    trace = Trace(instructions, name, check_names(instructions, name)[0])
    check_totals(trace, name)
    return trace
