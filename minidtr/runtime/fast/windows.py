"""Accelerates ``Arena.cheapest_window``'s slide: the same window, by array operations.

The readable slide (``arena.py``) walks the blocks with two ends, one Python step per
block. Here, over the blocks in address order with their costs:

- ``bounds``, each block's start address and, last, the arena's end (the prefix sums
  of the sizes), so that the run ``[i, j)`` holds ``bounds[j] - bounds[i]`` bytes;
- each start's shortest run that holds the request, ``[i, j)`` with ``j`` the first
  index where ``bounds[j] >= bounds[i] + need`` (costs are never negative, so for a
  start its shortest run is its cheapest). ``np.interp`` finds them: its search starts
  from where the last one ended, so on these increasing queries it takes a third of
  ``searchsorted``'s time, and one comparison corrects its rounding;
- *walls* (blocks that cannot be freed, cost ``inf``) as segment breaks: a start's run
  is kept only if it ends at or before the first wall from that start on (``np.repeat``
  of the walls' indices over the segments before them);
- each kept run's cost from the prefix sums of the costs, ``P[j] - P[i]``.

At 10^4 blocks the interpolation and the one cumulative sum take some 30 us each on
the machine of docs/memory.md, NumPy's floor for this slide: the rest is a few
element-wise passes.

Prefix differences round differently from the readable slide's sums, so the cheapest
run is not taken from them directly: every run whose approximate cost is within the
sums' rounding error of the lowest gets its exact cost (``math.fsum`` of its costs, as
the readable slide computes each), and the lowest exact cost wins, the lowest address
among equals. Both slides thus choose the same window (tests/test_window.py checks it
on random arenas). The exact costs are few: near-ties only, unless one cost is huge (a
value used a moment ago has a staleness near zero and costs some 10^11): a prefix sum
carries the rounding error of its largest entry, so every run after it looks within
rounding of the lowest. Past ``NEAR_RUNS`` such runs the apparent cheapest is costed
exactly, every block that alone costs more becomes a wall (no run through it can win),
and the slide runs again on what is left, with the same run ends.

When a run's cost is not a sum (``run_cost``: the window heuristic counting a shared
neighbourhood once), the same runs are found the same way and two sums bound each
run's cost: ``costs`` (each value with its whole neighbourhood, never less) and
``lower`` (each value without it, never more). Only the runs whose lower bound is
within reach of the lowest upper bound get their exact cost, in the order of their
lower bounds, until the next lower bound passes the best exact cost found. A run's lower
bound also counts its first or last value's own neighbourhood, whichever is larger
(``own_neighbourhoods``): counted once, each storage of one value's neighbourhood is
still counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def cheapest_run(
    sizes: np.ndarray,
    costs: np.ndarray,
    need: int,
    run_cost: Callable[[int, int], float] | None = None,
    lower: np.ndarray | None = None,
) -> tuple[float, int, int] | None:
    """The cheapest run ``[first, end)`` of blocks whose ``sizes`` sum to at least ``need``
    with no ``inf`` among its ``costs``, as ``(exact cost, first, end)``; None when no run
    holds it. ``sizes`` and ``costs`` are in address order, costs >= 0. With ``run_cost``
    (and ``lower``), a run costs ``run_cost(first, end)``, between the sums of ``lower``
    and of ``costs`` over it (the module docstring)."""
    bounds = np.zeros(len(sizes) + 1, np.float64)
    np.cumsum(sizes, out=bounds[1:])
    return cheapest_run_at(bounds, costs, need, run_cost, lower)


def cheapest_run_at(
    bounds: np.ndarray,
    costs: np.ndarray,
    need: int,
    run_cost: Callable[[int, int], float] | None = None,
    lower: np.ndarray | None = None,
    reached: np.ndarray | None = None,
) -> tuple[float, int, int] | None:
    """``cheapest_run`` given the blocks' ``bounds`` (float64: each block's start, then the
    end of the last), as the arena's columns keep them (``fast/addresses.py``). More than
    ``NEAR_RUNS`` runs within rounding of the lowest: the costs are capped and the runs
    found again (``reached``, their ends, then given; the module docstring)."""
    capped = reached is not None
    reached = run_ends(bounds, need) if reached is None else reached
    runs = shortest_runs(bounds, costs, need, reached)
    if runs is None:
        return None
    starts, ends, cost_sums = runs
    upper = cost_sums[ends] - cost_sums[starts]
    n = len(costs)
    once = run_cost is not None and lower is not None
    if once:
        lower_sums = np.zeros(n + 1, np.float64)
        np.cumsum(lower, out=lower_sums[1:])
        extra = own_neighbourhoods(costs, lower)
        floor = lower_sums[ends] - lower_sums[starts]
        floor += np.maximum(extra[starts], extra[ends - 1])  # its first or last value's
        slack = 4 * (n + 1) * np.spacing(max(cost_sums[-1], lower_sums[-1]))
        near = np.flatnonzero(floor <= upper.min() + slack)  # the others cost more than one run
    else:
        slack = 2 * (n + 1) * np.spacing(cost_sums[-1])
        near = np.flatnonzero(upper <= upper.min() + slack)
    if len(near) > NEAR_RUNS and not capped:
        k = int(np.argmin(upper))
        first, end = int(starts[k]), int(ends[k])
        best = run_cost(first, end) if once else math.fsum(costs[first:end].tolist())
        bound = lower + extra if once else costs
        out = bound > best  # no run holding one of these costs as little as ``best``
        costs = np.where(out, np.inf, costs)
        lower = np.where(out, 0.0, lower) if once else None
        return cheapest_run_at(bounds, costs, need, run_cost, lower, reached)
    if not once:
        exact = [math.fsum(costs[starts[k] : ends[k]].tolist()) for k in near.tolist()]
        return lowest_run(exact, starts[near], ends[near])
    order = near[np.argsort(floor[near], kind="stable")]
    found: tuple[float, int, int] | None = None
    for k in order.tolist():
        if found is not None and floor[k] > found[0] + slack:
            break  # this run and the rest cost more than the best found
        first, end = int(starts[k]), int(ends[k])
        total = run_cost(first, end)
        if found is None or (total, first) < (found[0], found[1]):
            found = (total, first, end)
    return found


def own_neighbourhoods(costs: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """Each block's ``costs - lower`` (0 for a wall), less a millionth: what one value's
    neighbourhood adds to the sum of ``lower``, rounding errors included. A run counting
    a shared storage once still counts every storage of each of its values' once, so it
    costs at least the sum of ``lower`` plus the largest of these over its values."""
    extra = np.subtract(costs, lower, where=np.isfinite(costs), out=np.zeros(len(costs)))
    extra *= 1 - 1e-6
    return extra


def shortest_runs(
    bounds: np.ndarray, costs: np.ndarray, need: int, reached: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each start's shortest run holding ``need`` with no wall in it (``starts``, ``ends``,
    ascending starts) and the prefix sums of the costs, walls counted 0; None when none.
    ``reached``: ``run_ends(bounds, need)``, when known."""
    n = len(costs)
    if n == 0:
        return None
    walls = np.isinf(costs)
    ends = run_ends(bounds, need) if reached is None else reached
    usable = ends <= n
    wall_at = np.flatnonzero(walls)
    if len(wall_at):
        # the first wall at or after each block (n: none): a run [i, j) must have j <= it
        counts = np.diff(wall_at, prepend=-1, append=n - 1)
        usable &= ends <= np.repeat(np.append(wall_at, n), counts)
        usable &= ~walls
    starts = np.flatnonzero(usable)
    if not len(starts):
        return None
    cost_sums = np.zeros(n + 1, np.float64)
    np.cumsum(np.where(walls, 0.0, costs) if len(wall_at) else costs, out=cost_sums[1:])
    return starts, ends[starts], cost_sums


def run_ends(bounds: np.ndarray, need: int) -> np.ndarray:
    """For each block ``i``, the end ``j`` of the shortest run ``[i, j)`` that holds
    ``need`` bytes, walls or not (``len(bounds)`` or more: none)."""
    n = len(bounds) - 1
    reach = bounds[:n] + need  # a run from block i must reach this address
    found = np.interp(reach, bounds, positions(n + 1), right=n + 1)
    ends = np.ceil(found, out=found).astype(np.intp)
    # interp's fraction may round to 0 when a block is very large: one step forward then
    ends += bounds.take(ends, mode="clip") < reach
    return ends


NEAR_RUNS = 32  # runs to cost exactly beyond which the costs are capped first
_POSITIONS = np.arange(1024, dtype=np.float64)


def positions(n: int) -> np.ndarray:
    """0.0, 1.0, ..., n - 1 (a view of one shared array, grown as needed)."""
    global _POSITIONS
    if len(_POSITIONS) < n:
        _POSITIONS = np.arange(max(n, 2 * len(_POSITIONS)), dtype=np.float64)
    return _POSITIONS[:n]


def lowest_run(
    totals: list[float], starts: np.ndarray, ends: np.ndarray
) -> tuple[float, int, int] | None:
    """The lowest of ``totals``, the first (lowest start) among equals."""
    best: tuple[float, int, int] | None = None
    for total, first, end in zip(totals, starts.tolist(), ends.tolist(), strict=True):
        if best is None or total < best[0]:
            best = (total, first, end)
    return best
