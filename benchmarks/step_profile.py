"""Where a training step's CPU time goes, by phase: kernels, op bookkeeping, the rest.

    python benchmarks/step_profile.py [--model resnet] [--size small] [--steps 8] [--by-op]
                                      [--batch N] [--instructions [--ratio R]]
                                      [--default-malloc]

Runs steps of ``minidtr train MODEL`` (no budget) and splits each phase (batch,
forward, backward, optimizer step, zero_grad) into thread CPU time spent in op
kernels (every ``Op.forward``), in the rest of ``apply`` (checking the inputs,
the allocator's recipe, storage and cell, the Tensor handles, the autograd node),
in Python's cycle collector (``gc.callbacks``), and outside any op (module code, the
autograd engine's own loop, releasing tensors). Then the ops per step by name; with
``--by-op``, each op's kernel time and bookkeeping (its ``apply`` minus its kernel)
per call, the collections that ran inside it left out: a collection runs when enough
objects were made, at the same op of every step, and would otherwise make that op
look several times dearer than it is. CPU time of this thread rather
than wall time, so that other processes on a shared machine do not count; the timers
add a few microseconds per op.

``--batch 2`` makes the kernels tiny: the bookkeeping then runs with warm caches, as in
a chain of tiny ops, where at the preset's batch each op's bookkeeping starts after a
kernel has streamed megabytes through the caches. ``--instructions`` counts instead,
with callgrind, the instructions of one step (after two): load-independent, and with
``--batch 2`` mostly bookkeeping (the kernels included; the figure to compare two
versions by). With ``--ratio``, the counted step (and the two before it) runs under a
budget of that fraction of the step's unbounded peak (``flops`` cost model, as
``minidtr train``): the runtime's work under a budget, counted the same way.

The timed runs fix glibc's malloc thresholds first, as the ``minidtr`` command does
(``minidtr.host.steady_malloc``): left adaptive, a kernel whose output is a few hundred
KB takes fresh pages from the system on every call and reads two or three times dearer
than it is inside ``minidtr train`` (the LSTM's ``lstm_gates``: 130 µs a call against
45). ``--default-malloc`` leaves them; the header says which. ``--instructions`` leaves
them too: callgrind counts instructions, which the page faults do not add to, and its
figures stay comparable with those counted before.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import pathlib
import shutil
import subprocess
import tempfile

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import sys
import time
from collections import Counter

import numpy as np

import minidtr as md
from minidtr.cli_args import parse_ratio, whole_number
from minidtr.host import steady_malloc
from minidtr.models import MODELS
from minidtr.models.tasks import SIZES, make_task
from minidtr.ops import op as op_module
from minidtr.runtime.allocator import Allocator
from minidtr.training import TrainConfig, measure_peak, train_step

PHASES = ("batch", "forward", "backward", "step", "zero_grad")


def instrument(spent: Counter, ops: Counter, by_op: Counter):
    """Count kernel and outermost-apply CPU time into ``spent``, ops by name into ``ops``,
    and per op name into ``by_op`` (keys (name, "kernel") and (name, "apply")), each
    without the cycle collector's passes, whose time goes to ``spent["collector"]``;
    returns a function that undoes it."""
    run, apply = Allocator.run_kernel, op_module.apply  # every op's kernel runs through it
    clock = time.thread_time_ns
    depth = [0]
    collector = [0, 0]  # ns in collections so far, and when the running one started

    def on_collection(phase: str, info: dict) -> None:
        if phase == "start":
            collector[1] = clock()
        else:
            elapsed = clock() - collector[1]
            collector[0] += elapsed
            spent["collector"] += elapsed

    def timed_run(self, op, device, arrays, metas):
        started, collected = clock(), collector[0]
        try:
            return run(self, op, device, arrays, metas)
        finally:
            elapsed = clock() - started - (collector[0] - collected)
            spent["kernels"] += elapsed
            ops[op.name] += 1
            by_op[op.name, "kernel"] += elapsed

    def timed_apply(op, *inputs, **kwargs):
        depth[0] += 1
        started, collected = clock(), collector[0]
        try:
            return apply(op, *inputs, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                elapsed = clock() - started - (collector[0] - collected)
                spent["apply"] += elapsed
                by_op[op.name, "apply"] += elapsed

    modules = [m for name, m in sys.modules.items() if name.startswith("minidtr.")]
    patched = [m for m in modules if getattr(m, "apply", None) is apply]
    Allocator.run_kernel = timed_run
    for m in patched:
        m.apply = timed_apply
    gc.callbacks.append(on_collection)

    def undo():
        Allocator.run_kernel = run
        for m in patched:
            m.apply = apply
        gc.callbacks.remove(on_collection)

    return undo


def count_instructions(model: str, size: str, batch: int | None, ratio: float | None) -> None:
    """Run this script under callgrind, counting one step's instructions (``one_step``)."""
    if shutil.which("valgrind") is None:
        sys.exit("step_profile: --instructions needs valgrind")
    options = ["--model", model, "--size", size]
    if batch is not None:
        options += ["--batch", str(batch)]
    if ratio is not None:
        options += ["--ratio", str(ratio)]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "cg.out"
        command = ["valgrind", "--tool=callgrind", "--collect-atstart=no"]
        command += ["--toggle-collect=functools_reduce", f"--callgrind-out-file={out}"]
        command += [sys.executable, __file__, "--inside", *options]
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"step_profile: the counted run failed:\n{done.stderr[-2000:]}")
        lines = out.read_text().splitlines()
        total = next(int(line.split()[1]) for line in lines if line.startswith("summary:"))
    print(f"{model} ({size}, {done.stdout.strip()}): {total:,} instructions in one step")


def one_step(task, budget: int | None) -> None:
    """Two steps, then one inside ``functools.reduce`` (what callgrind counts), each in a
    runtime of its own under ``budget`` bytes (None: no runtime entered, no budget)."""
    optimizer = task.make_optimizer(task.model.parameters())
    rng = np.random.default_rng(0)

    def step(indices):
        if budget is None:
            return train_step(task, optimizer, indices)
        with md.Runtime(budget=budget, cost="flops", max_wall_slowdown=None):
            return train_step(task, optimizer, indices)

    for _ in range(2):
        step(rng.choice(task.n_train, task.batch_size, replace=False))
    indices = rng.choice(task.n_train, task.batch_size, replace=False)
    functools.reduce(lambda _, f: f(), [lambda: step(indices)], None)
    budgeted = "" if budget is None else f", budget {budget:,} B"
    print(f"batch {task.batch_size}{budgeted}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet", choices=list(MODELS))
    p.add_argument("--size", default="small", choices=SIZES)
    p.add_argument("--steps", type=whole_number(1), default=8)
    p.add_argument("--by-op", action="store_true", help="kernel and bookkeeping per op name")
    p.add_argument(
        "--batch",
        type=whole_number(1),
        help="batch size instead of the preset's (tiny: bookkeeping alone)",
    )
    p.add_argument("--instructions", action="store_true", help="one step's instructions")
    p.add_argument(
        "--ratio", type=parse_ratio, help="with --instructions: under this fraction of the peak"
    )
    p.add_argument(
        "--default-malloc", action="store_true", help="leave glibc's thresholds as they are"
    )
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ratio is not None and not (args.instructions or args.inside):
        p.error("--ratio counts a budgeted step: it goes with --instructions")
    if args.instructions:
        count_instructions(args.model, args.size, args.batch, args.ratio)
        return
    task = make_task(args.model, args.size, 0)
    if args.batch is not None:
        if not 1 <= args.batch <= task.n_train:
            p.error(f"--batch must be between 1 and {task.n_train}, got {args.batch}")
        task.batch_size = args.batch
    if args.inside:
        budget = None
        if args.ratio is not None:
            config = TrainConfig(args.model, size=args.size, batch=args.batch)
            budget = int(args.ratio * measure_peak(config))
        one_step(task, budget)
        return
    optimizer = task.make_optimizer(task.model.parameters())
    rng = np.random.default_rng(0)
    spent: Counter = Counter()
    ops: Counter = Counter()
    totals: Counter = Counter()
    by_op: Counter = Counter()
    memory = "malloc as is" if args.default_malloc else steady_malloc()
    undo = instrument(spent, ops, by_op)

    def phase(name, fn, *args):
        spent.clear()
        started = time.thread_time_ns()
        result = fn(*args)
        totals[name, "total"] += time.thread_time_ns() - started
        totals[name, "kernels"] += spent["kernels"]
        totals[name, "apply"] += spent["apply"]
        totals[name, "collector"] += spent["collector"]
        return result

    try:
        for i in range(args.steps + 1):
            if i == 1:  # the first step creates the optimizer state
                totals.clear()
                ops.clear()
                by_op.clear()
            indices = rng.choice(task.n_train, task.batch_size, replace=False)
            model_input, targets = phase("batch", task.batch, indices)
            loss = phase("forward", task.loss, model_input, targets)
            phase("backward", loss.backward)
            phase("step", optimizer.step)
            phase("zero_grad", optimizer.zero_grad)
            del loss
    finally:
        undo()
    n = args.steps

    def ms(name, what):
        return totals[name, what] / n / 1e6

    print(f"{args.model} ({args.size}, batch {task.batch_size}), {optimizer!r}; {memory}")
    print(
        f"CPU ms per step, mean of {n} steps     total  kernels  op bookkeeping  collector  other"
    )

    def row(label: str, total: float, kernels: float, apply: float, collector: float) -> None:
        other = total - apply - collector
        print(
            f"  {label:34s} {total:6.1f} {kernels:8.1f} {apply - kernels:15.1f} "
            f"{collector:10.1f} {other:6.1f}"
        )

    for name in PHASES:
        row(name, *(ms(name, what) for what in ("total", "kernels", "apply", "collector")))
    total, kernels, apply, collector = (
        sum(ms(name, what) for name in PHASES)
        for what in ("total", "kernels", "apply", "collector")
    )
    row("all", total, kernels, apply, collector)
    per_step = sum(ops.values()) / n
    print(
        f"bookkeeping {100 * (1 - kernels / total):.0f}% of the step (the cycle collector "
        f"{100 * collector / total:.0f}%); {per_step:.0f} ops per step, "
        f"{1e3 * (total - kernels) / per_step:.0f} us of bookkeeping per op"
    )
    print("ops per step: " + ", ".join(f"{name} {c / n:.0f}" for name, c in ops.most_common()))
    if args.by_op:
        # an op applied inside another op's apply would count its bookkeeping in the outer
        # op's (none of the bundled models' ops does)
        print(f"per call, us{'':16s} {'per step':>8s} {'kernel':>10s} {'bookkeeping':>15s}")
        for name, c in ops.most_common():
            kernel, outer = by_op[name, "kernel"] / c / 1e3, by_op[name, "apply"] / c / 1e3
            print(f"  {name:26s} {c / n:8.0f} {kernel:10.1f} {outer - kernel:15.1f}")


if __name__ == "__main__":
    main()
