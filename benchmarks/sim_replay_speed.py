"""Replay speed of the simulator: instructions and trace ops per second, per heuristic.

Records a large trace from a live minidtr run (a 100-block residual MLP, 8 SGD steps:
about 10,000 ops and 52,000 log lines, the size of the paper's largest logs), then
replays it, and the traces that ship with minidtr (or the logs in --logs DIR, such as the
DTR prototype's, see docs/dtr.md), at a few budget ratios.

    python benchmarks/sim_replay_speed.py [--ratios 0.9,0.5,0.3] [--logs DIR] [--profile H]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pathlib
import pstats
import tempfile
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

import minidtr as md
from minidtr import sim
from minidtr.cli_args import input_folder, ratios
from minidtr.sim.cli import heuristic_name, heuristic_names
from minidtr.sim.simulator import baseline
from minidtr.sim.sweep import DEFAULT_HEURISTICS


def residual_mlp(depth: int = 100, width: int = 32, batch: int = 256, steps: int = 8) -> None:
    rng = np.random.default_rng(0)
    ws = [
        md.tensor(rng.standard_normal((width, width)) * 0.1, requires_grad=True)
        for _ in range(depth)
    ]
    x = md.tensor(rng.standard_normal((batch, width)))
    y = md.tensor(rng.integers(0, width, batch))
    opt = md.optim.SGD(ws, lr=0.01, momentum=0.9)
    for _ in range(steps):
        h = x
        for w in ws:
            h = h + md.tanh(h @ w)
        loss = md.cross_entropy(h, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        del h, loss


def large_trace(directory: str) -> sim.Trace:
    path = os.path.join(directory, "resmlp.log")
    started = time.perf_counter()
    with md.Runtime(cost="flops"), sim.record(path):
        residual_mlp()
    recorded = time.perf_counter() - started
    with open(path) as f:
        lines = sum(1 for _ in f)
    started = time.perf_counter()
    trace = sim.load_log(path)
    loaded = time.perf_counter() - started
    print(
        f"recorded {path}: {lines:,} lines, {trace.ops:,} ops in {recorded:.1f} s; "
        f"loaded in {loaded:.2f} s"
    )
    return trace


def measure(trace: sim.Trace, ratios, heuristics) -> None:
    started = time.perf_counter()
    peak = baseline(trace).peak_memory
    print(
        f"\n{trace.name}: {len(trace):,} instructions, {trace.ops:,} ops, peak {peak:,} B "
        f"(unbounded replay {time.perf_counter() - started:.2f} s)"
    )
    print(
        f"{'heuristic':10} {'ratio':>5} {'status':>7} {'slowdown':>8} {'seconds':>8} "
        f"{'search s':>8} {'instr/s':>9} {'ops/s':>8} {'remats':>7}"
    )
    for h in heuristics:
        for ratio in ratios:
            r = sim.simulate(trace, ratio=ratio, heuristic=h)
            print(
                f"{h:10} {ratio:5g} {r.status:>7} {r.slowdown:8.2f} {r.replay_time:8.2f} "
                f"{r.search_time:8.2f} {r.instructions_done / r.replay_time:9,.0f} "
                f"{r.ops / r.replay_time if r.status == 'ok' else float('nan'):8,.0f} "
                f"{r.remats:7,}"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ratios", type=ratios, default=[0.9, 0.5, 0.3])
    p.add_argument("--heuristics", type=heuristic_names, default=list(DEFAULT_HEURISTICS))
    p.add_argument(
        "--profile",
        metavar="HEURISTIC",
        type=heuristic_name,
        help="cProfile one replay at ratio 0.5",
    )
    p.add_argument(
        "--logs",
        metavar="DIR",
        type=input_folder,
        help="replay these logs (default: the bundled ones)",
    )
    args = p.parse_args()
    heuristics = args.heuristics
    with tempfile.TemporaryDirectory() as directory:
        trace = large_trace(directory)
    measure(trace, args.ratios, heuristics)
    if args.logs:
        folder = pathlib.Path(args.logs)
        paths = sorted([*folder.glob("*.log"), *folder.glob("*.log.gz")])
        if not paths:
            raise SystemExit(f"sim_replay_speed: no *.log or *.log.gz files in {args.logs}")
    else:
        paths = sim.bundled_traces()
    for path in paths:
        measure(sim.load_log(path), args.ratios, heuristics)
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(sim.simulate, trace, ratio=0.5, heuristic=args.profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
