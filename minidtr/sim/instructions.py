"""A trace's instructions (``minidtr.sim.trace`` reads and writes them as a log; its
docstring describes the format), the ``Trace`` that holds them, and the check that every
name is defined before it is used."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..reading import shown


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


def make_trace(instructions: list[Instruction], name: str = "trace") -> Trace:
    """A checked ``Trace`` from instructions built in code (generators, the recorder)."""
    return Trace(list(instructions), name, check_names(instructions, name)[0])
