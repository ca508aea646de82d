"""Making room: evict the lowest-scoring candidate until what is asked for fits.

Before any buffer is made, the allocator asks for room (``Allocator.reserve``).
When the budget cannot hold it, ``make_room`` evicts victims one at a time, the
lowest score first (``victims.py``), until it fits, and raises ``BudgetError``
when nothing more can be evicted: everything left is a constant, pinned, or
locked by the op that is running. To evict is to drop the buffer and keep the
recipe, so the value can be recomputed when it is next needed (``remat.py``).

``Eviction`` owns what the search needs: the candidate set, the neighbourhood
structures the heuristics' terms read (h_DTR^eq's classes, kept only while the
heuristic in force uses them: ``track``), the sampler of ``sample=True`` and
the ``scoring`` flag, set while scores are computed (a garbage-collector pass
can free a storage in the middle of a score: see ``Lifetimes.forget``).
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from . import prototype
from .candidates import Candidates
from .eqclasses import EquivalenceClasses
from .errors import BudgetError
from .estar import WalkedNeighbourhood
from .heuristics import ScoreContext
from .storage import Storage
from .victims import Choice, choose_victim, finite_or_none, pool, pool_settings

if TYPE_CHECKING:
    from .allocator import Allocator

MODES = ("estar", "eq")  # the cost terms whose structures are kept up to date (``track``)

# Off only while a search probes budgets it expects to fail (``minidtr.testing``'s
# bisections): each failure would otherwise rescan the whole Python heap.
COLLECT_BEFORE_FAILING = True


class Eviction:
    """Owns: ``candidates``, ``neighbourhood`` (e* and the ancestors' cost), ``eq_classes``,
    ``tracking`` (which of them is kept up to date), ``sampler``, ``scoring``, and
    ``search``, an accelerated search to use instead of the loop (None: the loop)."""

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.candidates: Any = Candidates()
        self.neighbourhood: Any = WalkedNeighbourhood()
        self.eq_classes = EquivalenceClasses()
        self.tracking: str | None = None
        self.sampler = random.Random(0)
        self.scoring = False
        self.search: Any = None

    @property
    def context(self) -> ScoreContext:
        """What a score may read now (a new one for each decision: the clock moves)."""
        return ScoreContext(self.allocator.clock, self.neighbourhood, self.eq_classes)

    def make_room(self, target: int, op_name: str, needed: int) -> None:
        """Evict until at most ``target`` bytes are resident (the allocator is busy).

        Before giving up, Python's cycle collector runs once: values in unreachable
        reference cycles (a recursive closure's) are only freed by it, and whether a
        run fits must not depend on when it happens to run. Their handles' deaths wait
        in the queue (the allocator is busy), but their storages stay candidates, and
        constants die at once."""
        ledger = self.allocator.ledger
        collected = False
        runtime = self.allocator.runtime
        while ledger.memory > target:
            choice = self.choose_victim()
            if choice.victim is None and (runtime.min_size > 0.0 or runtime.sample):
                choice = self.choose_victim(whole=True)  # a victim the pool left out
            if choice.victim is None:
                if not collected and self._may_collect(target):
                    collected = True
                    self.allocator.lifetimes.collect_garbage()
                    continue
                raise BudgetError(
                    op_name,
                    needed,
                    ledger.budget,
                    ledger.memory,
                    ledger.pinned_bytes,
                    ledger.constant_bytes,
                    self.locked_bytes(),
                )
            self.evict(choice.victim, "budget", choice)
            del choice  # its metadata, and constants only it kept alive, may go now

    def _may_collect(self, target: int) -> bool:
        return (
            COLLECT_BEFORE_FAILING
            and not self.allocator.lifetimes.rebuilding_orphans  # a BudgetError is expected
            and self.locked_bytes() <= target
        )

    def locked_bytes(self) -> int:
        return sum(s.nbytes for s in self.candidates if s.locks)

    def choose_victim(self, whole: bool = False) -> Choice:
        """The unlocked candidate with the lowest score (``victims.py``); of every
        candidate with ``whole``, else of the pool ``min_size`` and ``sample`` leave."""
        started = time.perf_counter()
        runtime = self.allocator.runtime
        heuristic = runtime.heuristic
        search = self.search
        if search is not None and search.handles(heuristic):
            choice = search.choose(runtime, whole)
        else:
            mode = prototype.tracked(runtime, getattr(heuristic, "cost", None))
            self.track(mode if mode in MODES else None)
            min_size, sample = pool_settings(runtime, whole)
            pooled = pool(self.candidates, min_size, sample, self.sampler)
            chooser = prototype.choose_victim if runtime.as_prototype else choose_victim
            self.scoring = True
            try:
                choice = chooser(pooled, heuristic, self.context, runtime.events is not None)
            finally:
                self.scoring = False
        stats = runtime.stats_
        stats.searches += 1
        stats.scored += choice.scored
        stats.search_time += time.perf_counter() - started
        return choice

    def evict(
        self,
        storage: Storage,
        reason: str = "budget",
        choice: Choice | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Free a resident storage's buffer, keeping its recipe to recompute it later.
        ``detail`` goes into its event (the contiguous fit's state: ``placement.py``)."""
        if storage.buffer is None:
            raise ValueError(f"cannot evict {storage!r}: it is not resident")
        if storage.op is None or storage.pinned or storage.locks:
            raise ValueError(
                f"cannot evict {storage!r}: it is "
                + ("locked" if storage.locks else "pinned" if storage.pinned else "a constant")
            )
        if self.tracking == "eq":
            self.eq_classes.on_evict(storage)
        storage.buffer = None
        if self.tracking == "estar":
            self.neighbourhood.on_evicted(storage)
        allocator = self.allocator
        allocator.ledger.memory -= storage.nbytes
        self.candidates.evicted(storage, reason)
        runtime = allocator.runtime
        stats = runtime.stats_
        stats.evictions += 1
        if reason == "dead":
            stats.dead_evictions += 1
        if runtime.events is not None:
            extra: dict[str, Any] = {"reason": reason}
            if choice is not None:
                extra["score"] = finite_or_none(choice.score)
                runner = choice.runner_up
                extra["runner_up"] = runner and (runner[0], finite_or_none(runner[1]))
                if choice.shortlist:
                    extra["candidates"] = choice.shortlist
            if detail is not None:
                extra.update(detail)
            allocator.record("evict", storage, **extra)
        if allocator.addresses is not None:
            allocator.addresses.free(storage)

    def budget_changed(self, budget: int | None, searched: bool) -> None:
        """The budget in force is now ``budget``; ``searched``: whether searches may happen
        (a budget, or the ``ignore`` policy, whose dead storages wait for the heuristic).
        The parts of ``as_prototype`` are put in place or taken away here (prototype.py)."""
        prototype.select(self.allocator, MODES)
        self.candidates.set_searched(searched)
        if budget is None:
            self.track(None)  # nothing is scored: keep no neighbourhood structure
            if self.search is not None:
                self.search.idle()

    def left_evicted(self, storage: Storage) -> None:
        """An evicted storage became resident, banished or freed."""
        if self.tracking == "estar":
            self.neighbourhood.on_change(storage)
        elif self.tracking == "eq":
            self.eq_classes.on_leave(storage)
        self.candidates.left_evicted(storage)

    def track(self, mode: str | None) -> None:
        """Keep the neighbourhood structure a heuristic needs ("estar", "eq") up to date, or
        none. Switching starts a new epoch: cached values are rebuilt from the graph."""
        if mode != self.tracking:
            self.tracking = mode
            if mode == "estar":
                self.neighbourhood.invalidate_all()
            elif mode == "eq":
                self.eq_classes.invalidate_all()

    def free_device_memory(self, nbytes: int) -> bool:
        """Called on a real device out-of-memory error: evict one storage if possible."""
        self.candidates.set_searched(True)  # until the next change of runtime or budget
        choice = self.choose_victim()
        if choice.victim is None:
            return False
        self.evict(choice.victim, "device-oom", choice)
        return True
