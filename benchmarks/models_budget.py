"""Every model under budget ratios: parameters, unbounded peak, accuracy, slowdown, remats.

    python benchmarks/models_budget.py                       # small models
    python benchmarks/models_budget.py --models resnet,lstm --ratios 0.5,0.3 --steps 5
    python benchmarks/models_budget.py --csv out.csv

For each model (at ``--size``): the parameter count; the unbounded peak of its
first two training steps (everything resident counts, constants included);
the test accuracy after ``--demo-steps`` steps (unbounded, which under any
feasible budget is the same, bit for bit); then ``--steps`` steps at each
ratio of that peak, reporting the slowdown ((compute + remat) / compute, in the
deterministic ``flops`` cost model), the remats, the wall time per step and
the status: ok, thrash (the slowdown passed ``--max-slowdown``: 4x by default,
twice the paper's 2x cut-off, so that costly but working budgets still show)
or oom (the budget cannot hold what some op needs). Last, the lowest ratio in
0.9, 0.8, ..., 0.1 at which it still trains.
"""

from __future__ import annotations

import argparse
import csv
import gc
import multiprocessing
import time

import interrupts  # Ctrl-C: one line, not a traceback; pool workers leave quietly

from minidtr.cli_args import (
    above_one,
    check_output,
    names_from,
    parse_heuristic,
    ratios,
    whole_number,
)
from minidtr.models import MODELS, SIZES, make_task
from minidtr.runtime import BudgetError, ThrashError
from minidtr.training import TrainConfig, measure_peak, train

SCAN = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)


def isolated(fn, *args):
    """``fn(*args)`` in a fresh process: a run that ends in BudgetError or ThrashError can
    leave storages resident in its process, which would count against the next budget."""
    with multiprocessing.get_context("spawn").Pool(1, interrupts.quiet_worker) as pool:
        return pool.apply(fn, args)


def attempt(config: TrainConfig) -> dict:
    return isolated(_attempt, config)


def _attempt(config: TrainConfig) -> dict:
    started = time.perf_counter()
    try:
        result = train(config)
    except ThrashError:
        return {"status": "thrash", "seconds": time.perf_counter() - started}
    except BudgetError:
        return {"status": "oom", "seconds": time.perf_counter() - started}
    row = {
        "status": "ok",
        "slowdown": result.stats["slowdown"],
        "remats": result.stats["remats"],
        "evictions": result.stats["evictions"] - result.stats["dead_evictions"],
        "s_per_step": result.seconds / len(result.losses),
        "peak": result.stats["peak_memory"],
        "budget": result.budget,
    }
    del result
    gc.collect()
    return row


def _baseline(name: str, size: str, steps: int) -> tuple[int, int, float]:
    """Parameters, unbounded peak, accuracy after ``steps`` unbounded steps."""
    params = make_task(name, size).model.num_parameters()
    gc.collect()
    peak = measure_peak(TrainConfig(name, size=size))
    free = train(TrainConfig(name, size=size, steps=steps))
    return params, peak, free.accuracy_end


def lowest_ratio(name: str, args) -> float | None:
    """The lowest ratio of SCAN that trains, scanning down until the first failure."""
    best = None
    for ratio in SCAN:
        config = TrainConfig(
            name,
            size=args.size,
            steps=args.steps,
            ratio=ratio,
            heuristic=args.heuristic,
            max_slowdown=args.max_slowdown,
            max_wall_slowdown=None,  # figures that do not depend on the machine's load
        )
        if attempt(config)["status"] != "ok":
            break
        best = ratio
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    parser.add_argument("--size", default="small", choices=SIZES)
    parser.add_argument("--steps", type=whole_number(1), default=3)
    parser.add_argument("--demo-steps", type=whole_number(1), default=40)
    parser.add_argument("--ratios", type=ratios, default=[0.5, 0.3, 0.2])
    parser.add_argument("--heuristic", type=parse_heuristic, default="dtr")
    parser.add_argument("--max-slowdown", type=above_one, default=4.0)
    parser.add_argument("--no-scan", action="store_true", help="skip the lowest-ratio scan")
    parser.add_argument("--csv", metavar="FILE")
    args = parser.parse_args()
    if args.csv is not None and (problem := check_output(args.csv)):
        parser.error(f"--csv: {problem}")
    rows = []
    header = (
        f"{'model':<12}{'params':>9}{'peak MiB':>10}{'acc@' + str(args.demo_steps):>8}"
        + "".join(f"{'r=' + str(r):>26}" for r in args.ratios)
        + f"{'lowest':>8}"
    )
    print(
        f"size {args.size}, heuristic {args.heuristic}, {args.steps} steps per budget, "
        f"cost model flops, thrash above {args.max_slowdown}x"
    )
    print(f"{'':<39}" + "".join(f"{'slowdown remats s/step':>26}" for _ in args.ratios))
    print(header, flush=True)
    for name in args.models:
        params, peak, acc = isolated(_baseline, name, args.size, args.demo_steps)
        cells = []
        row = {"model": name, "size": args.size, "params": params, "peak": peak, "accuracy": acc}
        for ratio in args.ratios:
            r = attempt(
                TrainConfig(
                    name,
                    size=args.size,
                    steps=args.steps,
                    ratio=ratio,
                    heuristic=args.heuristic,
                    max_slowdown=args.max_slowdown,
                    max_wall_slowdown=None,
                )
            )
            row[f"r{ratio}"] = r
            if r["status"] == "ok":
                cells.append(f"{r['slowdown']:.2f}x {r['remats']:>6} {r['s_per_step']:>6.2f}")
            else:
                cells.append(r["status"])
        low = None if args.no_scan else lowest_ratio(name, args)
        row["lowest"] = low
        rows.append(row)
        print(
            f"{name:<12}{params:>9,}{peak / 2**20:>10.2f}{acc:>8.1%}"
            + "".join(f"{c:>26}" for c in cells)
            + f"{'-' if low is None else format(low, '.1f'):>8}",
            flush=True,
        )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(
                [
                    "model",
                    "size",
                    "params",
                    "peak_bytes",
                    "accuracy",
                    "ratio",
                    "status",
                    "slowdown",
                    "remats",
                    "s_per_step",
                    "lowest_ratio",
                ]
            )
            for row in rows:
                for ratio in args.ratios:
                    r = row[f"r{ratio}"]
                    writer.writerow(
                        [
                            row["model"],
                            row["size"],
                            row["params"],
                            row["peak"],
                            row["accuracy"],
                            ratio,
                            r["status"],
                            r.get("slowdown"),
                            r.get("remats"),
                            r.get("s_per_step"),
                            row["lowest"],
                        ]
                    )


if __name__ == "__main__":
    main()
