"""The static graph of a trace, in trace order, as the optimal-schedule solver sees it.

One node per op that allocates (a CALL with fresh results, a MUTATE), with its
cost (TIME) and size (all its fresh results together: an op's outputs are
computed, kept and dropped together here, as in Checkmate). Edges go from the
nodes whose storages an op reads. Views are folded into the node whose storage
they view; their TIME is counted once (``folded_cost``), as in the simulator.
Constants (inputs, parameters, ``CONSTANT_RESULTS``, values made constant)
are not nodes: each stage is charged the constant bytes alive at its node's
point of the unbounded replay (``constants``), the final stage also those
alive at the end, less those made of the last node's storages or of those it
reads (the stage holds them already, as that node's output or inputs). An
access (a CALL with no results) is a node of size 0 and cost 0 that needs its
arguments resident at that point. Nodes whose names are still held at the end
are the outputs. Each node's WORKSPACE (the scratch bytes
its kernel reserves with its outputs, first run or rerun) is kept.

The finer facts a lower bound needs (``minidtr.sim.bound``) are kept too: the
storages (``parts``) a node's size is made of, which of them each node reads
(``reads``) and which are held at the end (``held``), since a replay evicts and
keeps storages one by one; and the bytes of the constants every replay holds for
sure, whatever its budget and deallocation policy: those a name still refers to
(``sure_constants`` during each node's kernel, ``stage_constants`` at the least
between the node before and it, ``end_constants`` at the end). A released constant
can outlive its names while a recipe needs it, as long as the policy keeps that
recipe; a value made constant only ``IF_RESIDENT`` is left out, since a budget that
evicts it first never makes it one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .trace import Call, Constant, Copy, CopyFrom, MakeConstant, Mutate, Release, Trace

Part = tuple[int, int]  # a storage: (its node, its index among the node's storages)


@dataclass
class Graph:
    labels: list[str] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    deps: list[tuple[int, ...]] = field(default_factory=list)  # each < the node's index
    outputs: set[int] = field(default_factory=set)
    constant_bytes: int = 0  # charged at every stage
    constants: list[int] = field(default_factory=list)  # charged at each stage, when given
    folded_cost: float = 0.0  # TIME of views and constant-producing ops, computed once
    workspace: list[int] = field(default_factory=list)  # scratch bytes of each node's kernel
    parts: list[tuple[int, ...]] = field(default_factory=list)  # bytes of each storage of a node
    reads: list[tuple[Part, ...]] = field(default_factory=list)  # storages each node reads
    held: set[Part] = field(default_factory=set)  # storages held at the end
    sure_constants: list[int] = field(default_factory=list)  # during each node's kernel
    stage_constants: list[int] = field(default_factory=list)  # least since the node before
    end_constants: int = 0

    def __len__(self) -> int:
        return len(self.cost)

    def add(
        self,
        label: str,
        cost: float,
        size: int,
        deps,
        workspace: int = 0,
        parts: tuple[int, ...] | None = None,
        reads=None,
    ) -> int:
        """Add a node; by default its size is one storage and it reads every storage of
        its dependencies."""
        self.labels.append(label)
        self.cost.append(cost)
        self.size.append(size)
        self.deps.append(tuple(sorted(set(deps))))
        self.workspace.append(workspace)
        self.parts.append((size,) if parts is None else tuple(parts))
        if reads is None:
            reads = [(d, p) for d in self.deps[-1] for p in range(len(self.parts[d]))]
        self.reads.append(tuple(sorted(set(reads))))
        return len(self.cost) - 1

    def users(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.cost]
        for k, deps in enumerate(self.deps):
            for i in deps:
                out[i].append(k)
        return out

    @property
    def compute(self) -> float:
        """Cost of computing every node once."""
        return sum(self.cost)

    def constant_at(self, t: int) -> int:
        """Bytes of constants resident during stage ``t``."""
        return self.constant_bytes + (self.constants[t] if self.constants else 0)

    def held_parts(self) -> set[Part]:
        """The storages that must be resident at the end: ``held``, or for a graph built
        by hand, every storage of its outputs."""
        if self.held or not self.outputs:
            return self.held
        return {(i, p) for i in self.outputs for p in range(len(self.parts[i]))}

    def sure_constant_at(self, t: int) -> int:
        """Constant bytes every replay holds while node ``t``'s kernel runs."""
        sure = self.sure_constants or self.constants
        return self.constant_bytes + (sure[t] if sure else 0)

    def stage_constant_at(self, t: int) -> int:
        """Constant bytes every replay holds throughout stage ``t`` (``len(self)``: the
        end, where the outputs are made resident)."""
        if t == len(self) and (self.sure_constants or not t):
            return self.constant_bytes + self.end_constants
        if t == len(self):  # a graph built by hand: the last stage's
            return self.constant_at(t - 1)
        least = self.stage_constants or self.sure_constants or self.constants
        return self.constant_bytes + (least[t] if least else 0)


CONSTANT = -1


def graph_from_trace(trace: Trace) -> Graph:
    """The trace's graph, with the constants alive at each node measured by an unbounded
    replay run alongside, and those every replay holds for sure: the ones a name still
    refers to (a released one can outlive its names while a recipe needs it, for as long
    as the budget and the deallocation policy keep that recipe)."""
    from .simulator import Replayer

    graph = Graph()
    replayer = Replayer(None, "dtr", "eager")
    names = _Names()
    try:
        low = 0  # the least sure constant bytes since the last node's kernel
        for ins in trace.instructions:
            before, sure_before = replayer.allocator.constant_bytes, names.sure
            nodes = len(graph)
            _add(graph, names, ins)
            replayer.step(ins)
            if len(graph) > nodes:
                graph.constants.append(max(before, replayer.allocator.constant_bytes))
                graph.sure_constants.append(max(sure_before, names.sure))
                graph.stage_constants.append(min(low, sure_before))
                low = names.sure
            else:
                low = min(low, names.sure)
        replayer.finish()
        graph.end_constants = names.sure
        if graph.constants:
            end = replayer.allocator.constant_bytes - _made_in_last_kernel(graph, names)
            graph.constants[-1] = max(graph.constants[-1], end)
    finally:
        replayer.close()
    held = {w for w in names.values() if w[0] != CONSTANT}
    graph.outputs = {node for node, _, _ in held}
    graph.held = {(node, part) for node, part, _ in held}
    return graph


def _made_in_last_kernel(graph: Graph, names: _Names) -> int:
    """The bytes of the constants a name refers to at the end that were made from the last
    node's storages or those it reads: the last stage holds them as that node's output
    or inputs (its ``size``), so its end-constants charge leaves them out (else a trace
    whose last value is made constant needs its bytes twice)."""
    last = len(graph) - 1
    in_last_kernel = {(last, p) for p in range(len(graph.parts[last]))} | set(graph.reads[last])
    made = {
        number: nbytes
        for kind, number, nbytes in names.values()
        if kind == CONSTANT and names.made_from.get(number) in in_last_kernel
    }
    return sum(made.values())


class _Names(dict):
    """The name table: name -> (node, the storage's index among the node's, its bytes),
    or (CONSTANT, the constant's number, its bytes). ``sure`` is the bytes of the
    constants some name refers to, those made constant only ``IF_RESIDENT`` left out."""

    def __init__(self):
        super().__init__()
        self.refs: Counter[int] = Counter()
        self.conditional: set[int] = set()
        self.sure = 0
        self.made = 0
        self.made_from: dict[int, Part] = {}  # a constant made of a node's storage: which

    def constant(self, nbytes: int, conditional: bool = False) -> tuple[int, int, int]:
        """A new constant's entry."""
        self.made += 1
        if conditional:
            self.conditional.add(self.made)
        return (CONSTANT, self.made, nbytes)

    def __setitem__(self, name: str, value: tuple[int, int, int]) -> None:
        if name in self:
            self._count(self[name], -1)
        super().__setitem__(name, value)
        self._count(value, 1)

    def __delitem__(self, name: str) -> None:
        self._count(self[name], -1)
        super().__delitem__(name)

    def _count(self, value: tuple[int, int, int], step: int) -> None:
        kind, number, nbytes = value
        if kind != CONSTANT or number in self.conditional:
            return
        self.refs[number] += step
        if self.refs[number] == (1 if step > 0 else 0):
            self.sure += step * nbytes


def _add(graph: Graph, names: _Names, ins) -> None:
    """Add what one instruction contributes to the graph and the name table."""
    if isinstance(ins, Constant):
        names[ins.name] = names.constant(ins.nbytes)
    elif isinstance(ins, Call):
        _add_call(graph, names, ins)
    elif isinstance(ins, Mutate):
        reads = _reads(names, ins.args)
        sizes = [names[ins.args[i]][2] for i in ins.mutate]
        deps = [node for node, _ in reads]
        node = graph.add(ins.op, ins.time, sum(sizes), deps, 0, tuple(sizes), reads)
        for part, (i, nbytes) in enumerate(zip(ins.mutate, sizes, strict=True)):
            names[ins.args[i]] = (node, part, nbytes)
    elif isinstance(ins, Copy | CopyFrom):
        names[ins.dst] = names[ins.src]
    elif isinstance(ins, MakeConstant):
        value = names[ins.name]
        if value[0] != CONSTANT:
            made = names.constant(value[2], conditional=ins.if_resident)
            names.made_from[made[1]] = value[:2]
            for name in [n for n, w in names.items() if w == value]:
                names[name] = made
    elif isinstance(ins, Release):
        del names[ins.name]


def _reads(names: _Names, args) -> list[tuple[int, int]]:
    """The non-constant storages ``args`` refer to, each once."""
    return sorted({names[a][:2] for a in args if names[a][0] != CONSTANT})


def _add_call(graph: Graph, names: _Names, ins: Call) -> None:
    reads = _reads(names, ins.args)
    deps = [node for node, _ in reads]
    fresh = [r for r in ins.results if r.fresh]
    if ins.constant:
        for r in ins.results:  # a view of an argument is that argument's storage
            names[r.name] = names.constant(r.nbytes) if r.fresh else names[ins.args[r.alias]]
        if deps:
            graph.add(ins.op, 0.0, 0, deps, ins.workspace, (), reads)
        graph.folded_cost += ins.time
        return
    node = CONSTANT
    if fresh or (not ins.results and deps):
        sizes = tuple(r.nbytes for r in fresh)
        node = graph.add(ins.op, ins.time, sum(sizes), deps, ins.workspace, sizes, reads)
    elif ins.results:
        graph.folded_cost += ins.time
    parts = iter(range(len(fresh)))
    for r in ins.results:
        names[r.name] = (node, next(parts), r.nbytes) if r.fresh else names[ins.args[r.alias]]
