"""The paper's two theorems as reproducible experiments on generated traces.

Theorem 3.1 (``sqrt_n_rows``): an N-layer chain of unit-cost, unit-size ops,
forward then backward, replayed with a budget of ``ceil(2*sqrt(N))`` units:
h_DTR needs O(N) extra ops, h_DTR^local, h_LRU and h_size more (about N^1.5 here;
docs/simulator.md has the figures).
The trace is the prototype's (``chain_trace``): forward tensors f_0..f_{N-1}
(f_0 has no inputs), then gradient b_{N-1}, and b_i = g(f_{i-1}, b_{i+1}),
each forward tensor released just before the gradient op that consumes it.
Chen's sqrt(N) and the optimal binomial (revolve) schedule are listed beside
it, counted exactly by ``chain.run_schedule``.

Theorem 3.2 (``adversarial_trace``): one constant root, ``paths`` chains
hanging off it, a budget of ``budget`` units (the root included). The
adversary watches the replay and always extends a path all of whose tensors
are evicted (with ``paths >= budget`` one always exists), so every op first
recomputes its whole path from the root. A static plan that sees the graph
computes the paths one after the other: every op once, three units of
memory (``path_major_trace`` replays exactly that). DTR's ratio to it grows
like N / B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .chain import chen_schedule, revolve_forward_steps, run_schedule
from .simulator import Replayer, simulate
from .trace import Annotate, Call, Constant, Instruction, Release, Result, Trace, make_trace

UNIT = 1  # bytes of every tensor in these traces


def chain_trace(n: int) -> Trace:
    """The N-layer linear chain, one forward and one backward pass (see the docstring)."""
    if n < 1:
        raise ValueError(f"a chain needs at least one layer, got {n}")
    ins: list[Instruction] = [Annotate("START")]
    for i in range(n):
        args = () if i == 0 else (f"f{i - 1}",)
        ins.append(Call("layer", args, (Result(f"f{i}", UNIT),), 1.0))
    ins.append(Annotate("BACKWARD"))
    ins.append(Release(f"f{n - 1}"))
    ins.append(Call("loss_grad", (), (Result(f"b{n - 1}", UNIT),), 1.0))
    for i in range(n - 2, -1, -1):
        ins.append(Release(f"f{i}"))
        args = (f"f{i - 1}", f"b{i + 1}") if i > 0 else (f"b{i + 1}",)
        ins.append(Call("layer_grad", args, (Result(f"b{i}", UNIT),), 1.0))
        ins.append(Release(f"b{i + 1}"))
    return make_trace(ins, f"chain-{n}")


def sqrt_budget(n: int) -> int:
    return math.ceil(2 * math.sqrt(n))


REFERENCE_DTR = {100: 0.80, 400: 0.90, 1600: 1.01}  # the paper: h_DTR's extra ops / N (docs/dtr.md)


def sqrt_n_rows(ns: list[int], heuristics: list[str], cap: float = 200.0) -> list[dict]:
    """One row per N: the budget and, per heuristic, extra ops / N (``"oom"``, or
    ``">cap"`` once a replay passes ``cap`` x N extra ops: the superlinear ones would
    take minutes), then Chen's sqrt(N) and revolve, as extra forward ops / N."""
    rows = []
    for n in ns:
        trace = chain_trace(n)
        budget = sqrt_budget(n) * UNIT
        row: dict = {"N": n, "budget": budget}
        for h in heuristics:
            # the trace computes 2N ops, so cap x N extra ops is a slowdown of 1 + cap / 2
            result = simulate(trace, budget=budget, heuristic=h, thrash=1 + cap / 2)
            if result.status == "ok":
                row[h] = result.remat_cost / n
            else:
                row[h] = f">{cap:g}" if result.status == "thrash" else result.status
        chen = run_schedule(n, chen_schedule(n))
        row["chen"] = (chen.forward_steps - (n - 1)) / n
        row["chen_slots"] = chen.max_slots
        slots = max(1, budget - 3)  # the working pair of states and the live gradient
        row["revolve"] = (revolve_forward_steps(n, slots) - (n - 1)) / n
        row["revolve_slots"] = slots
        row["reference_dtr"] = REFERENCE_DTR.get(n)
        rows.append(row)
    return rows


# ---- Theorem 3.2 ---------------------------------------------------------------------------


@dataclass
class AdversaryRun:
    trace: Trace
    heuristic: str
    budget: int
    paths: int
    ops: int
    total_ops: float  # ops including recomputation (unit costs)
    status: str
    lengths: list[int]

    @property
    def ratio(self) -> float:
        """DTR's total ops over the static optimum's (every op once)."""
        return self.total_ops / self.ops


def adversarial_trace(
    n_ops: int, budget: int, paths: int | None = None, heuristic: str = "dtr"
) -> AdversaryRun:
    """Build Theorem 3.2's trace against ``heuristic`` by replaying it while it grows."""
    paths = budget if paths is None else paths
    if budget < 3:
        raise ValueError(f"the budget must hold the root, an input and an output (3), got {budget}")
    replayer = Replayer(budget * UNIT, heuristic, "eager")
    ins: list[Instruction] = [Annotate("START"), Constant("root", UNIT)]
    for i in ins:
        replayer.step(i)
    tips: list[str | None] = [None] * paths
    cells: list[list] = [[] for _ in range(paths)]
    last_used = [0] * paths
    status = "ok"
    try:
        for op in range(n_ops):
            k = op if op < paths else _pick(cells, last_used)
            name = f"p{k}_{len(cells[k])}"
            step = [Call("extend", (tips[k] or "root",), (Result(name, UNIT),), 1.0)]
            if tips[k] is not None:
                step.append(Release(tips[k]))
            for i in step:
                replayer.step(i)
                ins.append(i)
            tips[k] = name
            cells[k].append(replayer.cells[name])
            last_used[k] = op
    except MemoryError:
        status = "oom"
    finally:
        replayer.close()
    stats = replayer.stats
    ops = sum(len(c) for c in cells)
    trace = make_trace(ins, f"adversary-{heuristic}-B{budget}-N{ops}")
    return AdversaryRun(
        trace,
        heuristic,
        budget,
        paths,
        ops,
        ops + stats.remat_cost,
        status,
        [len(c) for c in cells],
    )


def _pick(cells: list[list], last_used: list[int]) -> int:
    """The longest fully evicted path; failing that, the least recently extended one."""
    evicted = [
        k for k, path in enumerate(cells) if all(c.storage.buffer is None for c in reversed(path))
    ]
    if evicted:
        return max(evicted, key=lambda k: (len(cells[k]), -k))
    return min(range(len(cells)), key=lambda k: last_used[k])


def path_major_trace(lengths: list[int]) -> Trace:
    """The same graph with each path computed to its end before the next starts."""
    ins: list[Instruction] = [Annotate("START"), Constant("root", UNIT)]
    for k, length in enumerate(lengths):
        prev = "root"
        for j in range(length):
            name = f"p{k}_{j}"
            ins.append(Call("extend", (prev,), (Result(name, UNIT),), 1.0))
            if prev != "root":
                ins.append(Release(prev))
            prev = name
    return make_trace(ins, "path-major")


def adversary_rows(ns: list[int], budget: int, paths: int | None, heuristics: list[str]) -> list:
    """Per heuristic and N: DTR's ops against the static optimum's, next to N / B."""
    rows = []
    for h in heuristics:
        for n in ns:
            run = adversarial_trace(n, budget, paths, h)
            static = simulate(path_major_trace(run.lengths), budget=budget * UNIT, outputs=False)
            rows.append(
                {
                    "heuristic": h,
                    "N": run.ops,
                    "B": budget,
                    "paths": run.paths,
                    "status": run.status,
                    "dtr_ops": run.total_ops,
                    "static_ops": static.compute + static.remat_cost,
                    "static_status": static.status,
                    "ratio": run.ratio if run.status == "ok" else math.nan,
                    "N/B": run.ops / budget,
                }
            )
    return rows
