"""Eviction: choosing the storage with the lowest heuristic score and freeing its buffer.

Part of ``Allocator`` (a mixin, so that each concern reads on its own): the
candidate set is every resident, evictable storage, kept up to date by the
allocator; a search scores the unlocked ones (or a sqrt(n) sample, optionally
skipping small ones) and returns the best and the runner-up for the event log
(and, only when events are recorded, the few lowest with their score terms).
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from typing import Any

from .neighbourhood import MODES
from .runtime import BudgetError
from .storage import Storage

SHORTLIST = 5  # candidates recorded with each budget eviction (victim, runner-up, ...)


# Off only while a search probes budgets it expects to fail (``minidtr.testing``'s
# bisections): each failure would otherwise rescan the whole Python heap.
COLLECT_BEFORE_FAILING = True


class Eviction:
    def _evict_until(self, target: int, op_name: str, needed: int) -> None:
        """Evict until at most ``target`` bytes are resident (the caller is busy).

        Before giving up, Python's cycle collector runs once: values in unreachable
        reference cycles (a recursive closure's) are only freed by it, and whether a
        run fits must not depend on when it happens to run. Their handles' deaths wait
        in the queue (the allocator is busy), but their storages stay candidates, and
        constants die at once."""
        collected = False
        while self.memory > target:
            victim, score, runner_up, shortlist = self._choose_victim()
            if (
                victim is None
                and not collected
                and COLLECT_BEFORE_FAILING
                and not self._tentative
                and self._locked_bytes() <= target
            ):
                collected = True
                gc.collect()
                continue
            if victim is None:
                raise BudgetError(
                    op_name,
                    needed,
                    self.budget,
                    self.memory,
                    self.pinned_bytes,
                    self.constant_bytes,
                    self._locked_bytes(),
                )
            self.evict(victim, score=score, runner_up=runner_up, candidates=shortlist)
            del victim  # its metadata, and constants only it kept alive, may go now

    def _locked_bytes(self) -> int:
        return sum(s.nbytes for s in self.candidates if s.locks)

    def _choose_victim(self) -> tuple[Storage | None, float, Any, list | None]:
        """The unlocked candidate with the lowest score, its score, the runner-up and, when
        events are recorded, the lowest-scoring few with their score terms."""
        runtime = self.runtime
        started = time.perf_counter()
        candidates: Any = self.candidates
        if runtime.min_size > 0.0 and candidates:
            mean = sum(s.nbytes for s in candidates) / len(candidates)
            threshold = runtime.min_size * mean
            candidates = [s for s in candidates if s.nbytes >= threshold]
        if runtime.sample and len(candidates) > 4:
            pool = list(candidates)
            stride = max(1, math.isqrt(len(pool)))
            candidates = pool[self._sampler.randrange(stride) :: stride]
        mode = getattr(runtime.heuristic, "cost", None)
        self.track(mode if mode in MODES else None)
        score = runtime.heuristic.score
        best = runner_up = None
        best_score = runner_score = math.inf
        scored = 0
        seen: list | None = [] if runtime.events is not None else None
        self._scoring = True
        try:
            for storage in candidates:
                if storage.locks:
                    continue
                value = score(storage, self)
                scored += 1
                if seen is not None:
                    seen.append((value, storage))
                if value < best_score or best is None:
                    runner_up, runner_score = best, best_score
                    best, best_score = storage, value
                elif value < runner_score or runner_up is None:
                    runner_up, runner_score = storage, value
        finally:
            self._scoring = False
        stats = self.stats
        stats.searches += 1
        stats.scored += scored
        stats.search_time += time.perf_counter() - started
        runner = None if runner_up is None else (runner_up.id, runner_score)
        shortlist = None if seen is None else self._shortlist(seen)
        return best, best_score, runner, shortlist

    def _shortlist(self, seen: list) -> list[dict[str, Any]]:
        """The ``SHORTLIST`` lowest-scoring candidates of a search, lowest first, with the
        terms of their scores (recorded with a budget eviction)."""
        terms = getattr(self.runtime.heuristic, "terms", None)
        out = []
        for value, storage in heapq.nsmallest(SHORTLIST, seen, key=lambda pair: pair[0]):
            entry = {"id": storage.id, "op": storage.name, "score": value}
            if terms is not None:
                entry.update(terms(storage, self))
            out.append(entry)
        return out

    def evict(
        self,
        storage: Storage,
        score: float | None = None,
        runner_up=None,
        reason: str = "budget",
        candidates: list | None = None,
    ) -> None:
        """Free a resident storage's buffer, keeping its recipe to recompute it later."""
        if storage.buffer is None:
            raise ValueError(f"cannot evict {storage!r}: it is not resident")
        if not storage.evictable or storage.locks:
            raise ValueError(
                f"cannot evict {storage!r}: it is "
                + ("locked" if storage.locks else "pinned" if storage.pinned else "a constant")
            )
        if self.tracking == "eq":
            self.eq_classes.on_evict(storage)
        storage.buffer = None
        if self.tracking == "estar":
            self.neighbourhood.on_change(storage)
        self.memory -= storage.nbytes
        del self.candidates[storage]
        stats = self.stats
        stats.evictions += 1
        if reason == "dead":
            stats.dead_evictions += 1
        if self.runtime.events is not None:
            extra = {"reason": reason}
            if score is not None:
                extra["score"] = score
                extra["runner_up"] = runner_up
            if candidates:
                extra["candidates"] = candidates
            self._record("evict", storage, **extra)

    def free_device_memory(self, nbytes: int) -> bool:
        """Called on a real device out-of-memory error: evict one storage if possible."""
        victim, score, runner_up, shortlist = self._choose_victim()
        if victim is None:
            return False
        self.evict(
            victim, score=score, runner_up=runner_up, reason="device-oom", candidates=shortlist
        )
        return True
