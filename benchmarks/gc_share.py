"""How much of a training step Python's cycle collector takes, per bundled model.

    python benchmarks/gc_share.py [--models mlp,treelstm] [--steps 8]

Each model's small preset, unbudgeted, one process: two warm-up steps, then ``--steps``
steps timed by this thread's processor time, with ``gc.callbacks`` adding up the time of
every collection that ran meanwhile. Printed per model: the objects the collector tracks
before the timed steps, the step time, the collectors' time and share of it, collections
per step and full (generation 2) ones per step.

Every op makes a few Python objects (its tensor handle, storage, recipe and autograd
node), which trigger the collector's young collections; those that live through a
collection of generation 1 are moved to the oldest, and once enough have been, a full
collection scans every object of the process: the data a task keeps as Python objects
included. One thread (OPENBLAS_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import minidtr as md
from minidtr.cli_args import names_from, whole_number
from minidtr.data import minibatch_indices
from minidtr.models import MODELS
from minidtr.training import TrainConfig, build_task, train_step


def measure(model: str, steps: int) -> str:
    config = TrainConfig(model)
    task = build_task(config)
    optimizer = task.make_optimizer(task.model.parameters())
    batches = minibatch_indices(task.n_train, task.batch_size, config.seed)

    def step() -> None:
        with md.Runtime(cost="flops"):
            train_step(task, optimizer, next(batches))

    for _ in range(2):
        step()
    collections: list[list] = []  # [processor seconds, generation]

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append([time.process_time(), info["generation"]])
        else:
            collections[-1][0] = time.process_time() - collections[-1][0]

    tracked = len(gc.get_objects())
    gc.callbacks.append(timed)
    try:
        started = time.process_time()
        for _ in range(steps):
            step()
        per_step = (time.process_time() - started) / steps
    finally:
        gc.callbacks.remove(timed)
    collected = sum(c[0] for c in collections) / steps
    full = sum(c[1] == 2 for c in collections) / steps
    return (
        f"| {model} | {tracked:,} | {per_step * 1e3:.1f} | {collected * 1e3:.1f} "
        f"({collected / per_step:.0%}) | {len(collections) / steps:.1f} | {full:.2f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    p.add_argument("--steps", type=whole_number(1), default=8, help="timed steps per model")
    args = p.parse_args()
    print(
        "| model | objects tracked | ms per step | collector, ms per step | "
        "collections per step | full ones per step |"
    )
    print("|---|---|---|---|---|---|")
    for model in args.models:
        print(measure(model, args.steps), flush=True)


if __name__ == "__main__":
    main()
