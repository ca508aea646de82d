"""The image kernels of a small ResNet-32 / U-Net step, and where a training step's time goes.

    python benchmarks/window_kernels.py [--rounds N] [--steps N]

1. Each kernel (the op's ``forward``, on NumPy) at the shapes the small presets run:
   conv2d and its two gradients, batch norm and its gradient, the relu gradient
   (ResNet-32, batch 256, widths 4/8/16 on 8x8 digits), max and average pooling and
   their gradients (U-Net / DenseNet shapes). CPU time (``time.process_time``), the
   minimum over rounds, in microseconds: CPU time rather than wall time because on a
   shared machine the wall clock mostly measures the other processes.
2. Steps of ``minidtr train resnet`` (small preset, no budget): CPU time per step and
   the share spent inside op kernels (every ``Op.forward``); the rest is the Python
   bookkeeping around them (recipes, storages, autograd, the optimizer's ops).

OpenBLAS runs single-threaded unless OPENBLAS_NUM_THREADS says otherwise (its spinning
threads make small products many times slower on a loaded machine).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from minidtr.ops.conv import (
    AvgPool2d,
    AvgPool2dGrad,
    Conv2d,
    Conv2dGradInput,
    Conv2dGradWeight,
    MaxPool2d,
    MaxPool2dGrad,
)
from minidtr.ops.elementwise import ActivationGrad
from minidtr.ops.norm import Normalize, NormalizeGrad
from minidtr.ops.op import Op


def cpu_us(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time_ns()
        fn()
        best = min(best, time.process_time_ns() - started)
    return best / 1e3


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def resnet_cases(rng, n: int, c: int, hw: int, stride: int) -> dict[str, Callable[[], object]]:
    """A ResNet-32 stage's kernels: 3x3 convolution (c -> c * stride channels), and at
    stride 1 its batch norm and relu gradient."""
    out_c = c * stride
    x, w = normal(rng, n, c, hw, hw), normal(rng, out_c, c, 3, 3)
    g = normal(rng, n, out_c, hw // stride, hw // stride)
    strides = (stride, stride)
    cases = {
        "conv2d 3x3": lambda: Conv2d(stride, 1).forward(np, x, w),
        "conv2d_grad_input": lambda: Conv2dGradInput(strides, (1, 1), x.shape).forward(np, g, w),
        "conv2d_grad_weight": lambda: Conv2dGradWeight(strides, (1, 1), w.shape).forward(np, x, g),
    }
    if stride == 1:
        bn = Normalize("batch_norm", (0, 2, 3), 1, 1e-5, True, True)
        ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
        _, mean, var = bn.forward(np, x, ones, zeros)
        cases["batch_norm"] = lambda: bn.forward(np, x, ones, zeros)
        cases["batch_norm_grad"] = lambda: NormalizeGrad(bn).forward(np, x, mean, var, ones, g)
        cases["relu grad"] = lambda: ActivationGrad("relu").forward(np, x, g)
    return cases


def pool_cases(rng, shape: tuple[int, ...], k: int, s: int, p: int):
    x = normal(rng, *shape)
    max_pool, avg_pool = MaxPool2d(k, s, p), AvgPool2d(k, s, p)
    g = normal(rng, *max_pool.forward(np, x).shape)
    return {
        "max_pool2d": lambda: max_pool.forward(np, x),
        "max_pool2d_grad": lambda: MaxPool2dGrad(max_pool.window).forward(np, x, g),
        "avg_pool2d": lambda: avg_pool.forward(np, x),
        "avg_pool2d_grad": lambda: AvgPool2dGrad(avg_pool.window, shape).forward(np, g),
    }


def kernels(rounds: int) -> None:
    rng = np.random.default_rng(0)
    print(f"1. Kernels, CPU us per call (min of {rounds})")
    print(f"{'shape':>20}  {'kernel':<22}{'us':>9}")
    groups = []
    for n, c, hw, stride in ((256, 4, 8, 1), (256, 8, 8, 2), (256, 8, 4, 1), (256, 16, 2, 1)):
        label = f"({n},{c},{hw},{hw})" + (f" s{stride}" if stride > 1 else "")
        groups.append((label, resnet_cases(rng, n, c, hw, stride)))
    for shape, k, s, p in (
        ((64, 8, 16, 16), 2, 2, 0),
        ((128, 16, 8, 8), 2, 2, 0),
        ((64, 8, 16, 16), 3, 2, 1),
    ):
        groups.append(
            (f"({','.join(map(str, shape))}) k{k}s{s}p{p}", pool_cases(rng, shape, k, s, p))
        )
    for label, cases in groups:
        for name, fn in cases.items():
            print(f"{label:>20}  {name:<22}{cpu_us(fn, rounds):9.0f}")


def all_op_classes(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *all_op_classes(sub)]
    return out


def resnet_steps(steps: int) -> None:
    """CPU time of ``steps`` ResNet-32 small steps, and the share inside ``Op.forward``."""
    from minidtr.data import minibatch_indices
    from minidtr.runtime import Runtime
    from minidtr.training import TrainConfig, build_task, train_step

    inside = defaultdict(int)
    originals = {}

    def timed(forward):
        def run(self, xp, *arrays):
            started = time.process_time_ns()
            try:
                return forward(self, xp, *arrays)
            finally:
                inside[self.name] += time.process_time_ns() - started

        return run

    for cls in all_op_classes(Op):
        if "forward" in vars(cls):
            originals[cls] = cls.forward
            cls.forward = timed(cls.forward)
    try:
        task = build_task(TrainConfig("resnet"))
        optimizer = task.make_optimizer(task.model.parameters())
        batches = minibatch_indices(task.n_train, task.batch_size, 0)
        totals, kernel_totals = [], []
        with Runtime(cost="flops"):
            for i in range(steps + 2):  # two warm-up steps (the optimizer's state)
                inside.clear()
                started = time.process_time_ns()
                train_step(task, optimizer, next(batches))
                if i >= 2:
                    totals.append(time.process_time_ns() - started)
                    kernel_totals.append(sum(inside.values()))
        by_op = dict(inside)
    finally:
        for cls, forward in originals.items():
            cls.forward = forward
    step, kernel = statistics.median(totals), statistics.median(kernel_totals)
    print(f"\n2. ResNet-32 small step (batch {task.batch_size}), CPU time, median of {steps}")
    print(
        f"step {step / 1e6:.0f} ms (min {min(totals) / 1e6:.0f}); in op kernels "
        f"{kernel / 1e6:.0f} ms ({100 * kernel / step:.0f}%); bookkeeping "
        f"{(step - kernel) / 1e6:.0f} ms ({100 * (1 - kernel / step):.0f}%)"
    )
    print("largest kernels in the last step, ms:")
    for name, ns in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {name:<22}{ns / 1e6:7.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=30, help="rounds per kernel (min taken)")
    p.add_argument("--steps", type=int, default=5, help="timed ResNet-32 steps")
    args = p.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"NumPy {np.__version__}, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    kernels(args.rounds)
    resnet_steps(args.steps)


if __name__ == "__main__":
    main()
