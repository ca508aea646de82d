"""How long the window heuristic's decision takes at 10^4 blocks (docs/memory.md).

    python benchmarks/window_decision.py [--blocks 10000] [--rounds 20]

A budgeted runtime under ``fit="contiguous"`` holds about ``--blocks`` blocks, the
arena nearly full: values of 1 to 8 alignments (tanh of a product of a constant, which
is a temporary: evicted when it dies, so every value has an evicted parent in its e*),
a sixth of them dropped as they are made (their blocks freed and merged with free
neighbours: a quarter more values are made than blocks asked for), a twentieth
constants (walls no window crosses), and a constant filling what the values left free
at the top of the arena. Then ``window.window_victims`` decides which
window to evict for a request one alignment larger than the largest free block (as at
a placement failure), without evicting it. Times in microseconds per decision, the
minimum over ``--rounds`` decisions of this thread's processor time (a repeated
decision finds nothing changed since the last one: the decision's floor, as the
eviction-decision table of docs/performance.md measures h_DTR's), for the window
heuristic as it is (``window``: a storage in the e* of several values of a window
counted once) and with e* counted per value (``WindowHeuristic(once=False)``: a
window's cost is a sum), each:

- *accelerated*: the blocks as arrays kept by the arena, each block's cost read from
  the candidate table's columns, the slide by array operations (``fast/addresses.py``,
  ``fast/windows.py``), and with e* counted once the exact cost of each run that its
  bounds cannot rule out (``window.WindowCosts.run_cost``, in Python);
- *reference*: ``Runtime(reference=True)`` on the same arena, rebuilt: every block
  walked in Python, each value asked its cost, and the readable two-ended slide
  (``arena.shortest_runs_cheapest``), with e* counted once the exact cost of every run.

and, once: *the slide alone* (``fast.windows.cheapest_run_at`` on the arrays, random
costs) and *NumPy's floor*, one ``np.interp`` and one ``np.cumsum`` over as many
blocks, the two passes the slide cannot do without. Both policies choose the same
window (checked here, and in tests/test_window.py on every decision of random
programs). The goal for a decision is 50 us at 10^4 blocks, what h_DTR's take at 10^4
candidates (docs/performance.md).
"""

from __future__ import annotations

import argparse
import math
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

import minidtr as md
from minidtr.cli_args import whole_number
from minidtr.runtime.arena import ALIGNMENT
from minidtr.runtime.fast.addresses import ARRAY_BLOCKS
from minidtr.runtime.fast.windows import cheapest_run_at
from minidtr.runtime.heuristics import WindowHeuristic
from minidtr.runtime.window import window_victims
from minidtr.testing import isolated_allocator


def best_of(rounds: int, work) -> float:
    """The least processor time of ``work()`` over ``rounds``, in microseconds."""
    best = math.inf
    for _ in range(rounds):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best * 1e6


def filled_runtime(blocks: int, once: bool, reference: bool, seed: int = 0):
    """A runtime (entered) whose arena holds about ``blocks`` blocks, and what keeps them."""
    rng = np.random.default_rng(seed)
    units = rng.integers(1, 9, blocks * 5 // 4).tolist()
    draws = rng.random(len(units)).tolist()
    bases = {k: md.tensor(np.full(k * ALIGNMENT // 4, 0.5, np.float32)) for k in range(1, 9)}
    kept_units = sum(k for k, draw in zip(units, draws, strict=True) if draw >= 0.2)
    # the values kept, the bases, and a tenth more: holes too small to be used again
    budget = (kept_units * 11 // 10 + 36 + 16) * ALIGNMENT
    runtime = md.Runtime(
        budget=budget, heuristic=WindowHeuristic(once), fit="contiguous", placement="best",
        cost="flops", reference=reference, max_slowdown=None, max_wall_slowdown=None,
    )  # fmt: skip
    runtime.__enter__()
    kept = []
    for i, (k, draw) in enumerate(zip(units, draws, strict=True)):
        if draw < 0.05:
            kept.append(md.tensor(np.full(k * ALIGNMENT // 4, float(i), np.float32)))
        elif draw < 0.2:
            md.tanh(bases[k] * float(i))  # dropped at once: its block is freed
        else:
            kept.append(md.tanh(bases[k] * float(i)))
    top = runtime.allocator.addresses.arena.largest_free()  # the free space at the top
    kept.append(md.tensor(np.zeros(top // 4, np.float32)))  # a wall there: holes are left
    return runtime, kept


def decide(runtime) -> list:
    """The window's values, for a request no free block holds."""
    fit = runtime.allocator.addresses
    need = fit.arena.largest_free() + ALIGNMENT
    return window_victims(fit, runtime.heuristic, need)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--blocks",
        type=whole_number(ARRAY_BLOCKS),
        default=10_000,
        help=f"at least {ARRAY_BLOCKS}: with fewer the arena keeps no arrays to accelerate",
    )
    parser.add_argument("--rounds", type=whole_number(1), default=20)
    args = parser.parse_args()
    rows: dict[str, float] = {}
    for once in (True, False):
        name = "window" if once else "window, e* per value"
        chosen = {}
        for reference in (False, True):
            with isolated_allocator():
                runtime, kept = filled_runtime(args.blocks, once, reference)
                try:
                    chosen[reference] = [(s.id, c.score) for s, c in decide(runtime)]
                    rounds = 3 if reference else args.rounds  # the reference takes long
                    what = "reference" if reference else "accelerated"
                    rows[f"{name}: {what}"] = best_of(rounds, lambda rt=runtime: decide(rt))
                    if not reference and once:
                        bounds = runtime.allocator.fast.columns.block_bounds().copy()
                        need = runtime.allocator.addresses.arena.largest_free() + ALIGNMENT
                        count = len(bounds) - 1
                finally:
                    runtime.__exit__(None, None, None)
                    del kept
        assert chosen[False] == chosen[True], (name, chosen)
    costs = np.random.default_rng(1).random(count)
    points = np.arange(count + 1, dtype=np.float64)
    rows["the slide alone (random costs)"] = best_of(
        args.rounds, lambda: cheapest_run_at(bounds, costs, need)
    )
    rows["NumPy's floor (interp + cumsum)"] = best_of(
        args.rounds, lambda: (np.interp(bounds[:count] + need, bounds, points), np.cumsum(costs))
    )
    print(f"{count:,} blocks, a request of {need:,} B: microseconds per decision\n")
    print("| decision | us |\n|---|---|")
    for name, us in rows.items():
        print(f"| {name} | {us:,.0f} |")


if __name__ == "__main__":
    main()
