"""A proven lower bound on the recomputation any schedule of a trace needs: a linear program.

What it bounds. Every schedule the simulator can replay (any heuristic, any deallocation
policy) runs the trace's ops for the first time in trace order and recomputes evicted
values on demand in between; the optimal-schedule MILP (``minidtr.sim.checkmate``)
schedules the same way, in Checkmate's stage model. This linear program is a
*relaxation* of both: each schedule of either kind gives a feasible point of it that
costs no more than the schedule, so its optimum is at most the cheapest such schedule's
cost, under the budget semantics the heuristics are measured with: the budget covers the
constants, every resident storage and, while a kernel runs, its inputs, all its outputs
and its workspace. (Time order is fixed by the trace for both, so the bound says nothing
about schedules that reorder ops.)

The model. The graph is ``graph_from_trace``'s (nodes in trace order), kept and dropped
storage by storage, as a replay evicts them. Stage ``t`` is the stretch that ends with
node ``t``'s first kernel; stage ``n`` (the end) makes the held storages resident.
Consecutive stages are grouped into *blocks* (one stage each unless the program would be
too large, see below). Variables, all in [0, 1] (a schedule sets them to 0 or 1):

- ``R[b,i]``: node i runs in block b, other than its first run;
- ``S[b,s]``: storage s is resident when block b begins;
- ``T[b,s]``: at most 1 only if s stays resident through block b (from its first run, if
  that is in b); ``Theta[b] = sum m_s T[b,s]``, the bytes resident throughout.

Constraints, each true of every schedule: a kernel's inputs are resident when it runs:
resident since the block began or rebuilt in it (``R[b,k] <= S[b,s] + R[b,i]``, the first
run of k with 1 for ``R[b,k]``; inputs first computed in the block itself are taken as
there); a storage resident when a block begins was resident when the block before began or
was rebuilt in it (``S[b+1,s] <= S[b,s] + R[b,i]``); one resident at the end of a block
that was not rebuilt in it was resident throughout (``T[b,s] >= S[b+1,s] - R[b,i]``); the
held storages are resident at the end. Memory: while node t's first kernel runs, its
inputs, outputs and workspace, the constants held for sure then (``sure_constant_at``)
and what stays resident to the end of the block (``S[b+1,s]`` when t ends its block, else
``T[b,s]``) fit the budget; while a node is rebuilt in block b, its inputs, outputs and
workspace, the constants held for sure through the block and ``Theta[b]`` fit it. The
objective is the cost of the rebuilds, ``sum c_i R[b,i]``.

Why it is valid for the simulator: a storage becomes resident only when its node's kernel
runs (first run or replay), which is what makes the three residency rules hold; a replay
reserves all of a node's outputs and its workspace with its inputs locked (``reserve``
checks the budget there); the constants counted are only those a name still refers to,
which no policy can free (a released one may be kept for a recipe, or not: the
``banish`` policy drops it), and never a value made constant ``IF_RESIDENT``. For the
MILP: its schedules set ``S`` node by node, pay for each run, and its memory accounting
counts at least what is counted here (workspaces included: the MILP charges them too),
with at least these constants (it charges those the unbounded replay holds).

What it does not bound: schedules that change the order of the first runs, or split an
op's kernel. And the MILP's own lower bound (``OptimalResult.bound``) bounds only the
MILP's optimum, which a heuristic can beat (it keeps a multi-output op's outputs
together, and charges every constant the unbounded replay holds); this bound is below
both.

Sound reductions. A node is never rebuilt, and none of its storages kept, after the last
stage in which it or a descendant runs or is held (``need``): a feasible point that did
so stays feasible, and no dearer, with those set to 0. Blocks of ``B > 1`` stages coarsen
time: several rebuilds of a node within one block are paid once, and what is resident at
a kernel is known only from what stays to the block's end or through the whole block;
every schedule still maps to a feasible point that costs no more, so the value stays a
lower bound. It is another relaxation, not a looser copy of the exact one: on the U-Net
and ResNet-32 traces, 2 to 4 stages per block move the bound by at most 0.006, up as
often as down, for a fraction of the time, and 16 lower it by up to 0.028. A large
graph (the Tree-LSTM's 2,400 nodes: every early node is an ancestor of a late one, so
O(n^2) pairs of stage and node stay live) needs blocks to solve in minutes:
``lower_bound`` picks the smallest ``B`` that keeps the program under ``max_pairs``
pairs of block and node (the six other bundled traces stay exact, ``B = 1``).

Solved with SciPy's HiGHS (``scipy.optimize.linprog``) under a time limit; a program that
HiGHS proves infeasible means that no schedule of either kind fits the budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checkmate import ConstraintRows, _quiet_c_stdout
from .graph import Graph, Part, graph_from_trace
from .instructions import slowdown_of

MAX_PAIRS = 70_000  # (block, node) pairs: the bundled traces but the Tree-LSTM stay exact


@dataclass
class LowerBound:
    # "ok"; "infeasible": no schedule fits the budget; "time_limit": HiGHS stopped first,
    # no bound; "failed": HiGHS gave up for another reason (``message`` says which)
    status: str
    budget: int
    cost: float  # at most the cost (compute + recompute) of every schedule; nan if none
    slowdown: float  # at most (compute + recompute) / compute of every schedule
    solve_time: float  # seconds: building the program and solving it
    block: int  # stages per block (1: the exact relaxation)
    nodes: int = 0  # of the graph
    variables: int = 0
    constraints: int = 0
    message: str = ""

    @property
    def found(self) -> bool:
        return self.status == "ok"


def lower_bound(
    trace,
    ratio: float | None = None,
    budget: int | None = None,
    *,
    time_limit: float = 600.0,
    block: int | None = None,
    max_pairs: int = MAX_PAIRS,
) -> LowerBound:
    """A lower bound on the slowdown of every schedule of ``trace`` within ``budget``
    bytes, or ``ratio`` x the unbounded replay's peak (constants included), as
    ``simulate`` measures them. ``block``: stages per block (default: the fewest that
    keep the program under ``max_pairs`` pairs)."""
    from ..runtime.options import check_budget
    from .simulator import resolve_budget

    if ratio is None and budget is None:
        raise ValueError("give a budget ratio or a budget in bytes")
    if ratio is not None and not 0.0 < ratio <= 1.0:
        raise ValueError(f"the budget ratio must be in (0, 1], got {ratio:g}")
    graph = graph_from_trace(trace)
    bytes_budget = resolve_budget(trace, ratio, check_budget(budget))  # (-1 was "infeasible")
    return relaxation_bound(
        graph,
        bytes_budget,
        time_limit=time_limit,
        block=block,
        max_pairs=max_pairs,
        total=trace.total_compute,
    )


def bound_rows(
    traces: Sequence,
    ratios: Sequence[float],
    heuristics: Sequence[str] = (),
    time_limit: float = 600.0,
    block: int | None = None,
    *,
    jobs: int | None = None,
    client: Any = None,
    progress: bool = False,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """One row per trace and ratio: the bound on the slowdown (NaN unless ``status`` is
    ``ok``), its solve time and block size, and each of ``heuristics``' slowdown at the
    same budget (NaN: out of memory; replayed without a thrash guard). Every (trace,
    ratio) is a task for ``minidtr.sim.parallel``; rows come back in order."""
    from .sweep import task_rows

    options = (tuple(heuristics), time_limit, block)
    tasks = [(i, (ratio, *options)) for i in range(len(traces)) for ratio in ratios]
    return task_rows(_bound_row, traces, tasks, jobs, client, None, progress, on_row)


def _bound_row(
    trace, ratio: float, heuristics: Sequence[str], time_limit: float, block: int | None
) -> dict:
    from .simulator import simulate

    found = lower_bound(trace, ratio, time_limit=time_limit, block=block)
    row = {
        "trace": trace.name,
        "nodes": found.nodes,
        "ratio": ratio,
        "budget": found.budget,
        "status": found.status,
        "bound": found.slowdown,
        "block": found.block,
        "solve_time": found.solve_time,
    }
    for h in heuristics:
        result = simulate(trace, budget=found.budget, heuristic=h, thrash=None)
        row[h] = result.slowdown if result.status == "ok" else math.nan
    return row


def relaxation_bound(
    graph: Graph,
    budget: int,
    *,
    time_limit: float = 600.0,
    block: int | None = None,
    max_pairs: int = MAX_PAIRS,
    total: float | None = None,
) -> LowerBound:
    """The linear program's optimum for ``graph`` within ``budget`` bytes (see the module's
    docstring). ``total``: the trace's whole compute, the slowdown's denominator (default:
    the graph's, views and constant-making ops included)."""
    linprog = _linprog()
    started = time.perf_counter()
    total = graph.compute + graph.folded_cost if total is None else total
    need = needed_until(graph)
    size = block if block is not None else block_size(graph, need, max_pairs)
    if size < 1:
        raise ValueError(f"a block holds at least one stage, got {size}")
    too_big = _over_floor(graph, budget)
    # within a zero budget, a graph that passes the floor check has only empty storages:
    # nothing is ever rebuilt (and the program, in units of the budget, has no unit)
    if too_big or not len(graph) or budget == 0:
        status = "infeasible" if too_big else "ok"
        cost = math.nan if too_big else graph.compute
        return _result(status, budget, cost, graph, total, started, size, message=too_big)
    program = Program(graph, budget, need, size)
    solved = program.solve(linprog, max(time_limit - (time.perf_counter() - started), 1.0))
    status, cost, message = solved
    rows = len(program.constraints.lb)
    return _result(status, budget, cost, graph, total, started, size, program.n_var, rows, message)


def _linprog():
    try:
        from scipy.optimize import linprog
    except ImportError as e:  # pragma: no cover - scipy is an optional extra
        raise ImportError("the lower bound needs SciPy (pip install 'minidtr[scipy]')") from e
    return linprog


def _result(status, budget, cost, graph, total, started, size, n_var=0, rows=0, message=""):
    slowdown = slowdown_of(cost - graph.compute, total) if status == "ok" else math.nan
    elapsed = time.perf_counter() - started
    return LowerBound(
        status, budget, cost, slowdown, elapsed, size, len(graph), n_var, rows, message
    )


def needed_until(graph: Graph) -> list[int]:
    """For each node, the last stage in which it or a descendant runs or is held (the
    end is stage ``len(graph)``)."""
    n = len(graph)
    need = list(range(n))
    for i, _ in graph.held_parts():
        need[i] = n
    for k in range(n - 1, -1, -1):
        for i in graph.deps[k]:
            need[i] = max(need[i], need[k])
    return need


def block_size(graph: Graph, need: Sequence[int], max_pairs: int = MAX_PAIRS) -> int:
    """The fewest stages per block that keep the live (block, node) pairs under
    ``max_pairs``."""
    pairs = sum(need[i] - i for i in range(len(graph)))
    return max(1, math.ceil(pairs / max_pairs))


def _over_floor(graph: Graph, budget: int) -> str:
    """Why no schedule fits (a kernel's own needs, or the held storages at the end, over
    the budget), or ''."""
    for t in range(len(graph)):
        need = _kernel_bytes(graph, t) + graph.sure_constant_at(t)
        if need > budget:
            return f"node {t} ({graph.labels[t]}) alone needs {need:,} bytes"
    held = sum(graph.parts[i][p] for i, p in graph.held_parts())
    end = held + graph.stage_constant_at(len(graph))
    if end > budget:
        return f"the storages held at the end need {end:,} bytes"
    return ""


def _kernel_bytes(graph: Graph, k: int) -> int:
    """What node k's kernel holds besides constants: its inputs, outputs and workspace."""
    inputs = sum(graph.parts[i][p] for i, p in graph.reads[k])
    return graph.size[k] + graph.workspace[k] + inputs


class Program:
    """The linear program for one graph, budget and block size (see the module's
    docstring); rows are gathered as sparse triplets, memory rows in units of the budget."""

    def __init__(self, graph: Graph, budget: int, need: Sequence[int], size: int):
        self.graph, self.budget, self.need = graph, budget, need
        n = len(graph)
        self.starts = list(range(0, n + 1, size))  # each block's first stage
        self.block_of = [t // size for t in range(n + 1)]
        self.last = len(self.starts) - 1
        self.n_var = 0
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.constraints = ConstraintRows()
        self._variables()
        self._rows()

    def end(self, b: int) -> int:
        """Block b's last stage."""
        return self.starts[b + 1] - 1 if b < self.last else len(self.graph)

    # ---- variables ----------------------------------------------------------------------

    def _new(self, cost: float = 0.0, upper: float = 1.0) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        self.n_var += 1
        return self.n_var - 1

    def _variables(self) -> None:
        graph, need = self.graph, self.need
        self.R: dict[tuple[int, int], int] = {}
        self.S: dict[tuple[int, Part], int] = {}
        self.T: dict[tuple[int, Part], int] = {}
        for i in range(len(graph)):
            first, final = self.block_of[i], self.block_of[need[i]]
            for b in range(first, final + 1):
                if b > first or i < self.end(b):
                    self.R[(b, i)] = self._new(graph.cost[i])
                for p in range(len(graph.parts[i])):
                    if b > first:
                        self.S[(b, (i, p))] = self._new()
        self.kept_at: list[list[tuple[Part, int]]] = [[] for _ in self.starts]
        for (b, s), col in self.S.items():  # kept to block b: resident through b - 1?
            self.T[(b - 1, s)] = self._new()
            self.kept_at[b].append((s, col))
        for i, p in self.graph.held_parts():
            self.T.setdefault((self.last, (i, p)), self._new())
        self.theta = [self._new(upper=math.inf) for _ in self.starts]

    # ---- rows ---------------------------------------------------------------------------

    def _row(self, entries, lb: float, ub: float) -> None:
        self.constraints.row(entries, lb, ub)

    def _rows(self) -> None:
        self._inputs_resident()
        self._kept()
        self._throughout()
        self._first_kernels()
        self._rebuilds()

    def _runs(self):
        """(block, node, its R column or None for its first run) for every run a schedule
        may make, the end's reads of the held storages as a run of node ``n``."""
        for k in range(len(self.graph)):
            yield self.block_of[k], k, None
        for b, k in self.R:
            yield b, k, self.R[(b, k)]

    def _inputs_resident(self) -> None:
        graph = self.graph
        for b, k, col in self._runs():
            for i, p in graph.reads[k]:
                self._input(b, i, p, col)
        for i, p in graph.held_parts():
            self._input(self.last, i, p, None)

    def _input(self, b: int, i: int, p: int, col: int | None) -> None:
        """The storage (i, p) is resident at a run in block b (``col``: the run's R, or
        None for a run that happens for sure)."""
        if i >= self.starts[b]:
            return  # first computed in the block: taken as there
        entries = [(self.R[(b, i)], 1.0), (self.S[(b, (i, p))], 1.0)]
        if col is None:
            self._row(entries, 1.0, math.inf)
        else:
            self._row([*entries, (col, -1.0)], 0.0, math.inf)

    def _kept(self) -> None:
        for (b, (i, p)), col in self.S.items():
            if (b - 1, (i, p)) in self.S:
                earlier = self.S[(b - 1, (i, p))]
                self._row([(col, 1.0), (earlier, -1.0), (self.R[(b - 1, i)], -1.0)], -math.inf, 0)

    def _kept_after(self, b: int, s: Part) -> tuple[int | None, float]:
        """Whether s is resident when block b + 1 begins: (its S column, 0) or, at the end,
        (None, 1) for a held storage and (None, 0) for another."""
        if b < self.last:
            return self.S.get((b + 1, s)), 0.0
        return None, 1.0 if s in self.graph.held_parts() else 0.0

    def _throughout(self) -> None:
        graph = self.graph
        per_block: list[list[tuple[int, float]]] = [[] for _ in self.starts]
        for (b, (i, p)), col in self.T.items():
            kept, held = self._kept_after(b, (i, p))
            entries = [(col, 1.0), *([(self.R[(b, i)], 1.0)] if (b, i) in self.R else [])]
            if kept is not None:
                entries.append((kept, -1.0))
            self._row(entries, held, math.inf)
            if i < self.starts[b]:
                per_block[b].append((col, -graph.parts[i][p] / self.budget))
        for b, entries in enumerate(per_block):
            self._row([(self.theta[b], 1.0), *entries], 0.0, 0.0)

    def _first_kernels(self) -> None:
        graph = self.graph
        for t in range(len(graph)):
            b = self.block_of[t]
            room = self.budget - graph.sure_constant_at(t) - _kernel_bytes(graph, t)
            skip = {*graph.reads[t], *((t, p) for p in range(len(graph.parts[t])))}
            if t == self.end(b):
                entries = [
                    (col, graph.parts[i][p] / self.budget)
                    for (i, p), col in self.kept_at[b + 1]
                    if (i, p) not in skip
                ]
            else:
                entries = self._resident_in_block(b, t, skip)
            self._row(entries, -math.inf, room / self.budget)

    def _resident_in_block(self, b: int, t: int, skip: set) -> list[tuple[int, float]]:
        """Theta[b] and the storages first computed in block b before node t, minus those
        node t counts itself: what stays resident throughout, at node t's kernel."""
        graph = self.graph
        entries = [(self.theta[b], 1.0)]
        for i in range(self.starts[b], t):
            for p in range(len(graph.parts[i])):
                if (b, (i, p)) in self.T and (i, p) not in skip:
                    entries.append((self.T[(b, (i, p))], graph.parts[i][p] / self.budget))
        for i, p in skip:
            if i < self.starts[b] and (b, (i, p)) in self.T:
                entries.append((self.T[(b, (i, p))], -graph.parts[i][p] / self.budget))
        return entries

    def _rebuilds(self) -> None:
        graph = self.graph
        room = [self._stage_room(b) for b in range(len(self.starts))]
        for (b, k), col in self.R.items():
            own = _kernel_bytes(graph, k) / self.budget
            entries = [(col, own), (self.theta[b], 1.0)]
            for i, p in {*graph.reads[k], *((k, p) for p in range(len(graph.parts[k])))}:
                if i < self.starts[b] and (b, (i, p)) in self.T:
                    entries.append((self.T[(b, (i, p))], -graph.parts[i][p] / self.budget))
            self._row(entries, -math.inf, room[b])

    def _stage_room(self, b: int) -> float:
        """The budget less the constants held for sure throughout block b, in budgets."""
        stages = range(self.starts[b], self.end(b) + 1)
        least = min(self.graph.stage_constant_at(t) for t in stages)
        return (self.budget - least) / self.budget

    # ---- solving ------------------------------------------------------------------------

    def solve(self, linprog, time_limit: float) -> tuple[str, float, str]:
        """(status, the least cost of a schedule, HiGHS's message)."""
        from scipy import sparse

        matrix = self.constraints.matrix(self.n_var)
        lb, ub = np.array(self.constraints.lb), np.array(self.constraints.ub)
        finite_ub, finite_lb = np.isfinite(ub), np.isfinite(lb)
        a_ub = sparse.vstack([matrix[finite_ub], -matrix[finite_lb]]).tocsr()
        b_ub = np.concatenate([ub[finite_ub], -lb[finite_lb]])
        scale = max(max(self.cost, default=0.0), 1e-300)
        with _quiet_c_stdout():
            res = linprog(
                np.array(self.cost) / scale,
                A_ub=a_ub,
                b_ub=b_ub,
                bounds=np.column_stack([np.zeros(self.n_var), self.upper]),
                method="highs",
                options={"time_limit": time_limit, "presolve": True},
            )
        if res.status == 0:
            return "ok", self.graph.compute + float(res.fun) * scale, res.message
        if res.status == 2:
            return "infeasible", math.nan, res.message
        if res.status == 1:
            return "time_limit", math.nan, res.message
        return "failed", math.nan, res.message
