"""How much ``learned`` should trust its prediction: h_DTR against ``learned`` at several
weights of the predicted distance, on a fine grid of ratios.

``learned`` scores a storage by C / (M * D) with D = d**w * s**(1 - w): d the distance
to its predicted next use, s its staleness, w the weight (``learned+estar+size+time+w``;
``learned`` alone is w = 0.3, ``minidtr.runtime.learned.PREDICTED``). w = 0 is staleness
alone, on the program's clock; w = 1 the prediction alone. For each weight, over every
cell (model x ratio) where h_DTR or it runs within 2x: the cells where it is better than
h_DTR, worse, and worse by more than 2% (listed), its slowdowns at 0.3 and 0.2, and the
lowest ratio of the grid at which each model runs.

    python benchmarks/learned_weight.py                          # 7 models, 3 steps
    python benchmarks/learned_weight.py --weights 0,0.3,1 --ratios 0.3,0.25,0.2
    python benchmarks/learned_weight.py LOG_OR_DIR ...           # logs you have

With no logs the bundled models are recorded first (unbounded, flops cost), as
``sim_clairvoyant.py`` does; about two minutes on two cores with the default grid.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
from sim_clairvoyant import log_paths, record_models

from minidtr import sim
from minidtr.cli_args import floats, input_path, names_from, ratios, whole_number
from minidtr.models import MODELS
from minidtr.runtime.learned import parse_learned
from minidtr.sim.sweep import sweep

WORSE = 0.02  # worse by more than this (relative) is listed
SAME = 1e-3  # slowdowns this close (relative) count as level


def slowdown(result) -> float:
    return result.slowdown if result.status == "ok" else math.inf


def lowest(values: dict[float, float]) -> str:
    runs = [ratio for ratio, value in values.items() if math.isfinite(value)]
    return f"{min(runs):.2f}" if runs else "-"


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
    p.add_argument("--weights", type=floats, default=[0.0, 0.3, 0.5, 0.7, 1.0])
    p.add_argument("--ratios", type=ratios, default=[r / 100 for r in range(30, 14, -1)])
    p.add_argument("--jobs", type=whole_number(1), default=None)
    args = p.parse_args()
    weights = args.weights
    names = {w: f"learned+estar+size+time+{w:g}" for w in weights}
    for name in names.values():
        try:
            parse_learned(name)
        except ValueError as error:
            p.error(f"--weights: {error}")

    with tempfile.TemporaryDirectory() as scratch:
        paths = log_paths(args.logs) or record_models(args.models, args.steps, "small", scratch)
        traces = [sim.load_log(path) for path in paths]

    started = time.perf_counter()
    results = sweep(traces, args.ratios, ["dtr", *names.values()], jobs=args.jobs)
    table: dict[tuple[str, str], dict[float, float]] = {}
    for result in results:
        table.setdefault((result.trace, result.heuristic), {})[result.ratio] = slowdown(result)
    short = {trace.name: trace.name.split("-")[0] for trace in traces}

    span = f"{min(args.ratios):.2f}-{max(args.ratios):.2f}"
    print(f"{len(traces)} traces, ratios {span}, h_DTR against learned")
    header = "| weight | better | worse | worse by > 2% | at 0.3 and 0.2 (learned / dtr) |"
    print(header + "\n|---|---|---|---|---|")
    for w, name in names.items():
        better = worse = 0
        bad, marks = [], []
        for trace in traces:
            ours, base = table[(trace.name, name)], table[(trace.name, "dtr")]
            for ratio in args.ratios:
                a, b = ours[ratio], base[ratio]
                if math.isinf(a) and math.isinf(b):
                    continue
                if a < b * (1 - SAME):
                    better += 1
                elif a > b * (1 + SAME):
                    worse += 1
                if a > b * (1 + WORSE):
                    bad.append(f"{short[trace.name]} {ratio:.2f}: {a / b:.3f}")
                if ratio in (0.3, 0.2):
                    marks.append(f"{short[trace.name]} {ratio:.1f} {a / b:.3f}")
        print(f"| {w:g} | {better} | {worse} | {', '.join(bad) or 'none'} | {', '.join(marks)} |")
    print("\nlowest ratio of the grid within 2x:")
    print("| model | dtr | " + " | ".join(f"w = {w:g}" for w in weights) + " |")
    print("|---|---|" + "---|" * len(weights))
    for trace in traces:
        cells = [lowest(table[(trace.name, h)]) for h in ["dtr", *names.values()]]
        print(f"| {short[trace.name]} | " + " | ".join(cells) + " |")
    print(f"\n{len(results)} replays in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
