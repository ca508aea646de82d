"""Counted against real memory: each bundled model trained under a budget, both peaks.

    python benchmarks/real_memory.py [--ratios 0.5,0.3] [--models mlp,resnet] [--steps 2]

For each model (small preset) and budget ratio: two steps of ``minidtr train`` with
``measure_real`` (docs/memory.md): the budget, the counted peak (what the allocator
reserved: resident buffers and kernel workspaces), the real peak of arrays (tracemalloc:
the arrays resident before each kernel plus what the kernel allocated at its worst) and
what the process held at its worst with the Python objects it made meanwhile (the
graph's metadata: tensors, storages, recipes, autograd nodes). Then, per model, the
Python objects one op leaves while the graph lives: measured at the end of a forward pass
(NumPy's tracemalloc domain apart from the rest), divided by the ops that made them.

Prints markdown tables (docs/memory.md's, ``python docs/refresh_figures.py --all``).
About four minutes: tracing every allocation makes the runs two to three times slower.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

from minidtr.cli_args import names_from, ratios, whole_number
from minidtr.data import minibatch_indices
from minidtr.models import MODELS
from minidtr.runtime import Runtime
from minidtr.testing import isolated_allocator
from minidtr.training import TrainConfig, build_task, train, train_step


def peaks(model: str, ratio: float, steps: int) -> dict:
    """``train``'s statistics under ``ratio`` of the unbounded peak, measured."""
    with isolated_allocator():
        result = train(
            TrainConfig(
                model,
                steps=steps,
                ratio=ratio,
                evaluate=False,
                measure_real=True,
                max_wall_slowdown=None,  # the tracing slows the search more than the kernels
            )
        )
    return {"budget": result.budget, **result.stats}


def python_objects(model: str) -> tuple[int, int]:
    """(ops, bytes of Python objects) of one forward pass after a warm-up step: what the
    graph keeps until backward, apart from its arrays (NumPy's tracemalloc domain)."""
    others = tracemalloc.DomainFilter(False, np.lib.tracemalloc_domain)

    def traced(snapshot: tracemalloc.Snapshot, domain: tracemalloc.DomainFilter) -> int:
        return sum(s.size for s in snapshot.filter_traces([domain]).statistics("filename"))

    with isolated_allocator():
        task = build_task(TrainConfig(model))
        optimizer = task.make_optimizer(task.model.parameters())
        batches = minibatch_indices(task.n_train, task.batch_size, 0)
        with Runtime(cost="flops") as runtime:
            train_step(task, optimizer, next(batches))
            gc.collect()
            tracemalloc.start()
            try:
                before, ops = tracemalloc.take_snapshot(), runtime.stats_.ops
                model_input, targets = task.batch(next(batches))
                loss = task.loss(model_input, targets)
                gc.collect()
                after, ops = tracemalloc.take_snapshot(), runtime.stats_.ops - ops
            finally:
                tracemalloc.stop()
            del loss, model_input, targets
    return ops, traced(after, others) - traced(before, others)


def mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ratios", type=ratios, default=[0.5, 0.3])
    p.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    p.add_argument("--steps", type=whole_number(1), default=2)
    args = p.parse_args()
    models = args.models
    print(
        "| model | ratio | budget (MiB) | counted peak | real peak, arrays | real / budget "
        "| with Python objects | / budget | slowdown |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model in models:
        for ratio in args.ratios:
            s = peaks(model, ratio, args.steps)
            budget = s["budget"]
            print(
                f"| {model} | {ratio} | {mib(budget)} | {mib(s['peak_memory'])} "
                f"| {mib(s['real_peak'])} | {s['real_peak'] / budget:.3f} "
                f"| {mib(s['traced_peak'])} | {s['traced_peak'] / budget:.2f} "
                f"| {s['slowdown']:.3f} |"
            )
    print()
    print("| model | ops in a forward pass | their Python objects (MiB) | per op (bytes) |")
    print("|---|---|---|---|")
    for model in models:
        ops, nbytes = python_objects(model)
        print(f"| {model} | {ops:,} | {mib(nbytes)} | {nbytes / ops:,.0f} |")


if __name__ == "__main__":
    main()
