"""The unbounded peak of the paper's simulator, what ``--as-prototype`` budgets are relative to.

The paper's simulator measures a log's peak with a runtime of its own that frees every
value, constants included, when its last name is released (minidtr keeps a constant while
a recipe reads it), so its peak can be a few hundred bytes lower than minidtr's. A budget
ratio in prototype mode is a ratio of this peak, as the paper's were. Nothing is evicted
without a budget, so the peak follows from the trace alone: each op's outputs and
workspace are counted while it runs, a storage is freed when its last name goes.
"""

from __future__ import annotations

from .trace import Call, Constant, Copy, CopyFrom, MakeConstant, Mutate, Release, Trace


class _Storages:
    """Names, the storages they hold, each storage's size and names, and the bytes held."""

    def __init__(self):
        self.of: dict[str, int] = {}  # name -> storage number
        self.size: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self.memory = 0
        self.peak = 0

    def new(self, nbytes: int) -> int:
        number = len(self.size)
        self.size[number] = nbytes
        self.refs[number] = 0
        self.memory += nbytes
        return number

    def bind(self, name: str, number: int) -> None:
        self.of[name] = number
        self.refs[number] += 1

    def drop(self, number: int) -> None:
        self.refs[number] -= 1
        if self.refs[number] == 0:
            self.memory -= self.size[number]

    def note(self, extra: int = 0) -> None:
        self.peak = max(self.peak, self.memory + extra)


def prototype_peak(trace: Trace) -> int:
    """The most bytes resident at once in an unbounded replay by the paper's simulator's
    rules (module docstring)."""
    s = _Storages()
    for ins in trace.instructions:
        kind = type(ins)
        if kind is Constant:
            s.bind(ins.name, s.new(ins.nbytes))
            s.note()
        elif kind is Call:
            args = [s.of[a] for a in ins.args]
            made = [args[r.alias] if r.alias >= 0 else s.new(r.nbytes) for r in ins.results]
            s.note(ins.workspace)
            for r, number in zip(ins.results, made, strict=True):
                s.bind(r.name, number)
        elif kind is Mutate:
            args = [s.of[a] for a in ins.args]
            made = [s.new(s.size[args[i]]) for i in ins.mutate]
            s.note()
            for i, number in zip(ins.mutate, made, strict=True):
                s.bind(ins.args[i], number)
                s.drop(args[i])
        elif kind is Copy:
            s.bind(ins.dst, s.of[ins.src])
        elif kind is CopyFrom:
            old = s.of[ins.dst]
            s.bind(ins.dst, s.of[ins.src])
            s.drop(old)
        elif kind is Release:
            s.drop(s.of.pop(ins.name))
        elif kind is MakeConstant:
            pass
    return s.peak
