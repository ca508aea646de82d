"""The unbounded peak and floor of every step of a run, each step measured alone: how far
the batches of a model differ from the first two, which ``--ratio`` is a fraction of.

    python benchmarks/batch_memory.py [--model treelstm] [--size small] [--steps 300]
                                      [--ratios 0.3,0.35,0.4]

Trains ``--steps`` unbounded steps on the batches ``minidtr train`` would use (same
seed, same order), each in its own runtime with a floor meter (``minidtr.floors``), and
prints the range of the steps' peaks and floors, and for each ratio of the first two
steps' peak the first step whose floor is above it (a run at that ratio stops there;
counting from 0, as ``minidtr train``'s event log and its error do) and how many are.
Every batch of an image or sequence model has the same shapes, so only the Tree-LSTM's
figures move. About 0.1 s a step for the Tree-LSTM.
"""

from __future__ import annotations

import argparse
import os

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from minidtr.cli_args import ratios, whole_number
from minidtr.data import minibatch_indices
from minidtr.explain import human_bytes
from minidtr.floors import measure_floors
from minidtr.models import MODELS, SIZES
from minidtr.runtime import Runtime
from minidtr.training import MEASURE_STEPS, TrainConfig, build_task, train_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="treelstm", choices=sorted(MODELS))
    p.add_argument("--size", default="small", choices=SIZES)
    p.add_argument("--steps", type=whole_number(1), default=300)
    p.add_argument("--ratios", type=ratios, default=[0.3, 0.35, 0.4])
    args = p.parse_args()
    config = TrainConfig(args.model, args.size, args.steps)
    task = build_task(config)
    optimizer = task.make_optimizer(task.model.parameters())
    batches = minibatch_indices(task.n_train, task.batch_size, config.seed)
    peaks, floors = [], []
    for _ in range(args.steps):
        runtime = Runtime(cost=config.cost)
        with runtime, measure_floors(config.device) as meter:
            train_step(task, optimizer, next(batches))
        peaks.append(runtime.stats()["peak_memory"])
        floors.append(meter.floor)
    first = max(peaks[:MEASURE_STEPS])
    print(f"minidtr train {args.model} --size {args.size}: {args.steps} steps, each unbounded")
    print(
        f"peak   {human_bytes(min(peaks))} to {human_bytes(max(peaks))}, first two steps "
        f"{human_bytes(first)}"
    )
    print(
        f"floor  {human_bytes(min(floors))} to {human_bytes(max(floors))}: at most "
        f"{max(floors) / first:.3f} of the first two steps' peak, "
        f"{max(floors) / max(peaks):.3f} of the largest peak"
    )
    for ratio in args.ratios:
        above = [i for i, floor in enumerate(floors) if floor > ratio * first]
        count = f"{len(above):,} step{'s' if len(above) > 1 else ''}"
        where = f"first at step {above[0]:,}, {count} in all" if above else "none"
        print(f"floor above {ratio:g} x the first two steps' peak: {where}")


if __name__ == "__main__":
    main()
