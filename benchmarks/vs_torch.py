"""minidtr against PyTorch on faithful twins of the seven bundled models (small presets).

    python benchmarks/vs_torch.py [--models mlp,resnet] [--steps 9] [--segments 2,4,8]
                                  [--quick] [--profile]

Each model's small preset is trained in minidtr and, from the same initial weights, on
the same batches with the same loss and optimizer, in PyTorch (its twin,
``benchmarks/torch_twins.py``; the step-0 losses must agree to 1e-4, relative, and the
parameter counts exactly). Both on the CPU with one thread (``OPENBLAS_NUM_THREADS=1``,
``torch.set_num_threads(1)``). Per model, the runs:

- PyTorch and minidtr with no memory limit;
- minidtr under budgets of 0.5 and 0.3 times its unbounded peak (as
  ``minidtr train M --ratio R``), with the slowdown its cost model counts
  (``Runtime.stats()["slowdown"]``: compute and recomputation over compute);
- PyTorch with its checkpointing, the model's chain of layers, blocks, time steps or
  groups of trees cut into k segments (``torch_twins.twin_loss``), and minidtr at the
  same real memory: under the budget at which a step's real memory grows as much as
  PyTorch's (``MinidtrRun.calibrate``; marked ``*`` where no budget got it there).

Real memory is measured alike for both: the C heap's bytes in use (glibc's
``mallinfo2``: NumPy's and PyTorch's arrays and Python's objects all come from it), read
after every op of one training step, at their highest, less what was in use before the
step (so the parameters and the optimizer's state, there before and after, are left
out). Each side makes its batch (the examples picked, and minidtr's tensors of them)
before the step is timed and measured. Time per step: the median over ``--steps``
rounds, after two warm-up steps, the measured one and an untimed round; each round runs
one step of every run of the model in turn (starting with another each round), so that
load on the machine hits them alike. The ratios are taken by this thread's processor
time, which other processes on a loaded machine do not inflate as they do the wall
clock's (by wall time in brackets). The summary checks the goals: unbudgeted within 1.5x
of PyTorch, and at equal real memory no slower than PyTorch with checkpointing at every
segment count. ``--profile`` prints, instead, PyTorch's ops by time
(``benchmarks/step_profile.py --by-op`` gives minidtr's). Runs where torch is installed;
Linux (glibc) only.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np

import minidtr as md
from minidtr.cli_args import names_from, whole_number, whole_numbers
from minidtr.data import minibatch_indices
from minidtr.models import MODELS
from minidtr.runtime import registry
from minidtr.runtime.allocator import Allocator
from minidtr.training import TrainConfig, build_task, train_step

try:
    import torch
    import torch_twins
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.set_num_threads(1)
except ImportError:
    torch = None

RATIOS = (0.5, 0.3)
LOSS_TOLERANCE = 1e-4  # relative, between the step-0 losses of a twin and its model
UNBUDGETED_GOAL = 1.5  # minidtr / PyTorch, no budget and no checkpointing
MIB = 2**20


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


class Sampling(TorchDispatchMode if torch else object):
    """Reads the heap after every PyTorch op."""

    def __init__(self, meter: HeapPeak):
        super().__init__()
        self.meter = meter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.meter.sample()
        return out


# ---- the runs -----------------------------------------------------------------------------


class Stopwatch:
    """Wall seconds and this thread's processor seconds since it was made. Both libraries
    run on this thread alone, so the processor time is the step's work without the time
    other processes on a loaded machine took from it."""

    def __init__(self):
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def stop(self) -> Stopwatch:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.thread_time() - self._cpu
        return self


class Run:
    """One way of training a model: ``prepare`` (two warm-up steps, then one step with its
    real memory measured), then timed steps. A run that fails (out of memory, thrashing)
    keeps its error as ``failure`` and takes no more steps."""

    def __init__(self, label: str):
        self.label = label
        self.losses: list[float] = []
        self.wall: list[float] = []  # seconds a timed step, by the clock on the wall
        self.cpu: list[float] = []  # and of this thread's processor time
        self.peak: int | None = None
        self.failure: str | None = None

    def train_step(self, meter: HeapPeak | None = None) -> tuple[float, Stopwatch]:
        """One training step: its loss and a stopwatch started with it (read at once);
        with ``meter``, read the heap after every op, from the step's start on."""
        raise NotImplementedError

    def prepare(self) -> None:
        self._guarded(self._prepare)

    def timed_step(self) -> None:
        if self.failure is None:
            self._guarded(self._timed_step)

    def untimed_step(self) -> None:
        if self.failure is None:
            self._guarded(self.train_step)

    def _prepare(self) -> None:
        for _ in range(2):
            self.losses.append(self.train_step()[0])
        meter = HeapPeak()
        self.losses.append(self.train_step(meter)[0])
        self.peak = meter.growth

    def _timed_step(self) -> None:
        loss, stopwatch = self.train_step()
        self.losses.append(loss)
        self.wall.append(stopwatch.wall)
        self.cpu.append(stopwatch.cpu)

    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except md.ThrashError:
            self.failure = "thrash"
        except md.BudgetError:
            self.failure = "out of memory"

    def median(self, clock: str) -> float:
        """The median seconds a step by ``clock`` ("wall" or "cpu")."""
        times = getattr(self, clock)
        return statistics.median(times) if times and self.failure is None else math.nan

    @property
    def slowdown(self) -> float | None:
        return None


class TorchRun(Run):
    """The model's PyTorch twin, its chain cut into ``segments`` checkpointed segments
    (0: no checkpointing)."""

    def __init__(self, name: str, segments: int):
        self.task = build_task(TrainConfig(name))  # the data, and the weights to copy
        self.twin = torch_twins.twin_of(self.task.model)
        first = torch_twins.batch(self.twin, self.task, np.arange(self.task.batch_size))
        self.segments = min(segments, len(self.twin.chain(*first)[1]))  # one link a segment
        super().__init__(f"PyTorch, {self.segments} segments" if segments else "PyTorch")
        optimizer = self.task.make_optimizer(self.task.model.parameters())
        self.optimizer = torch_twins.optimizer_like(optimizer, self.twin.parameters())
        self.task.model = None  # the twin has its weights
        self.batches = minibatch_indices(self.task.n_train, self.task.batch_size, 0)
        self.parameters = torch_twins.parameter_count(self.twin)

    def train_step(self, meter=None):
        model_input, targets = torch_twins.batch(self.twin, self.task, next(self.batches))
        with Sampling(meter) if meter else nullcontext():
            stopwatch = Stopwatch()
            if meter:
                meter.start()
            loss = torch_twins.twin_loss(self.twin, model_input, targets, self.segments)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            value = loss.item()
            return value, stopwatch.stop()


@contextmanager
def serving(allocator: Allocator) -> Iterator[None]:
    """Inside, ``allocator`` serves the CPU (each minidtr run has its own, so that a
    budget counts that run's bytes alone)."""
    saved = registry.installed()
    registry.install("cpu", allocator)
    try:
        yield
    finally:
        registry.restore(saved)


def closest_under(tried: dict[int, int], target: int, tolerance: float) -> int:
    """Of the budgets ``tried`` (budget -> real growth), the one whose growth came closest
    to ``target`` without passing it by more than ``tolerance``; if every one passed it,
    the one with the least growth."""
    under = [b for b, grown in tried.items() if grown <= (1 + tolerance) * target]
    if not under:
        return min(tried, key=tried.get)
    return min(under, key=lambda b: abs(tried[b] - target))


class MinidtrRun(Run):
    """The model's small preset in minidtr: two warm-up steps unbudgeted, then every step
    under ``budget`` bytes (None: no budget); or, given ``real_growth`` instead, under the
    budget at which a step's real memory grows by that much (PyTorch's, to compare at equal
    real memory): first its constants (the bytes resident after the warm-up: parameters,
    optimizer state) plus ``real_growth``, then lowered by what a step's real growth
    exceeds it (minidtr's Python objects and the eviction search's caches, which no budget
    counts), up to ``CALIBRATIONS`` times. Before the measured step, one budgeted step
    makes what a budget makes once (the eviction search's tables)."""

    CALIBRATIONS = 4
    REAL_TOLERANCE = 0.03  # relative: a real growth this close to the target is at it

    def __init__(
        self, name: str, label: str, budget: int | None = None, real_growth: int | None = None
    ):
        super().__init__(label)
        self.allocator = Allocator("cpu")
        self.budget, self.real_growth = budget, real_growth
        with serving(self.allocator):
            self.task = build_task(TrainConfig(name))
            self.optimizer = self.task.make_optimizer(self.task.model.parameters())
        self.batches = minibatch_indices(self.task.n_train, self.task.batch_size, 0)
        self.parameters = torch_twins.parameter_count(self.task.model)
        self.runtime = md.Runtime(cost="flops")  # unbudgeted, for the warm-up
        self.step_cost = 0.0  # the second warm-up step's compute, in the cost model
        self.unbounded_peak = 0

    def _prepare(self) -> None:
        for _ in range(2):
            before = self.runtime.stats_.compute_cost
            self.losses.append(self.train_step()[0])
            self.step_cost = self.runtime.stats_.compute_cost - before
        self.unbounded_peak = self.runtime.stats()["peak_memory"]
        if self.real_growth is None:
            self.measure_under(self.budget)
            return
        self.calibrate(self.allocator.memory, self.real_growth)

    def calibrate(self, constants: int, growth: int) -> None:
        """Move the budget from ``constants + growth`` by what a step's real growth misses
        ``growth`` by, either way, until it is within ``REAL_TOLERANCE`` of it (a run with
        less real memory than PyTorch's would be compared unfairly too). Where that fails
        (a budget too low to run, one that would leave nothing above the constants, or
        ``CALIBRATIONS`` tries), settle for the budget that came closest without going
        over, else the one with the least real growth (a tighter budget can make more:
        the eviction search's caches grow)."""
        budget, tried = constants + growth, {}  # budget -> real growth
        for _ in range(self.CALIBRATIONS):
            if not self.measured_under(budget):
                break
            tried[budget] = self.peak
            miss = self.peak - growth
            if abs(miss) <= self.REAL_TOLERANCE * growth:
                return
            budget -= miss
            if budget <= constants or budget in tried:
                break
        if not tried:
            raise md.BudgetError(f"a budget of {budget:,} bytes failed")
        best = closest_under(tried, growth, self.REAL_TOLERANCE)
        if best != self.budget:
            self.optimizer.zero_grad()  # what a failed step's backward left
            self.measure_under(best)

    def measured_under(self, budget: int) -> bool:
        """``measure_under(budget)``, False where the budget failed. (The error is dropped
        here: its traceback holds the failed step's tensors.)"""
        try:
            self.measure_under(budget)
        except md.BudgetError:
            return False
        return True

    def measure_under(self, budget: int | None) -> None:
        """A fresh runtime under ``budget``: a step, then a step with its real memory read."""
        self.budget = budget
        self.runtime = md.Runtime(cost="flops", budget=budget, max_wall_slowdown=None)
        if budget is not None:
            self.losses.append(self.train_step()[0])
        meter = HeapPeak()
        self.losses.append(self.train_step(meter)[0])
        self.peak = meter.growth

    @property
    def over_target(self) -> bool:
        """Whether the real growth stayed above the PyTorch run's it was to match."""
        target = self.real_growth
        return target is not None and self.peak > (1 + self.REAL_TOLERANCE) * target

    def train_step(self, meter=None):
        with serving(self.allocator), self.runtime:
            self.runtime.mark_step(expected_cost=self.step_cost)
            # the batch is made before the timing and the meter, as the twin's is
            batch = self.task.batch(next(self.batches))
            if meter:
                self.allocator.run_kernel = self._sampled(meter)
                meter.start()
            stopwatch = Stopwatch()
            try:
                loss = train_step(self.task, self.optimizer, None, batch)
            finally:
                self.allocator.__dict__.pop("run_kernel", None)
            del batch
            return loss, stopwatch.stop()

    def _sampled(self, meter: HeapPeak):
        """The allocator's kernel runner, reading the heap after every kernel."""
        plain, allocator = type(self.allocator).run_kernel, self.allocator

        def run_kernel(op, device, arrays, metas):
            result = plain(allocator, op, device, arrays, metas)
            meter.sample()
            return result

        return run_kernel

    @property
    def slowdown(self) -> float:
        return self.runtime.stats()["slowdown"]


# ---- one model's runs -------------------------------------------------------------------


@dataclass
class Comparison:
    """A model's runs: PyTorch's (``torch_runs[0]`` unbudgeted, then one per segment
    count) and minidtr's (unbudgeted, at each ratio, and at each PyTorch run's memory)."""

    name: str
    torch_runs: list[TorchRun]
    plain: MinidtrRun
    at_ratios: list[MinidtrRun]
    at_torch_memory: list[MinidtrRun]
    agreement: str = ""  # the step-0 losses and parameter counts of twin and model

    @property
    def runs(self) -> list[Run]:
        return [*self.torch_runs, self.plain, *self.at_ratios, *self.at_torch_memory]


def compare(name: str, segments: list[int], steps: int, ratios=RATIOS) -> Comparison:
    """Prepare every run of model ``name``, then time ``steps`` rounds of them."""
    torch_runs = [TorchRun(name, k) for k in [0, *segments]]
    counts = [run.segments for run in torch_runs]  # a count past the links' is their number
    torch_runs = [run for i, run in enumerate(torch_runs) if run.segments not in counts[:i]]
    for run in torch_runs:
        run.prepare()
    plain = MinidtrRun(name, "minidtr")
    plain.prepare()
    peak = plain.unbounded_peak
    at_ratios = [
        MinidtrRun(name, f"minidtr, ratio {r} ({r * peak / MIB:.2f} MiB budget)", int(r * peak))
        for r in ratios
    ]
    at_memory = [
        MinidtrRun(name, "minidtr at the same memory", real_growth=run.peak)
        for run in torch_runs[1:]
    ]
    for run in [*at_ratios, *at_memory]:
        run.prepare()
    comparison = Comparison(name, torch_runs, plain, at_ratios, at_memory)
    comparison.agreement = check_twin(comparison)
    time_rounds(comparison.runs, steps)
    return comparison


def time_rounds(runs: list[Run], rounds: int) -> None:
    """An untimed round (the others' preparation has since gone through the caches), then
    ``rounds`` timed ones, each a step of every run, each round starting with another."""
    for run in runs:
        run.untimed_step()
    for i in range(rounds):
        for run in runs[i % len(runs) :] + runs[: i % len(runs)]:
            run.timed_step()


def check_twin(comparison: Comparison) -> str:
    """The twin's step-0 loss and parameter count, which must be the model's, as a line."""
    theirs, ours = comparison.torch_runs[0], comparison.plain
    a, b = theirs.losses[0], ours.losses[0]
    difference = abs(a - b) / max(abs(b), 1e-30)
    line = (
        f"{comparison.name}: step-0 loss {a:.6f} in PyTorch, {b:.6f} in minidtr (relative "
        f"difference {difference:.1e}); {theirs.parameters:,} parameters in PyTorch, "
        f"{ours.parameters:,} in minidtr"
    )
    if difference > LOSS_TOLERANCE or theirs.parameters != ours.parameters:
        sys.exit(f"vs_torch: the PyTorch twin is not the same model\n{line}")
    return line


# ---- the tables ---------------------------------------------------------------------------


def cell(value: float | None, digits: int = 3) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def ratio(ours: Run, theirs: Run) -> str:
    """minidtr's median step over PyTorch's, by processor time (by the wall's clock);
    marked ``*`` where minidtr's real memory stayed above PyTorch's."""
    if ours.failure:
        return ours.failure
    cpu, wall = (ours.median(clock) / theirs.median(clock) for clock in ("cpu", "wall"))
    return f"{cpu:.2f} ({wall:.2f}){'*' if getattr(ours, 'over_target', False) else ''}"


def row(run: Run, against: Run | None) -> str:
    peak = None if run.peak is None else run.peak / MIB
    return (
        f"| {run.label} | {cell(peak, 2)} | {cell(run.median('cpu'))} "
        f"| {cell(run.median('wall'))} | {ratio(run, against) if against else ''} "
        f"| {cell(run.slowdown, 2)} |"
    )


def model_table(c: Comparison) -> list[str]:
    """The model's runs, each minidtr run at a PyTorch run's memory under that run."""
    lines = [
        "| run | real peak, MiB | CPU s/step | wall s/step | minidtr / PyTorch, CPU (wall) "
        "| slowdown (cost model) |",
        "|---|---|---|---|---|---|",
        row(c.torch_runs[0], None),
        row(c.plain, c.torch_runs[0]),
        *(row(run, None) for run in c.at_ratios),
    ]
    for theirs, ours in zip(c.torch_runs[1:], c.at_torch_memory, strict=True):
        lines += [row(theirs, None), row(ours, theirs)]
    return lines


def cpu_ratio(ours: Run, theirs: Run) -> float:
    return math.inf if ours.failure else ours.median("cpu") / theirs.median("cpu")


def summary_table(comparisons: list[Comparison]) -> list[str]:
    """Per model, the two goals, by processor time: unbudgeted within 1.5x of PyTorch, and
    at equal real memory no slower than PyTorch with checkpointing, at every segment
    count."""
    lines = [
        "| model | minidtr / PyTorch, no budget | at PyTorch's memory with k segments, "
        f"minidtr / PyTorch | ≤ {UNBUDGETED_GOAL}x unbudgeted | no slower at equal memory |",
        "|---|---|---|---|---|",
    ]
    for c in comparisons:
        pairs = list(zip(c.torch_runs[1:], c.at_torch_memory, strict=True))
        plain = cpu_ratio(c.plain, c.torch_runs[0])
        equal = [math.inf if o.over_target else cpu_ratio(o, t) for t, o in pairs]
        lines.append(
            f"| {c.name} | {ratio(c.plain, c.torch_runs[0])} "
            f"| {', '.join(f'k={t.segments}: {ratio(o, t)}' for t, o in pairs)} "
            f"| {'met' if plain <= UNBUDGETED_GOAL else 'missed'} "
            f"| {verdict(equal)} |"
        )
    if any(run.over_target for c in comparisons for run in c.at_torch_memory):
        lines += ["", "*: minidtr's real memory stayed above PyTorch's (no budget got it there)"]
    return lines


def verdict(equal: list[float]) -> str:
    if not equal:
        return "not measured"  # (no segment count past 1 was asked for)
    return "met" if all(r <= 1.0 for r in equal) else "missed"


def torch_profile(name: str, steps: int = 5, rows: int = 12) -> str:
    """PyTorch's ops by their own processor time over ``steps`` unbudgeted steps of the
    twin (``torch.profiler``, whose hooks slow every op a little): the other side of
    ``benchmarks/step_profile.py --by-op``."""
    from torch.profiler import ProfilerActivity, profile

    run = TorchRun(name, 0)
    run.prepare()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            run.train_step()
    table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    return f"{name}: PyTorch's ops over {steps} steps\n{table}"


def header(steps: int) -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"NumPy {np.__version__}, torch {torch.__version__}, one thread each; "
        f"medians of {steps} interleaved rounds; real peaks: heap growth of a step in MiB; "
        "ratios by processor time, by wall time in brackets"
    )


def add_comparison_arguments(
    p: argparse.ArgumentParser, models: list[str], steps: int, segments: list[int]
) -> None:
    """--models, --steps and --segments (these defaults), as both comparisons take them."""
    p.add_argument("--models", type=names_from(MODELS, "models"), default=models)
    p.add_argument(
        "--steps", type=whole_number(1), default=steps, help="timed rounds (the median is shown)"
    )
    p.add_argument(
        "--segments",
        type=whole_numbers(1),
        default=segments,
        help="PyTorch's checkpointed segments (1: no checkpointing)",
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_comparison_arguments(p, list(MODELS), steps=9, segments=[2, 4, 8])
    p.add_argument("--quick", action="store_true", help="3 rounds, 4 segments only")
    p.add_argument(
        "--profile", action="store_true", help="instead, PyTorch's ops by time (torch.profiler)"
    )
    args = p.parse_args()
    models, steps, segments = args.models, args.steps, args.segments
    if torch is None:
        sys.exit("vs_torch: PyTorch is not installed, so there is nothing to compare against")
    if args.profile:
        print("\n".join(torch_profile(name) for name in models))
        return
    if args.quick:
        steps, segments = 3, [4]
    print(header(steps))
    comparisons = []
    for name in models:
        print(f"\n### {name}\n", flush=True)
        comparisons.append(compare(name, segments, steps))
        print(comparisons[-1].agreement + "\n\n" + "\n".join(model_table(comparisons[-1])))
    print("\n### Summary\n\n" + "\n".join(summary_table(comparisons)))


if __name__ == "__main__":
    main()
