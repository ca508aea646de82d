"""Where minidtr's time goes, next to PyTorch (CPU) and NumPy, in one table.

    python benchmarks/performance.py [--quick]

1. Per-op forward on 1-element float32 tensors (chains of ops; shorter with --quick): add,
   tanh, and mul by a Python scalar (``y * 0.5``) and by a tensor holding the same value,
   with autograd off and on; minidtr unbudgeted, minidtr under a generous budget (nothing
   evicted), PyTorch, NumPy. Backward per node through the same chains. Then the scalar
   operand's cost as a ratio to the tensor operand's (target: at most 1.25), and the
   time to enter a budgeted runtime with live values (target: 5 ms; with PyTorch loaded
   where it is installed, as ``benchmarks/property_speed.py --torch`` measures it).
2. Training steps: the small ResNet-32 of ``minidtr train resnet`` (with the share of the
   step spent in op kernels; the rest is bookkeeping), and the wide MLP of
   benchmarks/overhead_mlp.py against hand-written NumPy and PyTorch.
3. One eviction decision (``Eviction.choose_victim``) with 10^2 .. 10^5 candidates, per
   heuristic, in a graph where no candidate borders an evicted storage, in one where
   every candidate does, and in the same one right after an eviction and a rebuild, next
   to the reference loop (``--decisions`` runs only this).

Every figure of 1. and 2. is a median over interleaved rounds (min and max in brackets
where it helps), so that load on the machine affects the contenders alike; 3. gives the
minimum over rounds. Targets are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import statistics
import time
from collections.abc import Callable

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

import minidtr as md
from minidtr.runtime import registry
from minidtr.runtime.allocator import Allocator
from minidtr.runtime.registry import allocator_for
from minidtr.runtime.victims import choose_victim, pool

HAS_TORCH = importlib.util.find_spec("torch") is not None


def rounds_of(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each case, interleaved round by round (``fn.setup`` and
    ``fn.teardown`` untimed)."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            setup = getattr(fn, "setup", None)
            if setup is not None:
                setup()
            gc.collect()
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
            teardown = getattr(fn, "teardown", None)
            if teardown is not None:
                teardown()
    return times


# ---- 1. per-op cost ------------------------------------------------------------------------


def chain(start, step: Callable, n: int) -> Callable[[], object]:
    def run():
        y = start
        for _ in range(n):
            y = step(y)
        return y

    return run


def backward_of(build: Callable[[], object], backward: Callable[[object], None]):
    state = {}

    def run():
        backward(state.pop("y"))

    run.setup = lambda: state.__setitem__("y", build())
    return run


def per_op(n: int, rounds: int) -> None:
    one = np.ones(1, np.float32)
    half = np.float32(0.5)
    steps = {
        "add": (lambda y: y + one_md, lambda y: y + one_t, lambda y: y + one),
        "tanh": (md.tanh, None, np.tanh),
        # a Python scalar operand (ops/scalar.py), against the same op with a tensor operand
        "mul 0.5": (lambda y: y * 0.5, lambda y: y * 0.5, lambda y: y * half),
        "mul tensor": (lambda y: y * half_md, lambda y: y * half_t, lambda y: y * halves),
    }
    one_md = md.tensor(one)
    halves = np.full(1, 0.5, np.float32)
    half_md = md.tensor(halves)
    cases: dict[str, Callable[[], object]] = {}
    if HAS_TORCH:
        import torch

        torch.set_num_threads(1)
        one_t = torch.ones(1)
        half_t = torch.full((1,), 0.5)
        steps["tanh"] = (md.tanh, torch.tanh, np.tanh)
    budget = md.Runtime(budget=1 << 40)  # generous: nothing is evicted
    for op, (step_md, step_t, step_np) in steps.items():
        for grad in (False, True):
            label = "grad" if grad else "no grad"
            start = md.tensor(one, requires_grad=grad)
            cases[f"{op} {label}|minidtr"] = chain(start, step_md, n)
            cases[f"{op} {label}|minidtr, budget"] = _inside(budget, chain(start, step_md, n))
            if HAS_TORCH:
                t_start = torch.ones(1, requires_grad=grad)
                cases[f"{op} {label}|torch"] = chain(t_start, step_t, n)
            if not grad:
                cases[f"{op} {label}|numpy"] = chain(one, step_np, n)
        start = md.tensor(one, requires_grad=True)
        cases[f"{op} backward|minidtr"] = backward_of(
            chain(start, step_md, n), lambda y: y.backward()
        )
        if HAS_TORCH:
            t_start = torch.ones(1, requires_grad=True)
            cases[f"{op} backward|torch"] = backward_of(
                chain(t_start, step_t, n), lambda y: y.backward()
            )
    times = rounds_of(cases, rounds)
    rows: dict[str, dict[str, float]] = {}
    for key, values in times.items():
        row, who = key.split("|")
        rows.setdefault(row, {})[who] = statistics.median(values) / n * 1e6
    whos = ["minidtr", "minidtr, budget", "torch", "numpy"]
    print(f"\n1. Per op on 1-element float32 tensors (chains of {n}, {rounds} rounds), us/op")
    print(f"{'':20}" + "".join(f"{w:>17}" for w in whos) + f"{'minidtr/torch':>15}")
    for row, by in rows.items():
        cells = "".join(f"{by[w]:17.2f}" if w in by else f"{'-':>17}" for w in whos)
        ratio = f"{by['minidtr'] / by['torch']:14.1f}x" if "torch" in by else f"{'-':>15}"
        print(f"{row:20}{cells}{ratio}")
    ratios = [
        f"{what} {rows[f'mul 0.5 {what}']['minidtr'] / rows[f'mul tensor {what}']['minidtr']:.2f}"
        for what in ("no grad", "grad", "backward")
    ]
    print(f"a scalar operand against a tensor one (mul 0.5 / mul tensor): {', '.join(ratios)}")
    print("target: at most 1.25")


def runtime_entry() -> None:
    """Entering a budgeted runtime with live values: ``property_speed``'s measurement."""
    from property_speed import entry_time

    entry, full, objects = entry_time()
    later, _, _ = entry_time(older=True)
    loaded = "PyTorch loaded" if HAS_TORCH else "no PyTorch"
    print(f"\n1b. Entering a budgeted runtime with live values ({loaded}, {objects:,} objects)")
    print(f"{entry * 1e3:.2f} ms, best of five (a full gc.collect() takes {full * 1e3:.1f} ms)")
    print(f"{later * 1e3:.2f} ms once an older generation was collected (then all of it is)")
    print("target: at most 5 ms")


def _inside(runtime: md.Runtime, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` timed inside ``runtime``, entered and left outside the timing: entering a
    budgeted runtime collects garbage once (see ``Allocator.push``), a cost per ``with``,
    not per op."""

    def run():
        return fn()

    run.setup = runtime.__enter__
    run.teardown = lambda: runtime.__exit__(None, None, None)
    return run


# ---- 2. training steps ------------------------------------------------------------------------


def resnet_step(rounds: int) -> None:
    from minidtr.models.tasks import make_task
    from minidtr.training import train_step

    task = make_task("resnet", "small", 0)
    optimizer = task.make_optimizer(task.model.parameters())
    rng = np.random.default_rng(0)
    allocator = allocator_for("cpu")
    kernel_time = [0.0]
    ops = [0]
    original = Allocator.run_kernel  # every kernel of an op runs through it

    def timed_run(self, op, device, arrays, metas):
        started = time.perf_counter()
        try:
            return original(self, op, device, arrays, metas)
        finally:
            kernel_time[0] += time.perf_counter() - started
            ops[0] += 1

    steps, kernels = [], []
    for i in range(rounds + 1):
        idx = rng.choice(task.n_train, task.batch_size, replace=False)
        kernel_time[0], ops[0] = 0.0, 0
        Allocator.run_kernel = timed_run
        try:
            started = time.perf_counter()
            train_step(task, optimizer, idx)
            elapsed = time.perf_counter() - started
        finally:
            Allocator.run_kernel = original
        if i:  # the first step creates the optimizer state
            steps.append(elapsed)
            kernels.append(kernel_time[0])
    del allocator
    step, kernel = statistics.median(steps), statistics.median(kernels)
    print(f"\n2a. ResNet-32 small (batch {task.batch_size}) training step, {rounds} rounds")
    print(
        f"step {step * 1e3:.0f} ms (min {min(steps) * 1e3:.0f}, max {max(steps) * 1e3:.0f}); "
        f"in op kernels {kernel * 1e3:.0f} ms; bookkeeping {100 * (1 - kernel / step):.0f}% "
        f"of the step; {ops[0]} ops per step"
    )


def wide_mlp(rounds: int) -> None:
    from overhead_mlp import wide_mlp as run

    print("\n2b.", end="")
    run([1024, 2048, 2048, 2048, 1024], 256, rounds)


# ---- 3. eviction decisions ------------------------------------------------------------------


def eviction_decision(counts: list[int], heuristics: list[str], rounds: int) -> None:
    """Time one victim search (``Eviction.choose_victim``, min over ``rounds``) among ``n``
    evictable storages, on an allocator of its own, in three graphs:

    - *fan*: the outputs of ``n`` ops on one constant, all resident: no candidate has an
      evicted neighbour, so every score is one array expression;
    - *chain*: a chain of ``2n`` ops with every other output evicted: every candidate has
      evicted neighbours, whose costs the table keeps per candidate (recomputed only for
      those next to a change);
    - *churn*: the same chain, where before each timed decision one evicted storage is
      rebuilt and evicted again (untimed), so that each decision recomputes what an
      eviction and a rematerialization change, as decisions in a run do.

    ``loop`` is the reference loop (one ``score`` call per candidate, what every search did
    before the candidate table) with dtr_eq, for comparison."""

    columns = [*heuristics, "loop"]
    print(f"\n3. One eviction decision (min of {rounds}), us")
    print(f"{'graph':>6}{'candidates':>11}" + "".join(f"{h:>10}" for h in columns))
    saved = registry.installed()
    try:
        for graph in ("fan", "chain", "churn"):
            for n in counts:
                allocator = Allocator("cpu")
                registry.install("cpu", allocator)
                keep = _decision_graph(allocator, graph, n)
                evicted = keep[1::2] if graph == "churn" else []
                cells = []
                listed = 0  # the table is kept only under a budget: counted inside one
                for h in columns:
                    if h == "loop" and (n > 10_000 or graph == "churn"):
                        cells.append("")
                        continue
                    heuristic = "dtr_eq" if h == "loop" else h
                    with md.Runtime(budget=1 << 40, heuristic=heuristic, cost="flops"):
                        eviction = allocator.eviction
                        choose = eviction.choose_victim
                        if h == "loop":

                            def choose(eviction=eviction):
                                heuristic = eviction.allocator.runtime.heuristic
                                pooled = pool(eviction.candidates, 0.0, False, eviction.sampler)
                                return choose_victim(pooled, heuristic, eviction.context, False)

                        allocator.clock += 1.0
                        listed = len(eviction.candidates)
                        choose()  # builds whatever the heuristic caches
                        times = []
                        for i in range(rounds if n <= 10_000 else max(1, rounds // 3)):
                            if evicted:  # rebuild one, evict it again: untimed
                                cell = evicted[(i * 7919) % len(evicted)].cell
                                allocator.read(cell)
                                allocator.evict(cell.storage)
                            started = time.perf_counter()
                            choose()
                            times.append(time.perf_counter() - started)
                    cells.append(f"{min(times) * 1e6:10.0f}")
                print(f"{graph:>6}{listed:>11}" + "".join(f"{c:>10}" for c in cells))
                del keep
    finally:
        registry.restore(saved)


def _decision_graph(allocator: Allocator, graph: str, n: int) -> list:
    """Referenced tensors making ``n`` candidates (see ``eviction_decision``)."""
    base = md.tensor(np.ones(4, np.float32))
    if graph == "fan":
        return [base, *(base * float(i) for i in range(n))]
    # chain and churn
    keep = [base]
    for _ in range(2 * n):
        keep.append(keep[-1] + 1.0)
    with md.Runtime(budget=1 << 40, heuristic="lru", cost="flops"):
        for t in keep[1::2]:
            allocator.evict(t.cell.storage)
    return keep


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds, smaller chains")
    p.add_argument("--decisions", action="store_true", help="only the eviction decisions (3.)")
    args = p.parse_args()
    n, rounds = (2000, 3) if args.quick else (10000, 7)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, NumPy {np.__version__}"
        + (f", torch {__import__('torch').__version__}" if HAS_TORCH else ", no torch")
    )
    if not args.decisions:
        per_op(n, rounds)
        runtime_entry()
        resnet_step(3 if args.quick else 5)
        wide_mlp(3 if args.quick else 10)
    eviction_decision(
        [100, 1000, 10_000] if args.quick else [100, 1000, 10_000, 100_000],
        ["dtr", "dtr_eq", "dtr_local", "msps", "lru", "size"],
        5 if args.quick else 15,
    )


if __name__ == "__main__":
    main()
