"""minidtr's budget against PyTorch's ``torch.utils.checkpoint`` at equal real memory.

    python benchmarks/vs_torch_checkpoint.py [--models mlp,resnet] [--steps 5]

The same models as minidtr's small presets, written in PyTorch (CPU, one thread): the
residual MLP (24 Linear-LayerNorm-ReLU layers of 48 with skips, the 1,438 training
digits at once, Adam) and ResNet-32 (width 4, batch 256, SGD with momentum), on the
same data and shapes. PyTorch saves memory with ``checkpoint_sequential``, the network
cut into k segments of which only the inputs are kept (recomputed in backward); minidtr
by a budget, with every tensor evictable.

Real memory is measured the same way for both: the heap bytes in use (glibc's
``mallinfo2``, through which NumPy's and PyTorch's CPU arrays are both allocated, and
Python's objects), read after every op of a training step, at their highest, less what
was in use before the step (so the parameters, the optimizer's state and the batch, there
before and after, are left out). For each PyTorch row, minidtr then runs under the budget
that gives it the same real memory (its constants plus PyTorch's peak growth) and the
table puts their wall times per step side by side (the median of ``--steps`` steps after
two warm-up steps; the memory runs are separate, as reading the heap after every op takes
time). Runs where torch is installed (``pip install torch``); Linux (glibc) only.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import statistics
import time
from collections.abc import Callable

import numpy as np

import minidtr as md
from minidtr.data import minibatch_indices
from minidtr.testing import isolated_allocator
from minidtr.training import TrainConfig, build_task, train_step

try:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import checkpoint_sequential

    torch.set_num_threads(1)
except ImportError:
    torch = None


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
_LIBC.mallinfo2.restype = MallInfo2


def heap_in_use() -> int:
    """Bytes of the C heap in use: small blocks and mmapped large ones."""
    info = _LIBC.mallinfo2()
    return info.uordblks + info.hblkhd


class HeapPeak:
    """The highest ``heap_in_use`` read by ``sample`` since ``start``, less its start."""

    def __init__(self):
        self.start()

    def start(self) -> None:
        self.base = self.peak = heap_in_use()

    def sample(self) -> None:
        self.peak = max(self.peak, heap_in_use())

    @property
    def growth(self) -> int:
        return self.peak - self.base


# ---- PyTorch twins of the small presets ----------------------------------------------


def torch_mlp() -> tuple[torch.nn.Sequential, Callable]:
    class Residual(torch.nn.Module):
        def __init__(self, n: int):
            super().__init__()
            self.layers = torch.nn.Sequential(
                torch.nn.Linear(n, n), torch.nn.LayerNorm(n), torch.nn.ReLU()
            )

        def forward(self, x):
            return x + self.layers(x)

    first = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.LayerNorm(48), torch.nn.ReLU())
    layers = [first, *(Residual(48) for _ in range(23)), torch.nn.Linear(48, 10)]
    model = torch.nn.Sequential(*layers)
    return model, lambda params: torch.optim.Adam(params, lr=3e-3)


def torch_resnet() -> tuple[torch.nn.Sequential, Callable]:
    def conv_bn(c_in, c_out, k, stride):
        return [
            torch.nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False),
            torch.nn.BatchNorm2d(c_out),
        ]

    class Block(torch.nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.body = torch.nn.Sequential(
                *conv_bn(c_in, c_out, 3, stride), torch.nn.ReLU(), *conv_bn(c_out, c_out, 3, 1)
            )
            shortcut = stride != 1 or c_in != c_out
            self.shortcut = (
                torch.nn.Sequential(*conv_bn(c_in, c_out, 1, stride)) if shortcut else None
            )

        def forward(self, x):
            skip = x if self.shortcut is None else self.shortcut(x)
            return torch.relu(self.body(x) + skip)

    width, layers, c_in = 4, [*conv_bn(1, 4, 3, 1), torch.nn.ReLU()], 4
    for stage, c_out in enumerate((width, 2 * width, 4 * width)):
        for i in range(5):
            layers.append(Block(c_in, c_out, 2 if stage > 0 and i == 0 else 1))
            c_in = c_out
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(c_in, 10)]
    model = torch.nn.Sequential(*layers)
    return model, lambda params: torch.optim.SGD(params, lr=0.02, momentum=0.9)


TWINS = {"mlp": torch_mlp, "resnet": torch_resnet}


class Sampling(TorchDispatchMode if torch else object):
    """Reads the heap after every PyTorch op."""

    def __init__(self, meter: HeapPeak):
        super().__init__()
        self.meter = meter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.meter.sample()
        return out


def torch_run(model_name: str, segments: int, steps: int) -> tuple[int, float]:
    """(peak heap growth of a step, median seconds per step) with ``segments``
    checkpointed segments (0: no checkpointing)."""
    torch.manual_seed(0)
    model, make_optimizer = TWINS[model_name]()
    optimizer = make_optimizer(model.parameters())
    task = build_task(TrainConfig(model_name))  # its data, and its inputs' preprocessing
    batches = minibatch_indices(task.n_train, task.batch_size, 0)

    def step(sample: HeapPeak | None = None) -> None:
        model_input, targets = task.batch(next(batches))
        x = torch.from_numpy(np.array(model_input.numpy()))
        y = torch.from_numpy(np.array(targets.numpy()))
        del model_input, targets
        if sample is not None:
            sample.start()
        x.requires_grad_(segments > 0)  # checkpoint_sequential needs a path to the input
        out = (
            checkpoint_sequential(model, segments, x, use_reentrant=False) if segments else model(x)
        )
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del out, loss

    for _ in range(2):
        step()
    meter = HeapPeak()
    with Sampling(meter):
        step(meter)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return meter.growth, statistics.median(times)


def minidtr_run(model_name: str, growth: int | None, steps: int) -> tuple[int, float]:
    """(peak heap growth of a step, median seconds per step) of minidtr's small preset
    under the budget that holds its constants plus ``growth`` bytes (None: no budget)."""
    with isolated_allocator() as allocator:
        task = build_task(TrainConfig(model_name))
        optimizer = task.make_optimizer(task.model.parameters())
        batches = minibatch_indices(task.n_train, task.batch_size, 0)
        with md.Runtime(cost="flops", max_wall_slowdown=None) as runtime:
            for _ in range(2):
                train_step(task, optimizer, next(batches))
            if growth is not None:
                runtime.budget = allocator.memory + growth
            meter = HeapPeak()
            plain = type(allocator).run_kernel

            def sampled(op, device, arrays, metas):
                result = plain(allocator, op, device, arrays, metas)
                meter.sample()
                return result

            allocator.run_kernel = sampled
            meter.start()
            train_step(task, optimizer, next(batches))
            del allocator.run_kernel
            times = []
            for _ in range(steps):
                started = time.perf_counter()
                train_step(task, optimizer, next(batches))
                times.append(time.perf_counter() - started)
    return meter.growth, statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,resnet")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--segments", default="0,8,4,2", help="checkpointed segments (0: none)")
    args = p.parse_args()
    if torch is None:
        print("PyTorch is not installed: nothing to compare (pip install torch)")
        return
    print(f"torch {torch.__version__}, NumPy {np.__version__}, one thread each; heap growth in MiB")
    print(
        "| model | torch segments | torch peak | torch s/step | minidtr peak "
        "| minidtr s/step | minidtr / torch |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for segments in (int(s) for s in args.segments.split(",")):
            peak, seconds = torch_run(name, segments, args.steps)
            ours, our_seconds = minidtr_run(name, None if segments == 0 else peak, args.steps)
            label = "none" if segments == 0 else str(segments)
            print(
                f"| {name} | {label} | {peak / 2**20:.2f} | {seconds:.3f} | {ours / 2**20:.2f} "
                f"| {our_seconds:.3f} | {our_seconds / seconds:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
