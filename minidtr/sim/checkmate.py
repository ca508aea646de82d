"""The optimal rematerialization schedule for a fixed op order, as a mixed-integer program.

In the spirit of Checkmate (Jain et al., MLSys 2020); our own formulation and
code. The graph's nodes ``0..n-1`` are in trace order. Stage ``t`` computes
node ``t`` for the first time and may recompute earlier nodes; within a stage
nodes run in index order. Variables:

- ``R[t,i]`` (binary, i <= t): node i is computed in stage t; ``R[t,t] = 1``;
- ``S[t,i]`` (binary, i < t): node i is resident when stage t starts;
- ``U[t,k]`` (continuous): bytes in use once node k has run in stage t;
- ``F[t,i,k]`` (binary, i a dependency of k or k itself): node i is freed right
  after node k runs in stage t.

Constraints: a node runs only when its dependencies are resident
(``R[t,k] <= R[t,i] + S[t,i]``); only what is resident can be kept
(``S[t+1,i] <= S[t,i] + R[t,i]``); memory is accounted node by node,
``U[t,0] = sum_i m_i S[t,i] + m_0 R[t,0]`` and
``U[t,k] = U[t,k-1] + m_k R[t,k] - sum_i m_i F[t,i,k-1]``, with
``U <= budget - constants`` and, while node k's kernel runs, ``U[t,k]`` plus
its workspace too; a node may be freed after k only if k ran, it is
not kept for the next stage, and no later node of the stage uses it
(``F <= R[t,k]``, ``F <= 1 - S[t+1,i]``, ``F <= 1 - R[t,j]``); outputs are
resident at the end. The objective is the total cost ``sum c_i R[t,i]``.

``F`` is only bounded from above, so a solution may free later than it could:
that overstates memory and keeps every solution feasible (``F`` could even be
continuous; binary ``F`` helps HiGHS find schedules). ``check_schedule``
replays a schedule independently (freeing eagerly) and recomputes its cost and
peak. Two more things help: a node none of whose descendants comes later is
never recomputed or kept (no optimal schedule needs that), and a greedy
schedule in the same model (``greedy_schedule``) caps the objective and stands
when the solver finds nothing better.

Solved with SciPy's HiGHS (``scipy.optimize.milp``) under a time limit; the
result carries the best schedule, the proven lower bound (the solver's, or the
linear relaxation's when HiGHS stops without a schedule) and the gap.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from .graph import Graph


@dataclass
class OptimalResult:
    # "optimal"; "incumbent": the solver stopped at its time limit, and ``cost`` is the best
    # schedule found, an upper bound on the optimum (gap > 0); "no_solution"; "infeasible"
    status: str
    budget: int
    cost: float  # total cost of the best schedule found (nan if none)
    bound: float  # proven lower bound on the optimal cost
    gap: float  # (cost - bound) / cost
    solve_time: float
    variables: int
    constraints: int
    peak: int | None = None  # checked peak of the schedule, constants included
    schedule: tuple[np.ndarray, np.ndarray] | None = None  # R, S as 0/1 matrices (n x n)
    source: str = ""  # "solver" or "greedy": which found the best schedule

    @property
    def found(self) -> bool:
        return self.status in ("optimal", "incumbent")


class ConstraintRows:
    """Rows of a sparse constraint matrix, gathered as triplets, with their bounds
    (``lb <= row . x <= ub``); the MILP here and the LP of ``bound.py`` build theirs so."""

    def __init__(self):
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lb: list[float] = []
        self.ub: list[float] = []

    def row(self, entries: list[tuple[int, float]], lb: float, ub: float) -> None:
        r = len(self.lb)
        for col, val in entries:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(val)
        self.lb.append(lb)
        self.ub.append(ub)

    def matrix(self, n_var: int):
        """The rows as a SciPy CSR matrix of ``n_var`` columns."""
        from scipy import sparse

        return sparse.csr_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.lb), n_var))


def solve_optimal(
    graph: Graph, budget: int, time_limit: float = 60.0, mip_rel_gap: float = 1e-4
) -> OptimalResult:
    """The cheapest schedule of ``graph`` within ``budget`` bytes (constants included).

    ``time_limit`` bounds the whole call in seconds: building the program, the greedy
    bound, the solver and, when the solver stops without a bound, the linear relaxation
    share it (HiGHS checks its clock between steps, so it may overrun by a little).
    """
    started = time.perf_counter()
    deadline = started + time_limit
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError as e:  # pragma: no cover - scipy is an optional extra
        raise ImportError("the optimal schedule needs SciPy (pip install 'minidtr[scipy]')") from e
    n = len(graph)
    if n == 0:
        return _nothing_to_run(graph, budget, started)
    avail = [budget - graph.constant_at(t) for t in range(n)]
    workspace = _workspaces(graph)
    if any(graph.size[t] + workspace[t] > avail[t] for t in range(n)):
        return _infeasible(budget, 0, 0)
    m = [float(x) for x in graph.size]
    users = graph.users()
    outputs = graph.outputs

    def r(t: int, i: int) -> int:
        return t * (t + 1) // 2 + i

    n_r = n * (n + 1) // 2

    def s(t: int, i: int) -> int:
        return n_r + t * (t - 1) // 2 + i

    n_s = n * (n - 1) // 2

    def u(t: int, k: int) -> int:
        return n_r + n_s + t * (t + 1) // 2 + k

    n_u = n_r
    frees: dict[tuple[int, int, int], int] = {}
    base = n_r + n_s + n_u
    for t in range(n):
        for k in range(t + 1):
            for i in (*graph.deps[k], k):
                frees[(t, i, k)] = base + len(frees)
    n_var = base + len(frees)

    lower = np.zeros(n_var)
    upper = np.ones(n_var)
    for t in range(n):
        upper[u(t, 0) : u(t, t) + 1] = avail[t]
    for t in range(n):
        lower[r(t, t)] = 1.0
    # a node no later node depends on (even indirectly) is useless after its stage: never
    # recompute or keep it (unless it is an output), which no optimal schedule needs
    horizon = _horizon(graph)
    for i in range(n):
        if i not in outputs:
            for t in range(horizon[i] + 1, n):
                upper[r(t, i)] = 0.0
                upper[s(t, i)] = 0.0
    for (t, i, _k), col in frees.items():
        if t == n - 1 and i in outputs:
            upper[col] = 0.0

    a = ConstraintRows()
    for t in range(n):
        for k in range(t + 1):
            for i in graph.deps[k]:
                a.row([(r(t, k), 1.0), (r(t, i), -1.0), (s(t, i), -1.0)], -math.inf, 0.0)
    for t in range(n - 1):
        for i in range(t):
            a.row([(s(t + 1, i), 1.0), (s(t, i), -1.0), (r(t, i), -1.0)], -math.inf, 0.0)
    for t in range(n):
        a.row([(u(t, 0), 1.0), (r(t, 0), -m[0])] + [(s(t, i), -m[i]) for i in range(t)], 0, 0)
        for k in range(1, t + 1):
            entries = [(u(t, k), 1.0), (u(t, k - 1), -1.0), (r(t, k), -m[k])]
            entries += [(frees[(t, i, k - 1)], m[i]) for i in (*graph.deps[k - 1], k - 1)]
            a.row(entries, 0.0, 0.0)
        for k in range(t + 1):  # a kernel's workspace, reserved with its outputs
            if workspace[k]:
                a.row([(u(t, k), 1.0), (r(t, k), float(workspace[k]))], -math.inf, avail[t])
    for (t, i, k), col in frees.items():
        a.row([(col, 1.0), (r(t, k), -1.0)], -math.inf, 0.0)
        if t + 1 < n:
            a.row([(col, 1.0), (s(t + 1, i), 1.0)], -math.inf, 1.0)
        for j in users[i]:
            if k < j <= t:
                a.row([(col, 1.0), (r(t, j), 1.0)], -math.inf, 1.0)
    for i in outputs:
        if i < n - 1:
            a.row([(s(n - 1, i), 1.0), (r(n - 1, i), 1.0)], 1.0, math.inf)

    objective = np.zeros(n_var)
    for t in range(n):
        for i in range(t + 1):
            objective[r(t, i)] = graph.cost[i]
    greedy = greedy_schedule(graph, budget)
    greedy_cost, greedy_peak = check_schedule(graph, *greedy) if greedy else (math.inf, 0)
    if math.isfinite(greedy_cost):  # a cutoff: only schedules at least as good matter
        a.row([(col, objective[col]) for col in np.flatnonzero(objective)], -math.inf, greedy_cost)
    matrix = a.matrix(n_var)
    integrality = np.ones(n_var)
    integrality[n_r + n_s : base] = 0
    with _quiet_c_stdout():
        res = milp(
            objective,
            integrality=integrality,
            bounds=Bounds(lower, upper),
            constraints=LinearConstraint(matrix, a.lb, a.ub),
            options={"time_limit": _left(deadline), "mip_rel_gap": mip_rel_gap, "disp": False},
        )
    elapsed = time.perf_counter() - started
    found = []  # (cost, peak, schedule, source)
    if greedy is not None:
        found.append((greedy_cost, greedy_peak, greedy, "greedy"))
    if res.x is not None:
        R = np.zeros((n, n), dtype=np.int8)
        S = np.zeros((n, n), dtype=np.int8)
        for t in range(n):
            for i in range(t + 1):
                R[t, i] = round(res.x[r(t, i)])
            for i in range(t):
                S[t, i] = round(res.x[s(t, i)])
        cost, peak = check_schedule(graph, R, S)
        found.append((cost, peak, (R, S), "solver"))
    dual = getattr(res, "mip_dual_bound", None)
    dual = float(dual) if dual is not None and math.isfinite(dual) else -math.inf
    if dual == -math.inf and res.status != 2 and _left(deadline) > _MIN_SOLVE:
        # SciPy reports no bound when HiGHS stops without a schedule of its own: fall back
        # to the linear relaxation, a weaker but proven bound
        with _quiet_c_stdout():
            lp = milp(
                objective,
                bounds=Bounds(lower, upper),
                constraints=LinearConstraint(matrix, a.lb, a.ub),
                options={"time_limit": _left(deadline), "disp": False},
            )
        if lp.status == 0:
            dual = float(lp.fun)
        elapsed = time.perf_counter() - started
    if not found:
        if res.status == 2:
            return _infeasible(budget, n_var, len(a.lb), elapsed)
        return OptimalResult(
            "no_solution", budget, math.nan, dual, math.inf, elapsed, n_var, len(a.lb)
        )
    cost, peak, schedule, source = min(found, key=lambda f: f[0])
    if peak > budget:
        raise AssertionError(f"the {source} schedule peaks at {peak} bytes over {budget}")
    # optimal (status 0), or no schedule below the greedy one's cutoff exists (status 2)
    bound = cost if res.status in (0, 2) else min(dual, cost)
    gap = (cost - bound) / cost if cost > 0 else 0.0
    status = "optimal" if gap <= mip_rel_gap else "incumbent"
    return OptimalResult(
        status, budget, cost, bound, gap, elapsed, n_var, len(a.lb), peak, schedule, source
    )


@contextlib.contextmanager
def _quiet_c_stdout():
    """Send the process's standard output (file descriptor 1) to the null device while
    HiGHS runs: some of its versions print debugging lines there from C++
    (``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``), which
    ``disp=False`` does not silence and which would land in the middle of a table."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no descriptor 1 to redirect: nothing to silence
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        yield
    finally:
        _flush_c_stdio()  # what HiGHS buffered goes to the null device, not after it
        os.dup2(saved, 1)
        os.close(saved)


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (not POSIX)
        pass


_MIN_SOLVE = 0.5  # seconds: the least a solver call is given, however late it starts


def _workspaces(graph: Graph) -> list[int]:
    """Each node's kernel workspace (none for a graph built without them)."""
    return list(graph.workspace) if graph.workspace else [0] * len(graph)


def _left(deadline: float) -> float:
    return max(deadline - time.perf_counter(), _MIN_SOLVE)


def _infeasible(budget: int, n_var: int, n_con: int, elapsed: float = 0.0) -> OptimalResult:
    return OptimalResult("infeasible", budget, math.nan, math.inf, math.nan, elapsed, n_var, n_con)


def _nothing_to_run(graph: Graph, budget: int, started: float) -> OptimalResult:
    """A graph without nodes (only constants, or views of them): the empty schedule is
    optimal when the constants held at the end fit the budget, and nothing fits if not."""
    held = graph.stage_constant_at(0)
    if held > budget:
        return _infeasible(budget, 0, 0)
    empty = np.zeros((0, 0), dtype=np.int8)
    elapsed = time.perf_counter() - started
    return OptimalResult(
        "optimal", budget, 0.0, 0.0, 0.0, elapsed, 0, 0, held, (empty, empty), "greedy"
    )


def greedy_schedule(graph: Graph, budget: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A feasible schedule in the same stage model, or None: an upper bound for the solver.

    Stage t computes node t and, in index order, every ancestor missing from the nodes
    kept from the stage before. Everything that may still be needed later is kept, unless
    memory runs short: then, at the stage's peak, the resident node whose next direct use
    is furthest away (Belady's rule) is no longer kept past its last use in the stage."""
    n = len(graph)
    users = graph.users()
    horizon = _horizon(graph)
    R = np.zeros((n, n), dtype=np.int8)
    S = np.zeros((n, n), dtype=np.int8)
    kept: set[int] = set()
    for t in range(n):
        order = _missing(graph, t, kept)
        last_use: dict[int, int] = {}
        for pos, k in enumerate(order):
            for i in graph.deps[k]:
                last_use[i] = pos
        dropped: set[int] = set()
        while True:
            peak, at, resident = _stage_peak(graph, t, order, kept, dropped, last_use, horizon)
            if peak <= budget - graph.constant_at(t):
                break
            victims = [
                i
                for i in resident
                if i not in dropped
                and i not in graph.outputs
                and last_use.get(i, -1) < at
                and order[at] != i
            ]
            if not victims:
                return None
            dropped.add(max(victims, key=lambda i: (_next_use(users[i], t), graph.size[i])))
        for k in order:
            R[t, k] = 1
        for i in dropped & kept:
            if i not in last_use:
                S[t, i] = 0  # freed at the end of the stage before instead
        kept = _kept_after(graph, t, order, kept, dropped, horizon)
        if t + 1 < n:
            for i in kept:
                S[t + 1, i] = 1
    return R, S


def _missing(graph: Graph, t: int, kept: set[int]) -> list[int]:
    """Node t and every ancestor it needs that is not kept, in index order."""
    need = {t}
    stack = [t]
    while stack:
        k = stack.pop()
        for i in graph.deps[k]:
            if i not in kept and i not in need:
                need.add(i)
                stack.append(i)
    return sorted(need)


def _wanted(graph: Graph, i: int, t: int, horizon: list[int]) -> bool:
    return i in graph.outputs or horizon[i] > t


def _stage_peak(graph, t, order, kept, dropped, last_use, horizon):
    """Peak bytes of a stage (constants excluded), the position where it is reached and
    the nodes resident then."""
    resident = {
        i for i in kept if i in last_use or (_wanted(graph, i, t, horizon) and i not in dropped)
    }
    memory = sum(graph.size[i] for i in resident)
    workspace = _workspaces(graph)
    peak, at, at_peak = -1, 0, set()
    for pos, k in enumerate(order):
        if k not in resident:
            resident.add(k)
            memory += graph.size[k]
        if memory + workspace[k] > peak:
            peak, at, at_peak = memory + workspace[k], pos, set(resident)
        for i in (*graph.deps[k], k):
            if (
                i in resident
                and last_use.get(i, -1) <= pos
                and (i in dropped or not _wanted(graph, i, t, horizon))
            ):
                resident.discard(i)
                memory -= graph.size[i]
    return peak, at, at_peak


def _kept_after(graph, t, order, kept, dropped, horizon) -> set[int]:
    alive = (set(kept) | set(order)) - dropped
    return {i for i in alive if _wanted(graph, i, t, horizon)}


def _next_use(users: list[int], t: int) -> int:
    later = [j for j in users if j > t]
    return min(later) if later else 1 << 30


def _horizon(graph: Graph) -> list[int]:
    """For each node, the highest index among itself and its descendants."""
    horizon = list(range(len(graph)))
    for k in range(len(graph) - 1, -1, -1):
        for i in graph.deps[k]:
            horizon[i] = max(horizon[i], horizon[k])
    return horizon


def check_schedule(graph: Graph, R: np.ndarray, S: np.ndarray) -> tuple[float, int]:
    """Run a schedule, freeing every node as soon as the stage no longer needs it and it
    is not kept; check dependencies and what is kept. Returns (cost, peak bytes with
    constants and each kernel's workspace)."""
    n = len(graph)
    cost = 0.0
    peak = graph.constant_at(0) if n else 0
    workspace = _workspaces(graph)
    for t in range(n):
        resident = {i for i in range(t) if S[t, i]}
        keep = {i for i in range(t + 1) if t + 1 < n and S[t + 1, i]}
        if t == n - 1:
            keep = set(graph.outputs)
        order = [k for k in range(t + 1) if R[t, k]]
        if t not in order:
            raise AssertionError(f"stage {t} does not compute node {t}")
        last_use: dict[int, int] = {}
        for k in order:
            for i in graph.deps[k]:
                last_use[i] = k
        resident = {i for i in resident if i in keep or i in last_use}
        memory = sum(graph.size[i] for i in resident)
        for k in order:
            missing = [i for i in graph.deps[k] if i not in resident]
            if missing:
                raise AssertionError(f"stage {t}: node {k} runs before {missing} are resident")
            if k not in resident:
                resident.add(k)
                memory += graph.size[k]
            cost += graph.cost[k]
            peak = max(peak, memory + workspace[k] + graph.constant_at(t))
            for i in (*graph.deps[k], k):
                if i in resident and i not in keep and last_use.get(i, -1) <= k:
                    resident.discard(i)
                    memory -= graph.size[i]
        lost = keep - resident
        if lost:
            raise AssertionError(f"stage {t} keeps {sorted(lost)}, which are not resident")
    return cost, peak
