"""Check every table-based eviction decision against the reference loop.

``checked_decisions()`` wraps ``fast.search.TableSearch.choose`` so that each decision
is made twice, by the table and by ``victims.choose_victim`` on the same pool (the
sampler rewound in between), and asserts that both give the same victim, score,
shortlist and count of candidates scored, float for float, and, when events are
recorded, the same runner-up (without events the table finds none: nothing reads it); and
``window.cheapest_window`` (the window heuristic's decision from the arena's arrays,
fast/addresses.py), whose arrays must say what the arena says and whose window must be
the readable slide's, with the same cost and count of values costed. The whole suite
runs this way with ``MINIDTR_CHECK_DECISIONS=1 python -m pytest`` (tests/conftest.py);
each search then takes the loop's time as well, so a test that runs close to the
wall-clock thrash guard (``max_wall_slowdown``) may trip it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from minidtr.runtime import window
from minidtr.runtime.arena import shortest_runs_cheapest
from minidtr.runtime.estar import WalkedNeighbourhood
from minidtr.runtime.fast.search import TableSearch
from minidtr.runtime.heuristics import ScoreContext
from minidtr.runtime.victims import Choice, choose_victim, pool, pool_settings

DECISIONS = {"checked": 0}


def _same(fast: Choice, slow: Choice, recording: bool) -> bool:
    """The same decision; the runner-up too when events are recorded (without them the
    table does not look for one: nothing reads it)."""
    return (
        fast.victim is slow.victim
        and type(fast.score) is type(slow.score)
        and (fast.score == slow.score or fast.score != fast.score)  # NaN only through the loop
        and (fast.runner_up == slow.runner_up if recording else fast.runner_up is None)
        and fast.shortlist == slow.shortlist
        and fast.scored == slow.scored
    )


@contextlib.contextmanager
def checked_decisions() -> Iterator[dict[str, int]]:
    original = TableSearch.choose

    def choose(self, runtime, whole=False):
        eviction = self.eviction
        state = eviction.sampler.getstate()
        fast = original(self, runtime, whole)
        after = eviction.sampler.getstate()
        eviction.sampler.setstate(state)
        pooled = pool(list(self.table), *pool_settings(runtime, whole), eviction.sampler)
        # e* and the evicted ancestors walked (the reference's terms), not read from the
        # accelerator's cached closures: scoring every candidate through them would build
        # them all, and a run checked so would no longer be the run unchecked (a stale
        # closure the table relies on would be made valid behind its back)
        context = ScoreContext(eviction.allocator.clock, WalkedNeighbourhood(), eviction.eq_classes)
        eviction.scoring = True
        try:
            slow = choose_victim(pooled, runtime.heuristic, context, runtime.events is not None)
        finally:
            eviction.scoring = False
        assert eviction.sampler.getstate() == after, "the table and the loop sampled differently"
        assert _same(fast, slow, runtime.events is not None), (
            f"table chose {fast}, the reference loop {slow}"
        )
        DECISIONS["checked"] += 1
        return fast

    original_window = window.cheapest_window

    def cheapest_window(fit, heuristic, need, costs_of):
        fast_costs, fast_run = original_window(fit, heuristic, need, costs_of)
        eviction = fit.allocator.eviction
        columns = fit.allocator.fast.columns
        if columns is not None and columns.arena is fit.arena:  # else the few blocks walked
            columns.check(eviction.candidates)
        slow_costs = costs_of(list(fit.arena.blocks()), heuristic, eviction.context)
        eviction.scoring = True
        try:
            once = slow_costs.run_cost if getattr(heuristic, "once", False) else None
            sizes, upper = slow_costs.sizes(), slow_costs.upper_costs()
            slow_run = shortest_runs_cheapest(sizes, upper, need, once)
        finally:
            eviction.scoring = False
        assert fast_run == slow_run, f"the arrays chose {fast_run}, the readable slide {slow_run}"
        assert fast_costs.costed == slow_costs.costed, (fast_costs.costed, slow_costs.costed)
        DECISIONS["checked"] += 1
        DECISIONS["windows"] = DECISIONS.get("windows", 0) + 1
        return fast_costs, fast_run

    TableSearch.choose = choose
    window.cheapest_window = cheapest_window
    try:
        yield DECISIONS
    finally:
        TableSearch.choose = original
        window.cheapest_window = original_window
