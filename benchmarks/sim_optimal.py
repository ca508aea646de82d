"""DTR against the optimal schedule (the MILP of minidtr.sim.checkmate) on three small models.

Each model's forward and backward pass is recorded from a live minidtr run with
``cost="flops"``; then, at each budget ratio, the trace is replayed under the
heuristics and the optimal schedule for the same op order is solved with SciPy's
HiGHS under a time limit. Slowdowns are (compute + recomputation) / compute; the
optimum is bracketed by the best schedule found and the solver's proven lower bound.
Beside them, the linear relaxation's bound (``minidtr.sim.bound``, ``LP bound``): at
most every schedule's slowdown, each heuristic's as well as the optimum's.

    python benchmarks/sim_optimal.py [--time-limit 60] [--fractions 0.8,0.6,0.4,0.2,0.0]
    python benchmarks/sim_optimal.py --keep optimal-traces   # keep the three traces
    python benchmarks/sim_optimal.py --markdown              # docs/simulator.md's table

Budgets are placed between the single-op bottleneck (below which nothing runs)
and the unbounded peak: ratio = floor + fraction * (1 - floor). With ``--keep DIR`` the
traces are written to ``DIR/mlp.log``, ``DIR/convnet.log`` and ``DIR/recurrence.log``
and kept, for ``minidtr sim optimal DIR/mlp.log``. The best schedule is the optimum only
where the solver proved it (status ``optimal``); where it stopped at its time limit
(``incumbent``) it is an upper bound on the optimum, which can be worse than a
heuristic's schedule. Which budgets the solver closes in time depends on the machine.
In the plain tables a ``-`` is a heuristic out of memory (no thrash guard here) or a
figure the solver did not reach; ``--markdown`` writes ``OOM`` and ``none`` instead.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

import minidtr as md
from minidtr import sim
from minidtr.cli_args import floats, names_from, output_folder, positive_seconds
from minidtr.sim.cli import heuristic_names
from minidtr.sim.graph import graph_from_trace
from minidtr.sim.simulator import baseline
from minidtr.sim.solver_cli import require_scipy
from minidtr.sim.sweep import compare_with_optimal, format_rows


def mlp():
    rng = np.random.default_rng(0)
    sizes = [32, 64, 64, 64, 10]
    ws = [
        md.tensor(rng.standard_normal((a, b)) * 0.2, requires_grad=True)
        for a, b in zip(sizes, sizes[1:], strict=False)
    ]
    x = md.tensor(rng.standard_normal((128, 32)))
    y = md.tensor(rng.integers(0, 10, 128))
    h = x
    for w in ws[:-1]:
        h = md.relu(h @ w)
    loss = md.cross_entropy(h @ ws[-1], y)
    loss.backward()
    return [w.grad for w in ws]


def convnet():
    rng = np.random.default_rng(1)
    w1 = md.tensor(rng.standard_normal((8, 3, 3, 3)) * 0.3, requires_grad=True)
    w2 = md.tensor(rng.standard_normal((8, 8, 3, 3)) * 0.2, requires_grad=True)
    w3 = md.tensor(rng.standard_normal((8, 8, 3, 3)) * 0.2, requires_grad=True)
    fc = md.tensor(rng.standard_normal((8, 10)) * 0.3, requires_grad=True)
    x = md.tensor(rng.standard_normal((16, 3, 16, 16)))
    y = md.tensor(rng.integers(0, 10, 16))
    h = md.relu(md.conv2d(x, w1, padding=1))
    h = md.max_pool2d(md.relu(md.conv2d(h, w2, padding=1)), 2)
    h = md.relu(md.conv2d(h, w3, padding=1))
    h = md.global_avg_pool2d(h).reshape(16, 8)
    loss = md.cross_entropy(h @ fc, y)
    loss.backward()
    return [w.grad for w in (w1, w2, w3, fc)]


def recurrence(steps: int = 10):
    rng = np.random.default_rng(2)
    wx = md.tensor(rng.standard_normal((16, 32)) * 0.3, requires_grad=True)
    wh = md.tensor(rng.standard_normal((32, 32)) * 0.2, requires_grad=True)
    xs = [md.tensor(rng.standard_normal((64, 16))) for _ in range(steps)]
    h = md.zeros((64, 32), dtype=md.float64)
    for x in xs:
        h = md.tanh(x @ wx + h @ wh)
    loss = (h * h).mean()
    loss.backward()
    return [wx.grad, wh.grad]


MODELS = {"mlp": mlp, "convnet": convnet, "recurrence": recurrence}


def record(name: str, directory: str) -> sim.Trace:
    path = os.path.join(directory, f"{name}.log")
    with md.Runtime(cost="flops"), sim.record(path):
        grads = MODELS[name]()
        del grads
    return sim.load_log(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--time-limit", type=positive_seconds, default=60.0)
    p.add_argument(
        "--fractions",
        type=floats,
        default=[0.8, 0.6, 0.4, 0.2, 0.0],
        help="budgets as fractions of the way from one op's needs to the peak (in [0, 1])",
    )
    p.add_argument(
        "--heuristics", type=heuristic_names, default=["dtr", "msps", "lru", "learned", "belady"]
    )
    p.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    p.add_argument(
        "--keep", metavar="DIR", type=output_folder, help="write the traces to DIR and keep them"
    )
    p.add_argument(
        "--markdown", action="store_true", help="one Markdown table of every model, as the docs"
    )
    args = p.parse_args()
    fractions, heuristics = args.fractions, args.heuristics
    outside = [f for f in fractions if not 0 <= f <= 1]
    if outside:
        p.error(f"--fractions must be in [0, 1], got {outside[0]:g}")
    require_scipy(p.prog, "the optimal schedule")
    tables = []
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or scratch
        os.makedirs(directory, exist_ok=True)
        for name in args.models:
            trace = record(name, directory)
            graph = graph_from_trace(trace)
            base = baseline(trace)
            floor = base.bottleneck / base.peak_memory
            ratios = [round(floor + f * (1 - floor), 4) for f in fractions]
            started = time.perf_counter()
            rows = compare_with_optimal(trace, ratios, heuristics, args.time_limit, bound=True)
            if args.markdown:
                tables.append((name, len(graph), rows))
                continue
            print(
                f"\n{name}: {trace.ops} ops, {len(graph)} graph nodes, peak {base.peak_memory:,} B,"
                f" constants {base.constant_floor:,} B, one op's needs {base.bottleneck:,} B"
            )
            columns = ["ratio", *heuristics, "bound", "best", "lower", "gap", "status"]
            columns.append("found_by")
            print(format_rows(rows, [*columns, "solve_time", "dtr/best"]))
            print(f"({time.perf_counter() - started:.1f} s)")
    if args.markdown:
        print(markdown(tables, heuristics))
    elif args.keep:
        print(f"\ntraces kept in {args.keep}/: " + ", ".join(f"{m}.log" for m in args.models))


LABELS = {
    "mlp": "MLP, 4 layers",
    "convnet": "conv net, 3 conv",
    "recurrence": "recurrence, 10 steps",
}


def markdown(tables: list[tuple[str, int, list[dict]]], heuristics: list[str]) -> str:
    """The docs' table: each heuristic's slowdown (``OOM``: the budget could not be met),
    the linear relaxation's bound on every schedule (``infeasible``: no schedule fits),
    the best schedule found (``*``: the solver stopped at its time limit, so an upper bound
    on the optimum, not the optimum; ``infeasible``: proven that no schedule fits; ``none``:
    none found in time), the solver's proven lower bound on the optimum (``-``: none in
    time) and the solver's seconds."""
    head = [
        "model (graph nodes)",
        "ratio",
        *heuristics,
        "LP bound",
        "best found",
        "lower bound",
        "solver s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, nodes, rows in tables:
        for i, row in enumerate(rows):
            cells = [f"{LABELS.get(name, name)} ({nodes})" if i == 0 else "", f"{row['ratio']:.3f}"]
            cells += [f"{row[h]:.3f}" if math.isfinite(row[h]) else "OOM" for h in heuristics]
            ok = row["bound_status"] == "ok"
            cells.append(f"{row['bound']:.3f}" if ok else row["bound_status"].replace("_", " "))
            status = row["status"]
            if status in ("optimal", "incumbent"):
                best = f"{row['best']:.3f}" + ("" if status == "optimal" else "*")
            else:
                best = "infeasible" if status == "infeasible" else "none"
            lower = row["lower"]
            bound = f"{lower:.3f}" if math.isfinite(lower) and status != "infeasible" else "-"
            cells += [best, bound, f"{row['solve_time']:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
