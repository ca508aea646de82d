"""The static graph of a trace, in trace order, as the optimal-schedule solver sees it.

One node per op that allocates (a CALL with fresh results, a MUTATE), with its
cost (TIME) and size (all its fresh results together: an op's outputs are
computed, kept and dropped together here, as in Checkmate). Edges go from the
nodes whose storages an op reads. Views are folded into the node whose storage
they view; their TIME is counted once (``folded_cost``), as in the simulator.
Constants (inputs, parameters, ``CONSTANT_RESULTS``, values made constant)
are not nodes: each stage is charged the constant bytes alive at its node's
point of the unbounded replay (``constants``), the final stage also those
alive at the end. An access (a CALL with no results) is a node of size 0 and
cost 0 that needs its arguments resident at that point. Nodes whose names are
still held at the end are the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .trace import Call, Constant, Copy, CopyFrom, MakeConstant, Mutate, Release, Trace


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

    def __len__(self) -> int:
        return len(self.cost)

    def add(self, label: str, cost: float, size: int, deps) -> int:
        self.labels.append(label)
        self.cost.append(cost)
        self.size.append(size)
        self.deps.append(tuple(sorted(set(deps))))
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


CONSTANT = -1


def graph_from_trace(trace: Trace) -> Graph:
    """The trace's graph, with the constants alive at each node measured by an unbounded
    replay run alongside."""
    from .simulator import Replayer

    graph = Graph()
    replayer = Replayer(None, "dtr", "eager")
    where: dict[str, tuple[int, int]] = {}  # name -> (node or CONSTANT, its storage's bytes)
    try:
        for ins in trace.instructions:
            before = replayer.allocator.constant_bytes
            nodes = len(graph)
            _add(graph, where, ins)
            replayer.step(ins)
            if len(graph) > nodes:
                graph.constants.append(max(before, replayer.allocator.constant_bytes))
        replayer.finish()
        if graph.constants:
            end = replayer.allocator.constant_bytes
            graph.constants[-1] = max(graph.constants[-1], end)
    finally:
        replayer.close()
    graph.outputs = {node for node, _ in where.values() if node != CONSTANT}
    return graph


def _add(graph: Graph, where: dict[str, tuple[int, int]], ins) -> None:
    """Add what one instruction contributes to the graph and the name table."""
    if isinstance(ins, Constant):
        where[ins.name] = (CONSTANT, ins.nbytes)
    elif isinstance(ins, Call):
        deps = [n for n in (where[a][0] for a in ins.args) if n != CONSTANT]
        fresh = [r for r in ins.results if r.fresh]
        if ins.constant:
            for r in ins.results:
                where[r.name] = (CONSTANT, r.nbytes)
            if deps:
                graph.add(ins.op, 0.0, 0, deps)
            graph.folded_cost += ins.time
            return
        node = CONSTANT
        if fresh or (not ins.results and deps):
            node = graph.add(ins.op, ins.time, sum(r.nbytes for r in fresh), deps)
        elif ins.results:
            graph.folded_cost += ins.time
        for r in ins.results:
            where[r.name] = (node, r.nbytes) if r.fresh else where[ins.args[r.alias]]
    elif isinstance(ins, Mutate):
        deps = [where[a][0] for a in ins.args if where[a][0] != CONSTANT]
        sizes = [where[ins.args[i]][1] for i in ins.mutate]
        node = graph.add(ins.op, ins.time, sum(sizes), deps)
        for i, nbytes in zip(ins.mutate, sizes, strict=True):
            where[ins.args[i]] = (node, nbytes)
    elif isinstance(ins, Copy | CopyFrom):
        where[ins.dst] = where[ins.src]
    elif isinstance(ins, MakeConstant):
        value = where[ins.name]
        for name in [n for n, w in where.items() if w == value]:
            where[name] = (CONSTANT, value[1])
    elif isinstance(ins, Release):
        del where[ins.name]
