"""The thrash guard: stop a run whose budget makes it recompute without end.

Under a budget that is too small, DTR does not fail: it evicts and recomputes
the same values again and again. The paper stops such runs at 2x. minidtr
raises ``ThrashError`` instead of going on, in two measures:

- in the cost model (``max_slowdown``): before every replay, if recomputing
  would take the recompute cost past (limit - 1) x the larger of the compute so
  far and the compute expected by the end of the current step;
- in wall time (``max_wall_slowdown``): when eviction work (searching for
  victims, evicting, recomputing) has made the run's wall time more than the
  limit times the rest, once the run has been active for ``WALL_GUARD_AFTER``
  seconds. It catches runs whose time goes into the search, which the cost
  model does not see.

The guard also times that eviction work (``begin``/``end``), which
``Runtime.stats()`` reports as ``overhead_time``.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from . import interrupts
from .errors import ThrashError

if TYPE_CHECKING:
    from .allocator import Allocator
    from .storage import Recipe, Storage

# The wall-clock guard judges only runs that have been active this long (seconds): before
# that a ratio of wall times is noise, and nothing has ground for long yet.
WALL_GUARD_AFTER = 10.0


class ThrashGuard:
    """Owns: ``since``, when the eviction work being timed began (None: none is)."""

    __slots__ = ("allocator", "since")

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.since: float | None = None

    def begin(self) -> bool:
        """Start timing eviction work unless it is already being timed, checking the
        wall-clock guard first. True when this call started the timing (and so must
        ``end`` it). A requested interrupt is raised here only within an op or a read:
        the rebuilds that follow a tensor's death can run inside ``Tensor.__del__``,
        where an exception cannot surface."""
        allocator = self.allocator
        if allocator.interrupt_requested and allocator.accesses:
            interrupts.answer()
        if self.since is not None:
            return False
        self.check_wall_time()
        self.since = time.perf_counter()
        return True

    def end(self) -> None:
        self.allocator.stats.overhead_time += time.perf_counter() - self.since
        self.since = None

    def check_wall_time(self) -> None:
        """Raise ``ThrashError`` when eviction work has made the run more than
        ``max_wall_slowdown`` times slower in wall time (after ``WALL_GUARD_AFTER`` s).
        The eviction work of inner runtimes, done under their own guard settings, counts
        as the rest of the run here (``Runtime.charged_overhead_time``)."""
        runtime = self.allocator.runtime
        limit = runtime.max_wall_slowdown
        if limit is None:
            return
        wall = runtime.wall_time()
        if wall < WALL_GUARD_AFTER:
            return
        overhead = runtime.charged_overhead_time
        rest = wall - overhead
        slowdown = wall / rest if rest > 0 else math.inf
        if slowdown <= limit:
            return
        s, inner = runtime.stats_, runtime.inner_stats
        search_time = s.search_time - inner.search_time
        detail = (
            f"{overhead:.1f} s of {wall:.1f} s: {search_time:.1f} s "
            f"searching {s.searches - inner.searches:,} times, "
            f"{s.remats - inner.remats:,} remats"
        )
        if 2 * search_time > overhead and getattr(runtime.heuristic, "cost", None) == "estar":
            detail += (
                "; mostly h_DTR's exact e*, which heuristic='dtr_eq' "
                "approximates at a fraction of the cost"
            )
        raise ThrashError(
            "eviction", slowdown, limit, self.allocator.ledger.budget, wall=True, detail=detail
        )

    def check_replay(self, recipe: Storage | Recipe) -> None:
        """The cost-model guard, before every replay: a replay that would take the
        recomputation past ``max_slowdown - 1`` times the larger of the compute so far
        and the compute expected by the end of the step (``Runtime.mark_step``) raises
        ``ThrashError`` instead."""
        runtime = self.allocator.runtime
        limit = runtime.max_slowdown
        if limit is None:
            return
        stats = runtime.stats_
        compute = stats.compute_cost
        expected = runtime.expected_compute
        base = compute if compute >= expected else expected
        if base > 0:
            # ``Stats.slowdown``'s expression, so that a run whose slowdown reaches the
            # limit exactly is let through, to the last bit
            slowdown = (base + (runtime.charged_remat_cost + recipe.run_cost)) / base
            if slowdown > limit:
                raise ThrashError(
                    recipe.op.name,
                    slowdown,
                    limit,
                    self.allocator.ledger.budget,
                    expected=compute < expected,
                )
