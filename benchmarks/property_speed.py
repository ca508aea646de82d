"""How fast a property test runs, what the audit costs, and what entering a budget costs.

    python benchmarks/property_speed.py [--examples N] [--torch]

- examples/s: a hypothesis property test on a small MLP (docs/testing.md's model at depth 2,
  width 8, batch 32, two SGD steps with momentum and dropout) under 4 configurations
  (budgets 0.85 and 0.95 of the unbounded peak, above its floor of 0.83 for lru; then a
  budget drawn from 0.5-0.95 and 0.95, with examples below the floor rejected; x
  heuristics dtr and lru), as ``assert_remat_equivalent`` runs it by default (audited)
  and with ``audit=False``: examples (rejected ones included) per processor second.
- the audit's cost: processor time of one run of each of a few programs with
  ``Runtime(audit=True)`` over the time without, unbounded and under a budget.
- entering a budgeted runtime with live values: the time ``with md.Runtime(budget=...)``
  takes on entry, next to a full ``gc.collect()`` of the same process (with --torch,
  after importing PyTorch, whose objects make the heap large). Entering collects the
  garbage that may hold values: the young generations only while the allocator's values
  are all young (a fresh allocator, as each run of ``assert_remat_equivalent`` has), the
  whole heap once the cycle collector has collected its older generations since the
  allocator was made, as it does on its own in a long run: both are measured.

Times are processor times (``time.process_time``): steadier than wall time on a shared
machine, still the machine's own.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from minidtr.cli_args import whole_number


def small_mlp(seed: int, depth: int = 2, width: int = 8, batch: int = 32):
    import numpy as np

    import minidtr as md

    def run():
        md.manual_seed(seed)
        layers = []
        for i in range(depth):
            layers += [md.nn.Linear(8 if i == 0 else width, width), md.nn.Tanh()]
            layers.append(md.nn.Dropout(0.1))
        model = md.nn.Sequential(*layers, md.nn.Linear(width, 3))
        opt = md.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.default_rng(seed)
        x = md.tensor(rng.standard_normal((batch, 8)), dtype=md.float32)
        y = md.tensor(rng.integers(0, 3, batch))
        losses = []
        for _ in range(2):
            loss = md.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        return losses, model.parameters()

    return run


def examples_per_second(examples: int, audit: bool, drawn: bool = False) -> float:
    """Examples per processor second of the property test (after a first run that pays
    hypothesis's imports). ``drawn``: the first budget is drawn from 0.5-0.95 of the peak
    instead (some below the floor: those examples are rejected, on_budget_error="skip")."""
    import inspect

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from minidtr.testing import assert_remat_equivalent
    from minidtr.testing.strategies import budget_ratios

    # older minidtr versions (to compare) have no audit
    options = (
        {"audit": audit} if "audit" in inspect.signature(assert_remat_equivalent).parameters else {}
    )
    calls = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(seed=st.integers(0, 10_000), ratio=budget_ratios(0.5, 0.95))
    def property_test(seed, ratio):
        calls.append(seed)
        budgets = [ratio, 0.95] if drawn else [0.85, 0.95]
        assert_remat_equivalent(
            small_mlp(seed),
            budgets=budgets,
            heuristics=["dtr", "lru"],
            on_budget_error="skip",
            **options,
        )

    property_test()  # once first: hypothesis imports much on its first run
    calls.clear()
    started = time.process_time()
    property_test()
    return len(calls) / (time.process_time() - started)


def run_time(fn, audit: bool, budget: int | None, repeat: int) -> float:
    import minidtr as md
    from minidtr.testing import run_under

    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        run_under(fn, md.Runtime(budget=budget, cost="flops", audit=audit))
        best = min(best, time.process_time() - started)
    return best


def audit_costs(repeat: int) -> list[str]:
    from minidtr.testing.programs import lstm_unrolled, mlp_training, random_tree

    programs = {
        "small MLP (above)": small_mlp(0),
        "mlp_training(depth=4, width=64)": mlp_training(depth=4, width=64, batch=64, seed=0),
        "lstm_unrolled(length=8)": lstm_unrolled(length=8, seed=0),
        "random_tree(leaves=8)": random_tree(leaves=8, seed=0),
    }
    from minidtr.testing import budget_floor

    head = "| program | unbounded | budget halfway between its floor and its peak |"
    rows = [head, "|---|---|---|"]
    for name, fn in programs.items():
        floor = budget_floor(fn, "dtr")
        cells = []
        for budget in (None, (floor.minimal + floor.peak) // 2):
            off = run_time(fn, False, budget, repeat)
            on = run_time(fn, True, budget, repeat)
            cells.append(f"{on * 1e3:.1f} ms vs {off * 1e3:.1f} ms ({on / off:.2f}x)")
        rows.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return rows


def entry_time(older: bool = False) -> tuple[float, float, int]:
    """The best of five entries, a full collection's time and the number of objects.
    ``older``: the cycle collector has collected its older generations since the allocator
    was made (as it does on its own in a long run), so that entering collects the whole
    heap (``Lifetimes.collect_garbage``) rather than the young generations only."""
    import minidtr as md
    from minidtr.testing import isolated_allocator

    gc.collect()
    started = time.process_time()
    gc.collect()
    full = time.process_time() - started
    entries = []
    for _ in range(5):
        gc.collect()
        with isolated_allocator() as allocator:
            md.manual_seed(0)
            model = md.nn.Sequential(md.nn.Linear(16, 32), md.nn.Tanh(), md.nn.Linear(32, 4))
            x = md.randn((8, 16))
            model(x).sum().backward()
            if older:
                gc.collect(1)
            runtime = md.Runtime(budget=allocator.memory + 10_000)
            started = time.process_time()
            with runtime:
                entries.append(time.process_time() - started)
    return min(entries), full, len(gc.get_objects())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--examples", type=whole_number(1), default=200, help="examples per measurement"
    )
    parser.add_argument(
        "--repeat", type=whole_number(1), default=5, help="runs per audit-cost cell (best)"
    )
    parser.add_argument("--torch", action="store_true", help="import PyTorch first")
    args = parser.parse_args()
    if args.torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            parser.error("--torch: PyTorch is not installed (pip install torch)")
    import minidtr  # noqa: F401

    print(f"property test, small MLP x 4 configurations, {args.examples} examples:")
    for drawn in (False, True):
        audited = examples_per_second(args.examples, audit=True, drawn=drawn)
        plain = examples_per_second(args.examples, audit=False, drawn=drawn)
        what = "a budget drawn from 0.5-0.95, 0.95" if drawn else "budgets 0.85, 0.95"
        print(f"  {what}: {audited:.1f} examples/s audited (the default), {plain:.1f} not")
    print("the audit's cost, one run (processor time, audited vs not):")
    print("\n".join(audit_costs(args.repeat)))
    entry, full, objects = entry_time()
    later, _, _ = entry_time(older=True)
    loaded = "with PyTorch loaded" if "torch" in sys.modules else "without PyTorch"
    print(f"entering a budgeted runtime with live values ({loaded}, {objects:,} objects):")
    print(f"  {entry * 1e3:.2f} ms (a full gc.collect() takes {full * 1e3:.1f} ms)")
    print(f"  {later * 1e3:.2f} ms once an older generation was collected (then all of it is)")


if __name__ == "__main__":
    main()
