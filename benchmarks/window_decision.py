"""How long the window heuristic's decision takes at 10^4 blocks (docs/memory.md).

    python benchmarks/window_decision.py [--blocks 10000] [--rounds 20]

An arena cut into ``--blocks`` blocks of 1 to 8 alignments, a fifth of them free, a
twentieth walls (blocks that cannot be freed), every used block a random cost; a
request of 16 alignments. Times, in microseconds per decision (the minimum over
rounds, this thread's processor time):

- *gather*: walking the blocks in address order and asking each used one its cost
  (here a dictionary read standing for ``WindowHeuristic.window_cost``), as
  ``window.window_victims`` does before either slide;
- *readable slide*: ``arena.shortest_runs_cheapest`` on those lists (the reference);
- *accelerated slide*: ``fast.windows.cheapest_run`` on the same as arrays, the
  conversion to arrays included (what ``window_victims`` does today), and with the
  arrays given (what it would cost if the arena kept its sizes and costs as arrays);
- *whole, readable*: ``Arena.cheapest_window`` (gather and readable slide).

The costs here add up (each value with its own e*); the window heuristic counts a
shared e* once, which adds, for the runs near the cheapest, a walk of their values'
evicted neighbourhoods (``window.WindowCosts``), not timed here. The issue's bound for
a decision is 50 us at 10^4 candidates.
"""

from __future__ import annotations

import argparse
import math
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

from minidtr.runtime.arena import ALIGNMENT, Arena, shortest_runs_cheapest
from minidtr.runtime.fast.windows import cheapest_run


def arena_of(blocks: int, seed: int = 0) -> tuple[Arena, dict[int, float]]:
    """An arena of about ``blocks`` blocks and each used block's cost by its start."""
    rng = np.random.default_rng(seed)
    sizes = (rng.integers(1, 9, blocks) * ALIGNMENT).tolist()
    arena = Arena(sum(sizes))
    placed = [arena.place(size) for size in sizes]
    for block in placed:
        if rng.random() < 0.2:
            arena.free(block)
    costs = {}
    for block in arena.blocks():
        if not block.free:
            costs[block.start] = math.inf if rng.random() < 0.05 else float(rng.random())
    return arena, costs


def best_of(rounds: int, work) -> float:
    """The least processor time of ``work()`` over ``rounds``, in microseconds."""
    best = math.inf
    for _ in range(rounds):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    arena, by_start = arena_of(args.blocks)
    need = 16 * ALIGNMENT

    def cost(block) -> float:
        return by_start[block.start]

    def gather() -> tuple[list, list]:
        blocks = list(arena.blocks())
        return blocks, [0.0 if b.free else cost(b) for b in blocks]

    blocks, costs = gather()
    sizes = [b.size for b in blocks]
    size_array, cost_array = np.array(sizes, np.int64), np.array(costs)
    readable = shortest_runs_cheapest(sizes, costs, need)
    fast = cheapest_run(np.array(sizes, np.int64), np.array(costs), need)
    assert readable == fast, (readable, fast)
    rows = {
        "gather": best_of(args.rounds, gather),
        "readable slide": best_of(args.rounds, lambda: shortest_runs_cheapest(sizes, costs, need)),
        "accelerated slide": best_of(
            args.rounds, lambda: cheapest_run(np.array(sizes, np.int64), np.array(costs), need)
        ),
        "accelerated slide, arrays given": best_of(
            args.rounds, lambda: cheapest_run(size_array, cost_array, need)
        ),
        "whole, readable": best_of(args.rounds, lambda: arena.cheapest_window(need, cost)),
    }
    print(f"{len(blocks):,} blocks, a request of {need:,} B: microseconds per decision\n")
    print("| part | us |\n|---|---|")
    for name, us in rows.items():
        print(f"| {name} | {us:,.0f} |")


if __name__ == "__main__":
    main()
