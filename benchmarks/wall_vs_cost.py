"""What a budget costs in wall time against what the cost model says it costs.

    python benchmarks/wall_vs_cost.py [--models mlp,resnet] [--ratios 0.5,0.3] [--rounds 9]
                                      [--heuristic dtr]

For each model's small preset: one task, its unbounded peak measured first; then rounds
of one training step per setting (no budget, then each ratio of the peak), interleaved
so that the machine's load falls on all of them alike, each step in a runtime of its own
(entered outside the timing). Printed per ratio: the wall-clock slowdown (median step
time over the unbudgeted median), the cost model's slowdown ((compute + recompute) /
compute, ``flops``, of the same steps) and their quotient, which the runtime's own work
under a budget (the eviction search, the bookkeeping that grows with it) makes larger
than 1 and recomputation alone would keep at 1. The quotient also rises when the
unbudgeted step gets faster, so the last column gives the policy's own time directly:
the budgeted step's median less the unbudgeted one's and less the median time spent in
the rematerializations' kernels (``remat.replay_kernel``, timed in the worker), in ms
and as a share of the budgeted step. One thread (OPENBLAS_NUM_THREADS=1).
Each model is measured in a process of its own: in one process, what the models before
it left (the Tree-LSTM's trees, for one) makes the cycle collector's passes during its
budgeted steps longer (the Transformer's quotient measured 1.11-1.24 after the LSTM and
the Tree-LSTM, 1.06-1.08 alone).
``--heuristic`` picks the budgeted runs' heuristic (h_DTR by default, as ``minidtr
train``): ``dtr_eq`` shows what h_DTR's exact e* costs, since it keeps none.
Each process fixes glibc's malloc thresholds first, as the ``minidtr`` command does
(``minidtr.host``): left adaptive, they make the unbudgeted MLP step take thousands of
page faults in some processes and none in others, and its quotient came out 0.86-0.93
or 1.14-1.19 from one run to the next. ``--default-malloc`` leaves them; the header
says which.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os

import interrupts  # Ctrl-C: one line, not a traceback; pool workers leave quietly

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import statistics
import time

import minidtr as md
from minidtr.cli_args import names_from, ratios, whole_number
from minidtr.data import minibatch_indices
from minidtr.host import steady_malloc
from minidtr.models import MODELS
from minidtr.runtime import HEURISTIC_NAMES, remat
from minidtr.training import TrainConfig, build_task, measure_peak, train_step


class KernelClock:
    """``remat.replay_kernel``, timed: the seconds the rematerializations' kernels took
    since ``seconds`` was last reset."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.plain = remat.replay_kernel

    def __call__(self, *args):
        started = time.perf_counter()
        try:
            return self.plain(*args)
        finally:
            self.seconds += time.perf_counter() - started


def measure(
    model: str, ratios: list[float], rounds: int, heuristic: str = "dtr", steady: bool = True
) -> list[tuple]:
    """(ratio, wall slowdown, cost-model slowdown, the policy's own seconds a step, its
    share of the budgeted step) for each ratio; ``steady``: fix glibc's malloc thresholds
    first (``minidtr.host.steady_malloc``)."""
    if steady:
        steady_malloc()
    clock = remat.replay_kernel = KernelClock()  # (this worker process only)
    config = TrainConfig(model)
    peak = measure_peak(config)
    task = build_task(config)
    optimizer = task.make_optimizer(task.model.parameters())
    batches = minibatch_indices(task.n_train, task.batch_size, config.seed)
    settings = [None, *ratios]
    times: dict = {r: [] for r in settings}
    kernels: dict = {r: [] for r in settings}
    compute = {r: 0.0 for r in settings}
    recompute = {r: 0.0 for r in settings}
    for round_ in range(rounds + 2):  # two warm-up rounds: the optimizer's state is made
        for ratio in settings:
            budget = None if ratio is None else int(ratio * peak)
            runtime = md.Runtime(
                budget=budget, cost="flops", max_wall_slowdown=None, heuristic=heuristic
            )
            with runtime:
                clock.seconds = 0.0
                started = time.perf_counter()
                train_step(task, optimizer, next(batches))
                elapsed = time.perf_counter() - started
            if round_ >= 2:
                stats = runtime.stats()
                times[ratio].append(elapsed)
                kernels[ratio].append(clock.seconds)
                compute[ratio] += stats["compute_cost"]
                recompute[ratio] += stats["remat_cost"]
    base = statistics.median(times[None])
    rows = []
    for r in ratios:
        step = statistics.median(times[r])
        own = step - base - statistics.median(kernels[r])
        cost = (compute[r] + recompute[r]) / compute[r]
        rows.append((r, step / base, cost, own, own / step))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    parser.add_argument("--ratios", type=ratios, default=[0.5, 0.3])
    parser.add_argument("--rounds", type=whole_number(1), default=9, help="timed steps per setting")
    parser.add_argument("--heuristic", default="dtr", choices=HEURISTIC_NAMES)
    parser.add_argument(
        "--default-malloc", action="store_true", help="leave glibc's thresholds as they are"
    )
    args = parser.parse_args(argv)
    memory = "malloc as is" if args.default_malloc else steady_malloc()
    print(
        f"median of {args.rounds} steps per setting, interleaved; one thread;"
        f" budgeted runs under {args.heuristic}; {memory}"
    )
    print(
        "| model | ratio | wall slowdown | cost-model slowdown | wall / cost model"
        " | the policy's own time a step |"
    )
    print("|---|---|---|---|---|---|")
    for model in args.models:
        with multiprocessing.get_context("spawn").Pool(1, interrupts.quiet_worker) as pool:
            task = (model, args.ratios, args.rounds, args.heuristic, not args.default_malloc)
            rows = pool.apply(measure, task)
        for ratio, wall, cost, own, share in rows:
            print(
                f"| {model} | {ratio} | {wall:.3f} | {cost:.3f} | {wall / cost:.3f}"
                f" | {own * 1e3:.1f} ms ({share:.0%}) |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
