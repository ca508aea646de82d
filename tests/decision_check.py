"""Check every table-based eviction decision against the reference loop.

``checked_decisions()`` wraps ``Eviction._choose_by_table`` so that each decision is
made twice, by the table and by ``_choose_by_loop`` on the same pool (the sampler
rewound in between), and asserts that both give the same victim, score, runner-up
and shortlist, float for float. The whole suite runs this way with
``MINIDTR_CHECK_DECISIONS=1 python -m pytest`` (tests/conftest.py); each search then
takes the loop's time as well, so a test that runs close to the wall-clock thrash
guard (``max_wall_slowdown``) may trip it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from minidtr.runtime.eviction import Eviction

DECISIONS = {"checked": 0}


def _same(fast, slow) -> bool:
    victim, score, runner, shortlist = fast
    victim_r, score_r, runner_r, shortlist_r = slow
    return (
        victim is victim_r
        and type(score) is type(score_r)
        and (score == score_r or score != score)  # NaN only through the loop itself
        and runner == runner_r
        and shortlist == shortlist_r
    )


@contextlib.contextmanager
def checked_decisions() -> Iterator[dict[str, int]]:
    original = Eviction._choose_by_table

    def choose(self, table):
        state = self._sampler.getstate()
        stats = self.stats
        searches, scored = stats.searches, stats.scored
        fast = original(self, table)
        counted = (stats.searches - searches, stats.scored - scored)
        after = self._sampler.getstate()
        self._sampler.setstate(state)
        slow = self._choose_by_loop(self._pool(list(table)))
        assert (stats.searches - searches - counted[0], stats.scored - scored - counted[1]) == (
            counted
        ), "the table and the loop scored different numbers of candidates"
        stats.searches, stats.scored = searches + counted[0], scored + counted[1]
        assert self._sampler.getstate() == after, "the table and the loop sampled differently"
        assert _same(fast, slow), f"table chose {fast}, the reference loop {slow}"
        DECISIONS["checked"] += 1
        return fast

    Eviction._choose_by_table = choose
    try:
        yield DECISIONS
    finally:
        Eviction._choose_by_table = original
