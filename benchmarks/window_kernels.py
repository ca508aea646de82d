"""The image kernels of a small ResNet-32 / U-Net step, and where a training step's time goes.

    python benchmarks/window_kernels.py [--rounds N] [--steps N]

1. Each kernel (the op's ``forward``, on NumPy) at the shapes the small presets run, next
   to PyTorch's CPU kernel (one thread) on the same values when torch is installed:
   every convolution of the ResNet-32 small step (batch 256, widths 4/8/16 on 8x8 digits:
   forward and both gradients, and their total over one step), batch norm and its
   gradient and the relu gradient, max and average pooling and their gradients (U-Net /
   DenseNet shapes). Inputs are laid out as the network hands them over: batch-last in
   memory (the layout the window kernels return), except the stem's input, the data. CPU
   time (``time.process_time``), the minimum over rounds that alternate minidtr and
   PyTorch, in microseconds: CPU time rather than wall time because on a shared machine
   the wall clock mostly measures the other processes.
2. Steps of ``minidtr train resnet`` (small preset, no budget): CPU time per step and
   the share spent inside op kernels (every ``Op.forward``); the rest is the Python
   bookkeeping around them (recipes, storages, autograd, the optimizer's ops).
3. With ``--models`` (and only that): for every bundled model's small step (no budget),
   the CPU time inside op kernels, the minimum over ``--steps`` steps, and the window
   kernels' share of it (convolution and pooling, forward and gradients): what the
   bounded workspaces of the window kernels cost (docs/memory.md).

OpenBLAS runs single-threaded unless OPENBLAS_NUM_THREADS says otherwise (its spinning
threads make small products many times slower on a loaded machine); so does PyTorch.

Memory: a kernel called on its own, over and over, can get its large temporaries from
fresh pages every call (glibc hands blocks above its adaptive mmap threshold back to
the system when they are freed), and page faults then dominate its time (a max-pool
gradient with overlapping windows: about 1,500 faults and 3x the time per call). A
training step reuses its memory (about 3 minor faults per ResNet-32 small step), so
by default this script fixes glibc's thresholds (``mallopt``; what the environment
variables MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ do) for the kernels to
run as they do in a step; ``--default-malloc`` leaves them, and the header says which.
"""

from __future__ import annotations

import argparse
import math
import os
import resource

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from minidtr.cli_args import whole_number
from minidtr.host import steady_malloc
from minidtr.ops.activation import ActivationGrad
from minidtr.ops.conv import Conv2d, Conv2dGradInput, Conv2dGradWeight
from minidtr.ops.norm import Normalize, NormalizeGrad
from minidtr.ops.op import Op
from minidtr.ops.pool import AvgPool2d, AvgPool2dGrad, MaxPool2d, MaxPool2dGrad

try:
    import torch
    import torch.nn.functional as TF

    torch.set_num_threads(1)
except ImportError:
    torch = None

Case = tuple[Callable[[], object], Callable[[], object] | None]  # minidtr, PyTorch

# the ResNet-32 small step's convolutions: (N, C, H=W, O, kernel, stride, calls per step)
RESNET_CONVS = (
    (256, 1, 8, 4, 3, 1, 1),
    (256, 4, 8, 4, 3, 1, 10),
    (256, 4, 8, 8, 3, 2, 1),
    (256, 4, 8, 8, 1, 2, 1),
    (256, 8, 4, 8, 3, 1, 9),
    (256, 8, 4, 16, 3, 2, 1),
    (256, 8, 4, 16, 1, 2, 1),
    (256, 16, 2, 16, 3, 1, 9),
)


def cpu_us(fns: list[Callable[[], object]], rounds: int) -> list[float]:
    """The minimum CPU time of each function, in rounds that alternate them."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            started = time.process_time_ns()
            fn()
            best[i] = min(best[i], time.process_time_ns() - started)
    return [b / 1e3 for b in best]


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def batch_last(a: np.ndarray) -> np.ndarray:
    """The same (N, C, H, W) values, laid out (C, H, W, N) in memory, as the window
    kernels, and the elementwise ops after them, hand them to the next op."""
    return np.ascontiguousarray(a.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)


def as_torch(a: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(a))


def conv_cases(rng, n: int, c: int, hw: int, o: int, k: int, s: int) -> dict[str, Case]:
    """One convolution of the step (padding k // 2): forward and both gradients."""
    p = k // 2
    x, w = normal(rng, n, c, hw, hw), normal(rng, o, c, k, k)
    g = normal(rng, n, o, (hw + 2 * p - k) // s + 1, (hw + 2 * p - k) // s + 1)
    xt, wt, gt = (as_torch(a) for a in (x, w, g)) if torch else (None, None, None)
    x = x if c == 1 else batch_last(x)  # the stem reads the data, batch-first
    g = batch_last(g)

    def torch_grad(mask):
        if torch is None:
            return None
        args = (gt, xt, wt, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)
        return lambda: torch.ops.aten.convolution_backward(*args)

    torch_forward = (lambda: TF.conv2d(xt, wt, stride=s, padding=p)) if torch else None
    return {
        "conv2d": (lambda: Conv2d(s, p).forward(np, x, w), torch_forward),
        "conv2d_grad_input": (
            lambda: Conv2dGradInput((s, s), (p, p), x.shape).forward(np, g, w),
            torch_grad([True, False, False]),
        ),
        "conv2d_grad_weight": (
            lambda: Conv2dGradWeight((s, s), (p, p), w.shape).forward(np, x, g),
            torch_grad([False, True, False]),
        ),
    }


def norm_cases(rng, n: int, c: int, hw: int) -> dict[str, Case]:
    """Batch norm, its gradient and the relu gradient of a ResNet-32 stage."""
    x, g = batch_last(normal(rng, n, c, hw, hw)), batch_last(normal(rng, n, c, hw, hw))
    bn = Normalize("batch_norm", (0, 2, 3), 1, 1e-5, True, True)
    ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
    _, mean, var = bn.forward(np, x, ones, zeros)
    return {
        "batch_norm": (lambda: bn.forward(np, x, ones, zeros), None),
        "batch_norm_grad": (lambda: NormalizeGrad(bn).forward(np, x, mean, var, ones, g), None),
        "relu grad": (lambda: ActivationGrad("relu").forward(np, x, g), None),
    }


def pool_cases(rng, shape: tuple[int, ...], k: int, s: int, p: int) -> dict[str, Case]:
    x = normal(rng, *shape)
    max_pool, avg_pool = MaxPool2d(k, s, p), AvgPool2d(k, s, p)
    g = normal(rng, *max_pool.forward(np, x).shape)
    xl, gl = batch_last(x), batch_last(g)
    cases: dict[str, list] = {
        "max_pool2d": [lambda: max_pool.forward(np, xl), None],
        "max_pool2d_grad": [lambda: MaxPool2dGrad(max_pool.window).forward(np, xl, gl), None],
        "avg_pool2d": [lambda: avg_pool.forward(np, xl), None],
        "avg_pool2d_grad": [lambda: AvgPool2dGrad(avg_pool.window, shape).forward(np, gl), None],
    }
    if torch:
        xt, gt = as_torch(x), as_torch(g)
        _, indices = torch.ops.aten.max_pool2d_with_indices(xt, [k, k], [s, s], [p, p])
        cases["max_pool2d"][1] = lambda: TF.max_pool2d(xt, k, s, p)
        cases["max_pool2d_grad"][1] = lambda: torch.ops.aten.max_pool2d_with_indices_backward(
            gt, xt, [k, k], [s, s], [p, p], [1, 1], False, indices
        )
        cases["avg_pool2d"][1] = lambda: TF.avg_pool2d(xt, k, s, p)
        cases["avg_pool2d_grad"][1] = lambda: torch.ops.aten.avg_pool2d_backward(
            gt, xt, [k, k], [s, s], [p, p], False, True, None
        )
    return {name: (ours, theirs) for name, (ours, theirs) in cases.items()}


def kernels(rounds: int) -> None:
    rng = np.random.default_rng(0)
    print(f"1. Kernels, CPU us per call (min of {rounds}); torch: PyTorch CPU, 1 thread")
    print(f"{'shape':>28}  {'kernel':<20}{'minidtr':>9}{'torch':>9}{'ratio':>7}")
    groups = []
    step_total = np.zeros(2)
    for n, c, hw, o, k, s, calls in RESNET_CONVS:
        label = f"({n},{c},{hw},{hw})->{o} {k}x{k}" + (f" s{s}" if s > 1 else "")
        cases = conv_cases(rng, n, c, hw, o, k, s)
        if c == 1:  # the data needs no gradient
            del cases["conv2d_grad_input"]
        groups.append((label, cases, calls))
    for c, hw in ((4, 8), (8, 4), (16, 2)):
        groups.append((f"(256,{c},{hw},{hw})", norm_cases(rng, 256, c, hw), 0))
    for shape, k, s, p in (
        ((64, 8, 16, 16), 2, 2, 0),
        ((128, 16, 8, 8), 2, 2, 0),
        ((64, 8, 16, 16), 3, 2, 1),
    ):
        label = f"({','.join(map(str, shape))}) k{k}s{s}p{p}"
        groups.append((label, pool_cases(rng, shape, k, s, p), 0))
    for label, cases, calls in groups:
        for name, (ours, theirs) in cases.items():
            us = cpu_us([ours] if theirs is None else [ours, theirs], rounds)
            if calls and theirs is not None:
                step_total += calls * np.array(us)
            ratio = f"{us[0] / us[1]:7.2f}" if len(us) > 1 else ""
            theirs_us = f"{us[1]:9.0f}" if len(us) > 1 else f"{'':9}"
            print(f"{label:>28}  {name:<20}{us[0]:9.0f}{theirs_us}{ratio}")
    if torch:
        print(
            f"every convolution kernel of one ResNet-32 small step: minidtr "
            f"{step_total[0] / 1e3:.1f} ms, PyTorch {step_total[1] / 1e3:.1f} ms "
            f"({step_total[0] / step_total[1]:.2f}x)"
        )


def all_op_classes(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *all_op_classes(sub)]
    return out


class KernelClock:
    """While active, every ``Op.forward`` adds its CPU time to ``inside[op name]``."""

    def __init__(self):
        self.inside: defaultdict[str, int] = defaultdict(int)
        self.originals: dict[type, Callable] = {}

    def __enter__(self) -> KernelClock:
        inside = self.inside

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
                self.originals[cls] = cls.forward
                cls.forward = timed(cls.forward)
        return self

    def __exit__(self, *exc) -> None:
        for cls, forward in self.originals.items():
            cls.forward = forward


WINDOW_OPS = ("conv2d", "max_pool2d", "avg_pool2d")  # and their gradients (prefix)


def model_kernels(steps: int) -> None:
    """Every bundled model's small step: CPU time inside op kernels (min over steps)."""
    from minidtr.data import minibatch_indices
    from minidtr.models import MODELS
    from minidtr.runtime import Runtime
    from minidtr.training import TrainConfig, build_task, train_step

    print(f"3. Op kernels of one small step per model, CPU ms (min of {steps} steps)")
    print(f"{'model':<12}{'kernels':>9}{'window':>9}")
    for model in MODELS:
        task = build_task(TrainConfig(model))
        optimizer = task.make_optimizer(task.model.parameters())
        batches = minibatch_indices(task.n_train, task.batch_size, 0)
        best = (math.inf, 0)
        with KernelClock() as clock, Runtime(cost="flops"):
            for i in range(steps + 2):  # two warm-up steps (the optimizer's state)
                clock.inside.clear()
                train_step(task, optimizer, next(batches))
                total = sum(clock.inside.values())
                window = sum(ns for name, ns in clock.inside.items() if name.startswith(WINDOW_OPS))
                if i >= 2 and total < best[0]:
                    best = (total, window)
        print(f"{model:<12}{best[0] / 1e6:9.1f}{best[1] / 1e6:9.1f}")


def resnet_steps(steps: int) -> None:
    """CPU time of ``steps`` ResNet-32 small steps, and the share inside ``Op.forward``."""
    from minidtr.data import minibatch_indices
    from minidtr.runtime import Runtime
    from minidtr.training import TrainConfig, build_task, train_step

    clock = KernelClock()
    inside = clock.inside

    with clock:
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
    p.add_argument(
        "--rounds", type=whole_number(1), default=30, help="rounds per kernel (min taken)"
    )
    p.add_argument("--steps", type=whole_number(1), default=5, help="timed ResNet-32 steps")
    p.add_argument(
        "--default-malloc", action="store_true", help="leave glibc's thresholds as they are"
    )
    p.add_argument(
        "--models", action="store_true", help="only the op kernels of every bundled model's step"
    )
    args = p.parse_args()
    memory = "malloc as is" if args.default_malloc else steady_malloc()
    if args.models:
        model_kernels(args.steps)
        return
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"NumPy {np.__version__}, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
        f"load average {os.getloadavg()[0]:.1f}"
        + (f", torch {torch.__version__}" if torch else ", no torch")
        + f"; {memory}"
    )
    kernels(args.rounds)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(f"minor page faults while timing the kernels: {faults:,}")
    resnet_steps(args.steps)


if __name__ == "__main__":
    main()
