"""The programs the graders run: small straight-line programs on 1-d float64 arrays.

A program is a list of instructions over named values, as a reader would write it:

    x1 = leaf(4)          a constant: an input of 4 floats (32 bytes); leaf() is one float
    x2 = tanh(x1)         an op: its output is a storage with a recipe
    x3 = x2 * x1
    x4, x5 = split(x3)    two views of x3's storage (no memory of their own)
    del x2                the program drops its handle: the deallocation policy applies
    read x3               the program reads the value (rematerializing it if evicted)
    evict x3              the program evicts x3's storage by hand (when it is resident and
                          evictable: not a constant, not locked), as the tutorial does

``build_program`` turns any list of integer choices into a valid program (so that
hypothesis can shrink the choices freely and still get a program), and
``describe`` prints it in the form above, the budget first. ``run_program`` runs it
on minidtr, on a fresh allocator of its own, and returns what happened: the event
log, where it failed, the values read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

UNARY = ("tanh", "sigmoid", "neg")
BINARY = {"add": "+", "mul": "*", "sub": "-"}
SIZES = (1, 2, 4, 8)
# the instruction kinds, with how many of every 100 choices pick each
WEIGHTS = {
    "leaf": 14,
    "unary": 30,
    "binary": 24,
    "cat": 8,
    "split": 6,
    "sum": 3,
    "drop": 10,
    "read": 5,
    "evict": 4,
}
ALL_KINDS = tuple(WEIGHTS)
SCALAR_KINDS = ("leaf", "unary", "binary", "read")  # step 0's scalar programs


@dataclass(frozen=True)
class Instruction:
    """One line of a program: ``kind`` (leaf, unary, binary, cat, split, sum, drop,
    read), the names it defines (``out``), the op and the names it reads (``args``),
    and for a leaf its length."""

    kind: str
    out: tuple[str, ...] = ()
    op: str = ""
    args: tuple[str, ...] = ()
    length: int = 0

    def __str__(self) -> str:
        lhs = ", ".join(self.out)
        if self.kind == "leaf":
            return f"{lhs} = leaf({self.length or ''})"
        if self.kind == "binary":
            return f"{lhs} = {self.args[0]} {BINARY[self.op]} {self.args[1]}"
        if self.kind == "drop":
            return f"del {self.args[0]}"
        if self.kind in ("read", "evict"):
            return f"{self.kind} {self.args[0]}"
        return f"{lhs} = {self.op}({', '.join(self.args)})"


@dataclass(frozen=True)
class Program:
    """Instructions and the budget, as a fraction ``ratio`` of the way from the floor (the
    constants plus the largest op's inputs and output: no budget below it can run the
    program) to the unbounded peak (``budget_for``)."""

    instructions: tuple[Instruction, ...]
    ratio: float
    scalar: bool = False  # 0-d values (step 0's micro-DTR) instead of 1-d arrays

    def __str__(self) -> str:
        return describe(self)


def describe(program: Program, budget: int | None = None) -> str:
    """The program as lines of code, indented, with its budget when known."""
    head = f"budget {budget} bytes" if budget is not None else f"budget ratio {program.ratio}"
    lines = [f"    # {head}"] + [f"    {ins}" for ins in program.instructions]
    return "\n".join(lines)


def build_program(
    choices: Sequence[tuple[int | str, int, int, int]],
    ratio: float,
    kinds: Sequence[str] = ALL_KINDS,
    scalar: bool = False,
    weights: dict[str, int] | None = None,
) -> Program:
    """A valid program from any list of (kind, a, b, size) integer choices: ``kind``
    picks the instruction among ``kinds`` (by ``weights``, default ``WEIGHTS``; or names
    it: a kind of ``kinds`` by name), ``a``
    and ``b`` pick among the values alive at that point, ``size`` a leaf's length.
    Impossible picks fall back to a leaf (nothing alive yet) or a unary op."""
    weights = {**WEIGHTS, **(weights or {})}
    table = [kind for kind in ALL_KINDS if kind in kinds for _ in range(weights[kind])]
    live: dict[str, int] = {}  # name -> length (0: a 0-d value)
    out: list[Instruction] = []
    counter = 0

    def fresh(length: int) -> str:
        nonlocal counter
        counter += 1
        name = f"x{counter}"
        live[name] = length
        return name

    for kind_choice, a, b, size in choices:
        kind = _kind(kind_choice, table, kinds)
        names = list(live)
        if not names or kind == "leaf":
            length = 0 if scalar else SIZES[size % len(SIZES)]
            out.append(Instruction("leaf", (fresh(length),), length=length))
            continue
        first = names[a % len(names)]
        ins = _instruction(kind, first, names, live, b, fresh)
        out.append(ins)
        if kind == "drop":
            del live[first]
    return Program(tuple(out), ratio, scalar)


def _kind(choice: int | str, table: list[str], kinds: Sequence[str]) -> str:
    """The instruction kind a choice picks: a kind by name (the graders' fixed programs, the
    same kind whatever ``kinds`` holds), or an index into ``table``."""
    if isinstance(choice, str):
        if choice not in kinds:
            raise ValueError(f"build_program: kind {choice!r} is not among {tuple(kinds)}")
        return choice
    return table[choice % len(table)]


def _instruction(
    kind: str, first: str, names: list[str], live: dict[str, int], b: int, fresh: Callable
) -> Instruction:
    length = live[first]
    if kind == "drop":
        return Instruction("drop", args=(first,))
    if kind in ("read", "evict"):
        return Instruction(kind, args=(first,))
    if kind == "binary":
        partners = [n for n in names if live[n] == length]
        second = partners[b % len(partners)]
        op = tuple(BINARY)[b % len(BINARY)]
        return Instruction("binary", (fresh(length),), op, (first, second))
    if kind == "cat" and length > 0:
        second = names[b % len(names)]
        if live[second] > 0:
            return Instruction("cat", (fresh(length + live[second]),), "cat", (first, second))
    if kind == "split" and length >= 2 and length % 2 == 0:
        half = length // 2
        return Instruction("split", (fresh(half), fresh(half)), "split", (first,))
    if kind == "sum" and length > 0:
        return Instruction("sum", (fresh(0),), "sum", (first,))
    op = UNARY[b % len(UNARY)]
    return Instruction("unary", (fresh(length),), op, (first,))


def parse(text: str, ratio: float) -> Program:
    """A program from its lines as ``describe`` prints them (the graders' fixed examples):
    ``x1 = leaf(8)``, ``x2 = tanh(x1)``, ``x3 = x2 * x1``, ``x4 = cat(x1, x3)``,
    ``x5, x6 = split(x4)``, ``x7 = sum(x5)``, ``del x2``, ``read x3``, ``evict x3``."""
    symbols = {symbol: op for op, symbol in BINARY.items()}
    out = []
    for line in (raw.split("#")[0].strip() for raw in text.strip().splitlines()):
        if not line:
            continue
        if line.startswith(("del ", "read ", "evict ")):
            word, name = line.split()
            out.append(Instruction("drop" if word == "del" else word, args=(name,)))
            continue
        lhs, rhs = (part.strip() for part in line.split("="))
        names = tuple(n.strip() for n in lhs.split(","))
        if "(" not in rhs:
            a, symbol, b = rhs.split()
            out.append(Instruction("binary", names, symbols[symbol], (a, b)))
            continue
        op, args = rhs.rstrip(")").split("(")
        args_ = tuple(a.strip() for a in args.split(",") if a.strip())
        if op == "leaf":
            out.append(Instruction("leaf", names, length=int(args_[0]) if args_ else 0))
        else:
            kind = op if op in ("cat", "split", "sum") else "unary"
            out.append(Instruction(kind, names, op, args_))
    return Program(tuple(out), ratio, scalar=all(i.length == 0 for i in out if i.kind == "leaf"))


def leaf_values(length: int, seed: int) -> np.ndarray:
    """A leaf's values: the same for every run of the program."""
    rng = np.random.default_rng(seed)
    if length == 0:
        return np.float64(rng.uniform(-2, 2))
    return rng.uniform(-2, 2, size=length)


# ---- running a program on minidtr ----------------------------------------------------------


@dataclass
class Run:
    """What one run of a program did: the event log, the error that stopped it (a
    ``BudgetError`` message, or what the code under test raised) and at which
    instruction, which storage each program name was (id -> name), and the values read."""

    events: list[dict[str, Any]]
    error: BaseException | None = None
    failed_at: int | None = None
    names: dict[int, str] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    peak: int = 0
    marks: list[int] = field(default_factory=list)  # events logged by the end of each line
    lines: list[str] = field(default_factory=list)  # the program's lines, as text
    constants: int = 0  # the leaves' bytes
    largest_op: int = 0  # the largest op's output and distinct inputs, in bytes


AfterLine = Callable[[int, dict[str, Any], Any], None]


def run_program(
    program: Program,
    budget: int | None,
    after_line: AfterLine | None = None,
    names: dict[int, str] | None = None,
    **settings: Any,
) -> Run:
    """Run ``program`` on a fresh allocator under ``budget`` with the runtime ``settings``
    (``md.Runtime``'s keywords; by default the reference policy, ``cost="flops"``, no
    thrash guard, events recorded). An error stops the run and is kept in the result.
    ``after_line(number, env, allocator)``, if given, is called after each line with the
    program's values by name (Tensors) and the allocator: what a grader inspects.
    ``names``, if given, is the run's ``names``, filled as the run goes: a grader that
    names storages while the program runs reads it."""

    import minidtr as md

    from .isolation import fresh_allocator

    options: dict[str, Any] = {
        "cost": "flops",
        "reference": True,
        "record_events": True,
        "max_slowdown": None,
        "max_wall_slowdown": None,
        **settings,
    }
    runtime = md.Runtime(budget=budget, **options)
    lines = [str(ins) for ins in program.instructions]
    run = Run(events=[], lines=lines, names={} if names is None else names)
    env: dict[str, Any] = {}
    events = runtime.events if runtime.events is not None else []
    with fresh_allocator() as allocator:
        try:
            with runtime:
                for number, ins in enumerate(program.instructions):
                    run.failed_at = number
                    _execute(ins, env, run, number)
                    run.marks.append(len(events))
                    if after_line is not None:
                        after_line(number, env, allocator)
                run.failed_at = None
        except Exception as error:  # noqa: BLE001 (what stopped the run is the result)
            run.error = error
            run.marks.append(len(events))
        finally:
            env.clear()
    run.events = list(runtime.events or [])
    run.peak = runtime.stats()["peak_memory"]
    return run


def _execute(ins: Instruction, env: dict[str, Any], run: Run, number: int) -> None:
    import minidtr as md

    if ins.kind == "leaf":
        value = md.tensor(leaf_values(ins.length, number))
    elif ins.kind == "drop":
        del env[ins.args[0]]
        return
    elif ins.kind == "read":
        run.values[f"{ins.args[0]} at line {number + 1}"] = env[ins.args[0]].numpy()
        return
    elif ins.kind == "evict":
        _evict_by_hand(env[ins.args[0]].storage)
        return
    elif ins.kind == "binary":
        a, b = (env[name] for name in ins.args)
        value = getattr(md, ins.op)(a, b)
    elif ins.kind == "cat":
        value = md.concat([env[name] for name in ins.args])
    elif ins.kind == "split":
        left, right = md.split(env[ins.args[0]], 2)
        env[ins.out[0]], env[ins.out[1]] = left, right
        return
    else:
        value = getattr(md, ins.op)(env[ins.args[0]])
    env[ins.out[0]] = value
    storage = value.storage
    run.names.setdefault(storage.id, ins.out[0])
    if ins.kind == "leaf":
        run.constants += storage.nbytes
    else:
        working = storage.nbytes + sum(parent.nbytes for parent in storage.parents)
        run.largest_op = max(run.largest_op, working)


def _evict_by_hand(storage: Any) -> None:
    """``evict x``: drop the buffer of x's storage, if it is resident and evictable."""
    if storage.buffer is not None and storage.evictable and not storage.locks:
        storage.allocator.evict(storage, "by hand")


def budget_for(program: Program, **settings: Any) -> tuple[int, int]:
    """(budget, unbounded peak): the program's budget, ``ratio`` of the way from its floor
    to the peak of an unbounded run with the same settings."""
    free = run_program(program, None, **settings)
    if free.error is not None:
        raise free.error
    floor = min(free.constants + free.largest_op, free.peak)
    return max(0, floor + int(program.ratio * (free.peak - floor))), free.peak


def listing(program: Program, **settings: Any) -> str:
    """``describe(program)`` with its budget in bytes under the runtime ``settings`` (as
    ``budget_for`` gives it): a failing example as the student can run it again."""
    return describe(program, budget_for(program, **settings)[0])
