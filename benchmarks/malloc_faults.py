"""Page faults and CPU time of training steps, with glibc's malloc thresholds as they are
and fixed (what MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set).

    python benchmarks/malloc_faults.py [--models resnet,mlp] [--steps 10] [--ratio 0.5]

glibc serves a request above its mmap threshold (adaptive, from 128 KiB up to 32 MiB)
with fresh pages from the system and returns them on free, so a buffer freed and
requested again pays for its pages again (minor faults). Each model runs in two
processes, one per setting; the figures are per step after two warm-up steps: minor page
faults (``getrusage``, which the machine's load does not change) and CPU seconds.
Linux (glibc) only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr.cli_args import names_from, parse_ratio, whole_number
from minidtr.models import MODELS

FIXED = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20)}

CHILD = """
import json, resource, sys, time
import minidtr as md
from minidtr.data import minibatch_indices
from minidtr.training import TrainConfig, build_task, measure_peak, train_step
name, steps, ratio = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
config = TrainConfig(name, steps=steps)
budget = int(ratio * measure_peak(config)) if ratio < 1 else None
task = build_task(config)
optimizer = task.make_optimizer(task.model.parameters())
batches = minibatch_indices(task.n_train, task.batch_size, config.seed)
with md.Runtime(budget=budget, cost="flops"):
    for _ in range(2):
        train_step(task, optimizer, next(batches))
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for _ in range(steps):
        train_step(task, optimizer, next(batches))
    after, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time() - started
print(json.dumps({"faults": (after.ru_minflt - before.ru_minflt) / steps, "cpu": cpu / steps}))
"""


def measure(model: str, steps: int, ratio: float, fixed: bool) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    for name in FIXED:
        env.pop(name, None)
    if fixed:
        env.update(FIXED)
    args = [sys.executable, "-c", CHILD, model, str(steps), str(ratio)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    parser.add_argument("--steps", type=whole_number(1), default=10)
    parser.add_argument("--ratio", type=parse_ratio, default=0.5, help="budget / peak (1: none)")
    args = parser.parse_args(argv)
    print(f"ratio {args.ratio}, {args.steps} steps after two warm-up steps, per step")
    print("| model | faults, malloc as is | fixed thresholds | CPU s, as is | fixed |")
    print("|---|---|---|---|---|")
    for model in args.models:
        plain, fixed = (measure(model, args.steps, args.ratio, f) for f in (False, True))
        print(
            f"| {model} | {plain['faults']:,.0f} | {fixed['faults']:,.0f} "
            f"| {plain['cpu']:.3f} | {fixed['cpu']:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
