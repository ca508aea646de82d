"""The budget frontier of every model: floors, slowdowns at the paper's ratios, the lowest
ratio, and the live runtime against the simulator on the same run's trace.

    python benchmarks/frontier.py                      # small presets, the docs/models.md table
    python benchmarks/frontier.py --models resnet,lstm --steps 2 --csv out.csv

Per model (each in a fresh process; each probe on a fresh allocator): parameters;
constants (the most bytes of parameters, optimizer state, batch and finished
gradients alive at once) and the floor (constants plus the largest single op's
inputs and outputs), as fractions of the unbounded peak of two steps; then
``--steps`` steps at each ``--ratios`` budget, live, with h_DTR and the ``flops``
cost: slowdown ((compute + remat) / compute) or the status (oom: the budget
cannot hold an op's working set; thrash: past ``--max-slowdown``, the paper's 2x
by default; below floor: not run, no policy can fit it); the lowest ratio that
trains within ``--max-slowdown`` (``minidtr train M --find-budget``'s search, to
0.01) and how far it sits above the floor; last, the simulator's replay of the
unbounded run's trace at the same budgets: "agree" when every ratio gives the
same status and slowdowns within 2%, else the worst cell. Accuracy after
``--learn-steps`` unbounded steps shows each preset still learns.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing

import interrupts  # Ctrl-C: one line, not a traceback; pool workers leave quietly

from minidtr.budget_search import find_budget, probe, record_trace, simulate_probe
from minidtr.cli_args import above_one, check_output, names_from, ratios, whole_number
from minidtr.models import MODELS, SIZES, make_task
from minidtr.training import TrainConfig, measure_unbounded, train

AGREE = 0.02


def model_row(name: str, size: str, steps: int, ratios, limit: float, learn: int) -> dict:
    config = TrainConfig(name, size=size, steps=steps, cost="flops", max_slowdown=limit)
    floors = measure_unbounded(config)
    live = [probe(config, r, floors) for r in ratios]
    trace = record_trace(config)
    replay = [simulate_probe(trace, config, r, floors) for r in ratios]
    search = find_budget(config, limit, floors, known=live)
    worst = None
    for a, b in zip(live, replay, strict=True):
        same = a.status == b.status or (a.status == "below floor" and b.status != "ok")
        if same and a.status == "ok":
            same = abs(b.slowdown - a.slowdown) <= AGREE * a.slowdown
        if not same:
            worst = f"r={a.ratio}: live {cell(a)}, sim {cell(b)}"
            break
    accuracy = None
    if learn:
        result = train(TrainConfig(name, size=size, steps=learn, cost="flops"))
        accuracy = result.accuracy_end
    best = search.lowest
    return {
        "model": name,
        "params": make_task(name, size).model.num_parameters(),
        "peak": floors.peak,
        "constants": floors.constant_ratio,
        "floor": floors.floor_ratio,
        "floor_op": floors.floor_op,
        "cells": [cell(p) for p in live],
        "sim_cells": [cell(p) for p in replay],
        "lowest": None if best is None else best.ratio,
        "lowest_slowdown": None if best is None else best.slowdown,
        "agree": worst or "agree",
        "accuracy": accuracy,
        "probes": len(search.probes),
    }


def cell(p) -> str:
    return f"{p.slowdown:.2f}x" if p.status == "ok" else p.status


def isolated(fn, *args):
    with multiprocessing.get_context("spawn").Pool(1, interrupts.quiet_worker) as pool:
        return pool.apply(fn, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    parser.add_argument("--size", default="small", choices=SIZES)
    parser.add_argument("--steps", type=whole_number(1), default=3, help="steps per probe")
    parser.add_argument("--ratios", type=ratios, default=[0.5, 0.4, 0.3, 0.2])
    parser.add_argument("--max-slowdown", type=above_one, default=2.0)
    parser.add_argument(
        "--learn-steps", type=whole_number(0), default=40, help="0: no accuracy column"
    )
    parser.add_argument("--csv", metavar="FILE")
    args = parser.parse_args()
    if args.csv is not None and (problem := check_output(args.csv)):
        parser.error(f"--csv: {problem}")
    print(
        f"size {args.size}, h_DTR, cost flops, {args.steps} steps per probe, thrash above "
        f"{args.max_slowdown}x; accuracy after {args.learn_steps} unbounded steps"
    )
    print(
        "| model | params | constants | floor | "
        + " | ".join(f"r = {r}" for r in args.ratios)
        + " | lowest ratio | lowest / floor | live vs sim | accuracy |"
    )
    print("|---" * (8 + len(args.ratios)) + "|", flush=True)
    rows = []
    for name in args.models:
        row = isolated(
            model_row, name, args.size, args.steps, args.ratios, args.max_slowdown, args.learn_steps
        )
        rows.append(row)
        low = row["lowest"]
        lowest = "-" if low is None else f"{low:.2f} ({row['lowest_slowdown']:.2f}x)"
        above = "-" if low is None else f"{low / row['floor']:.2f}"
        acc = "-" if row["accuracy"] is None else f"{row['accuracy']:.1%}"
        print(
            f"| {name} | {row['params']:,} | {row['constants']:.1%} | {row['floor']:.3f} "
            f"({row['floor_op']}) | "
            + " | ".join(row["cells"])
            + f" | {lowest} | {above} | {row['agree']} | {acc} |",
            flush=True,
        )
    if args.csv:
        write_csv(args.csv, args.size, args.ratios, rows)


def write_csv(path: str, size: str, ratios, rows: list[dict]) -> None:
    """One row per model and ratio (``docs/make_figures.py --sweep`` reads it)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["model", "size", "params", "peak_bytes", "constants", "floor", "floor_op"]
            + ["ratio", "status", "slowdown", "sim_status", "sim_slowdown"]
            + ["lowest_ratio", "live_vs_sim", "accuracy"]
        )
        for r in rows:
            for ratio, live, replay in zip(ratios, r["cells"], r["sim_cells"], strict=True):
                writer.writerow(
                    [r["model"], size, r["params"], r["peak"], r["constants"], r["floor"]]
                    + [r["floor_op"], ratio, *status_and_slowdown(live)]
                    + [*status_and_slowdown(replay), r["lowest"], r["agree"], r["accuracy"]]
                )


def status_and_slowdown(text: str) -> tuple[str, str]:
    return ("ok", text.removesuffix("x")) if text.endswith("x") else (text, "")


if __name__ == "__main__":
    main()
