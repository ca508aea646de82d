"""h_DTR against a learned next-use heuristic, a clairvoyant one, and the optimum.

For each trace and budget ratio: the slowdown of h_DTR (``dtr``), of ``learned``
(predicts each storage's next use from the last storage with the same recipe
signature: from the previous training step), of ``belady`` (knows every next use
from the trace) and, where the graph is small enough for the MILP to close, of the
optimal schedule for the same op order (``minidtr.sim.checkmate``; the best
schedule found, with ``*`` when the solver did not prove it optimal). A cell is the
slowdown, ``thrash`` (past 2x), ``OOM``, or ``floor`` when the budget is below the
trace's physical floor (``sim.floor``), where nothing can run.

    python benchmarks/sim_clairvoyant.py                       # record the 7 models, 3 steps
    python benchmarks/sim_clairvoyant.py LOG_OR_DIR ...        # logs you have
    python benchmarks/sim_clairvoyant.py --models lstm,resnet --steps 3 --keep DIR

With no logs the bundled models are recorded first (``minidtr train MODEL --steps 3
--trace``, unbounded, flops cost), which takes a few minutes on two busy cores.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.cli_args import (
    input_path,
    names_from,
    output_folder,
    positive_seconds,
    ratios,
    whole_number,
)
from minidtr.models import MODELS, SIZES
from minidtr.sim.cli import heuristic_names
from minidtr.sim.simulator import baseline
from minidtr.sim.solver_cli import require_scipy
from minidtr.sim.sweep import format_rows, sweep

HEURISTICS = ("dtr", "learned", "belady")
SAME = 0.005  # slowdowns this close (relative) count as the same


def record_models(models: list[str], steps: int, size: str, directory: str) -> list[str]:
    from minidtr.testing import isolated_allocator
    from minidtr.training import TrainConfig, train

    paths = []
    for model in models:
        path = os.path.join(directory, f"{model}-{size}-{steps}steps.log")
        started = time.perf_counter()
        with isolated_allocator():
            train(TrainConfig(model, size=size, steps=steps), trace=sim.record(path))
        print(f"recorded {path} ({time.perf_counter() - started:.1f} s)", flush=True)
        paths.append(path)
    return paths


def log_paths(items: list[str]) -> list[str]:
    paths = []
    for item in items:
        if os.path.isdir(item):
            paths += sorted(os.path.join(item, f) for f in os.listdir(item) if f.endswith(".log"))
        else:
            paths.append(item)
    return paths


def cell(result) -> str:
    if result is None:
        return "floor"
    if result.status == "ok":
        return f"{result.slowdown:.3f}"
    return "OOM" if result.status == "oom" else "thrash"


def optimum_cells(trace, ratios, max_nodes: int, time_limit: float) -> dict[float, str]:
    from minidtr.sim.checkmate import solve_optimal
    from minidtr.sim.graph import graph_from_trace

    graph = graph_from_trace(trace)
    if len(graph) > max_nodes:
        return {r: f"({len(graph)} nodes)" for r in ratios}
    floor_ratio = sim.floor(trace).ratio
    ratios = [r for r in ratios if r >= floor_ratio]
    peak = baseline(trace).peak_memory
    out = {}
    for ratio in ratios:
        opt = solve_optimal(graph, int(ratio * peak), time_limit=time_limit)
        if not opt.found:
            out[ratio] = "none" if opt.status != "infeasible" else "OOM"
            continue
        slowdown = 1 + (opt.cost - graph.compute) / trace.total_compute
        out[ratio] = f"{slowdown:.3f}" + ("" if opt.status == "optimal" else "*")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="*", type=input_path, help="log files or directories of *.log")
    p.add_argument(
        "--models",
        type=names_from(MODELS, "models"),
        default=list(MODELS),
        help="models to record (no logs)",
    )
    p.add_argument("--steps", type=whole_number(1), default=3, help="training steps to record")
    p.add_argument("--size", default="small", choices=SIZES, help="model size to record")
    p.add_argument(
        "--keep", metavar="DIR", type=output_folder, help="record into DIR and keep the logs"
    )
    p.add_argument("--ratios", type=ratios, default=[0.5, 0.4, 0.3, 0.2])
    p.add_argument("--heuristics", type=heuristic_names, default=list(HEURISTICS))
    p.add_argument(
        "--max-nodes", type=whole_number(0), default=120, help="MILP only up to this graph"
    )
    p.add_argument(
        "--time-limit", type=positive_seconds, default=60.0, help="MILP seconds per budget"
    )
    p.add_argument("--jobs", type=whole_number(1), default=None)
    args = p.parse_args()
    if args.max_nodes:
        require_scipy(p.prog, "the optimal schedule (--max-nodes 0: none)")
    heuristics = args.heuristics

    with tempfile.TemporaryDirectory() as scratch:
        paths = log_paths(args.logs)
        if not paths:
            directory = args.keep or scratch
            os.makedirs(directory, exist_ok=True)
            paths = record_models(args.models, args.steps, args.size, directory)
        traces = [sim.load_log(path) for path in paths]

    started = time.perf_counter()
    results = []
    for trace in traces:  # nothing runs below the floor: those cells are not replayed
        floor = sim.floor(trace)
        above = [r for r in args.ratios if r >= floor.ratio]
        if above:
            results += sweep([trace], above, heuristics, jobs=args.jobs)
    by_key = {(r.trace, r.heuristic, r.ratio): r for r in results}
    rows = []
    for trace in traces:
        floor = sim.floor(trace)
        optimum = optimum_cells(trace, args.ratios, args.max_nodes, args.time_limit)
        for ratio in args.ratios:
            row = {"trace": trace.name, "floor": f"{floor.ratio:.3f}", "ratio": ratio}
            for h in heuristics:
                row[h] = cell(by_key.get((trace.name, h, ratio)))
            row["optimum"] = "floor" if ratio < floor.ratio else optimum[ratio]
            rows.append(row)
    print(format_rows(rows))
    wins = summarize(results, traces, heuristics)
    if wins:
        print("\n" + wins)
    print(f"\n{len(results)} replays in {time.perf_counter() - started:.1f} s")


def summarize(results, traces, heuristics) -> str:
    """Per heuristic other than dtr: cells where it beats / matches / loses to h_DTR."""
    lines = []
    by_key = {(r.trace, r.heuristic, r.ratio): r for r in results}
    for h in heuristics:
        if h == "dtr":
            continue
        better = same = worse = 0
        for r in results:
            if r.heuristic != h:
                continue
            base = by_key.get((r.trace, "dtr", r.ratio))
            if base is None:
                continue
            a = r.slowdown if r.status == "ok" else math.inf
            b = base.slowdown if base.status == "ok" else math.inf
            if a == b or (math.isfinite(b) and abs(a - b) <= SAME * b):
                same += 1
            elif a < b:
                better += 1
            else:
                worse += 1
        lines.append(
            f"{h} against dtr: better in {better}, within {SAME:.1%} in {same}, worse in {worse}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
