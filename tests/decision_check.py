"""Check every table-based eviction decision against the reference loop.

``checked_decisions()`` wraps ``fast.search.TableSearch.choose`` so that each decision
is made twice, by the table and by ``victims.choose_victim`` on the same pool (the
sampler rewound in between), and asserts that both give the same victim, score,
runner-up, shortlist and count of candidates scored, float for float. The whole suite
runs this way with ``MINIDTR_CHECK_DECISIONS=1 python -m pytest`` (tests/conftest.py);
each search then takes the loop's time as well, so a test that runs close to the
wall-clock thrash guard (``max_wall_slowdown``) may trip it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from minidtr.runtime.fast.search import TableSearch
from minidtr.runtime.victims import Choice, choose_victim, pool

DECISIONS = {"checked": 0}


def _same(fast: Choice, slow: Choice) -> bool:
    return (
        fast.victim is slow.victim
        and type(fast.score) is type(slow.score)
        and (fast.score == slow.score or fast.score != fast.score)  # NaN only through the loop
        and fast.runner_up == slow.runner_up
        and fast.shortlist == slow.shortlist
        and fast.scored == slow.scored
    )


@contextlib.contextmanager
def checked_decisions() -> Iterator[dict[str, int]]:
    original = TableSearch.choose

    def choose(self, runtime):
        eviction = self.eviction
        state = eviction.sampler.getstate()
        fast = original(self, runtime)
        after = eviction.sampler.getstate()
        eviction.sampler.setstate(state)
        pooled = pool(list(self.table), runtime.min_size, runtime.sample, eviction.sampler)
        eviction.scoring = True
        try:
            slow = choose_victim(
                pooled, runtime.heuristic, eviction.context, runtime.events is not None
            )
        finally:
            eviction.scoring = False
        assert eviction.sampler.getstate() == after, "the table and the loop sampled differently"
        assert _same(fast, slow), f"table chose {fast}, the reference loop {slow}"
        DECISIONS["checked"] += 1
        return fast

    TableSearch.choose = choose
    try:
        yield DECISIONS
    finally:
        TableSearch.choose = original
