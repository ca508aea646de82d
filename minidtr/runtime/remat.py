"""Rematerialization: locking an access's inputs and rebuilding the evicted ones.

Part of ``Allocator`` (a mixin, so that each concern reads on its own). Every op
and every read locks what it reads (``_lock``). When all of it is resident that
is a count per storage; otherwise ``rematerialize`` rebuilds the evicted ones,
and before each the evicted inputs of its recipe, and so on up, depth first
with an explicit stack of ``Frame``s (no recursion, whatever the chain's
length). A rebuild replays the recipe (``_replay``): the same op on the same
inputs, so the same bits, refilling every evicted output of the recipe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import backend
from .runtime import ThrashError
from .storage import Recipe, Storage


def rebuild_need(storage: Storage, limit: int = 64) -> tuple[int, int]:
    """Roughly how much memory rematerializing ``storage`` takes: the bytes of its evicted
    ancestry (walked through evicted parents, at most ``limit`` storages); then newest first."""
    total = 0
    seen: set[int] = set()
    stack = [storage]
    while stack and len(seen) < limit:
        s = stack.pop()
        if s.id in seen:
            continue
        seen.add(s.id)
        total += s.nbytes
        stack.extend(p for p in s.parents if p.buffer is None)
    return total, storage.id


@dataclass(slots=True)
class Frame:
    """One level of ``Allocator.rematerialize``'s stack: a recipe to replay once its
    inputs are resident and locked (``recipe`` is None for the access itself, at the
    bottom of the stack)."""

    recipe: Storage | Recipe | None  # a storage that is its own recipe, or a shared Recipe
    evicted: list[Storage]  # inputs still to rebuild; ``pop()`` yields the one to rebuild next
    deferred: list[Storage]  # inputs resident when asked for: locked together at the end
    locked: list[Storage]  # inputs locked so far (unlocked once the recipe has run)


def cascade_link(frames: list[Frame], cascade: int, trigger: str) -> dict[str, Any]:
    """Where a replay sits in its access's cascade, for the remat event: the cascade's
    number, the access that started it and ``parent``, an output of the replay whose input
    this one rebuilds (the target of the frame below, see ``Allocator.rematerialize``), or
    None when the access itself needs it. ``frames`` is the stack without the replay's own
    frame."""
    parent = frames[-2].evicted[-1].id if len(frames) > 1 else None
    return {"cascade": cascade, "trigger": trigger, "parent": parent}


class Rematerialization:
    def _lock(self, storages: Sequence[Storage], trigger: str = "read") -> Sequence[Storage]:
        """Lock every storage for an access; returns what it locked (the access unlocks it
        when done). The fast path, when everything is resident, only counts the locks;
        otherwise ``rematerialize`` rebuilds the evicted ones. ``trigger`` names the
        access (the op, ``read``) in the remat events' cascade links."""
        for storage in storages:
            if storage.buffer is None or storage.allocator is not self:
                return self.rematerialize(storages, trigger)
        clock = self.clock
        dirty = self.candidates.dirty  # the candidate table re-reads these rows (candidates.py)
        for storage in storages:
            storage.locks += 1
            storage.last_access = clock  # an access counts from when it is requested
            dirty[storage.row] = 1
        return storages

    def rematerialize(self, storages: Sequence[Storage], trigger: str) -> list[Storage]:
        """Lock every storage, rebuilding the evicted ones first (and, before each rebuild,
        the evicted inputs of its recipe, and so on up). Returns what it locked.

        Depth-first with an explicit stack of ``Frame``s, so a chain of any length needs
        no recursion: the bottom frame is the access itself, each frame above it a recipe
        to replay once its inputs are back. A frame rebuilds its evicted inputs one by one,
        locking each as it comes back, and locks the inputs that were already resident
        only at the end, all at once (rebuilding any evicted meanwhile). So a long chain
        holds locks only on what it has rebuilt, not on everything resident along the way,
        and the heuristic stays free to evict what it values least. When several inputs
        are evicted, the one whose rebuild needs the most memory goes first (as in
        Sethi-Ullman register allocation), so that little is held while it runs.
        """
        frames = [self._frame(None, storages)]
        cascade = None  # this access's number in the remat events, taken at its first replay
        try:
            while True:
                frame = frames[-1]
                if frame.evicted:
                    target = frame.evicted[-1]
                    if target.buffer is not None:  # rebuilt meanwhile, as a sibling
                        self._lock_one(frame.evicted.pop(), frame.locked)
                    else:
                        producer = self._producer_of(target)
                        frames.append(self._frame(producer, producer.parents))
                elif frame.deferred:
                    self._lock_deferred(frame)
                elif frame.recipe is None:
                    return frame.locked
                else:
                    frames.pop()
                    link = None
                    if self.runtimes[-1].events is not None:
                        if cascade is None:
                            self.cascades += 1
                            cascade = self.cascades
                        link = cascade_link(frames, cascade, trigger)
                    self._replay_frame(frame, frames[-1], link)
        except BaseException:
            for frame in frames:
                self._unlock(frame.locked)
            raise

    def _frame(self, recipe: Storage | Recipe | None, inputs: Sequence[Storage]) -> Frame:
        evicted: list[Storage] = []
        deferred: list[Storage] = []
        locked: list[Storage] = []
        for storage in inputs:
            if storage.allocator is not self:
                # another allocator's value (made outside an isolated run): a fixed input
                # here, rebuilt, counted and locked by its owner, never evicted by this one
                storage.allocator.lock_for_another(storage)
                locked.append(storage)
                continue
            storage.last_access = self.clock  # an access counts from when it is requested
            self.candidates.dirty[storage.row] = 1
            (evicted if storage.buffer is None else deferred).append(storage)
        if len(evicted) > 1:
            evicted.sort(key=rebuild_need)
        return Frame(recipe, evicted, deferred, locked)

    def lock_for_another(self, storage: Storage) -> None:
        """Lock one of this allocator's storages for an access of another allocator,
        rebuilding it here first if it was evicted; the other unlocks it (``_unlock``)."""
        self._check_pending()
        was_busy, self._busy = self._busy, True
        try:
            self._lock([storage], "read by another allocator")
        finally:
            self._done((), was_busy)

    @staticmethod
    def _producer_of(storage: Storage) -> Storage | Recipe:
        recipe = storage.producer
        if recipe is None:
            raise RuntimeError(f"{storage!r} was banished and can no longer be recomputed")
        return recipe

    def _lock_deferred(self, frame: Frame) -> None:
        """A frame's evicted inputs are all back: lock its resident ones now, unless some
        were evicted meanwhile (to make room for the rebuilds): those are rebuilt first."""
        evicted = [s for s in frame.deferred if s.buffer is None]
        if evicted:
            frame.deferred = [s for s in frame.deferred if s.buffer is not None]
            evicted.sort(key=rebuild_need)
            frame.evicted = evicted
        else:
            for storage in frame.deferred:
                self._lock_one(storage, frame.locked)
            frame.deferred = []

    def _replay_frame(self, frame: Frame, below: Frame, link: dict[str, Any] | None) -> None:
        """Replay a frame whose inputs are all locked, unlock them, and lock the outputs
        that the frame below was waiting for before anything else can evict them."""
        try:
            outermost = self._begin_overhead()
            try:
                self._replay(frame.recipe, link)
            finally:
                if outermost:
                    self._end_overhead()
        finally:
            self._unlock(frame.locked)
        for ref in frame.recipe.outputs:
            output = ref()
            if output is not None and output.buffer is not None and output in below.evicted:
                below.evicted.remove(output)
                self._lock_one(output, below.locked)

    def _lock_one(self, storage: Storage, locked: list[Storage]) -> None:
        storage.locks += 1
        storage.last_access = self.clock
        self.candidates.dirty[storage.row] = 1
        locked.append(storage)

    def _unlock(self, storages: Sequence[Storage]) -> None:
        for storage in storages:
            storage.locks -= 1
            if storage.evict_on_unlock and storage.locks == 0:
                storage.allocator._unlocked_dead(storage)  # its owner's policy applies

    def _unlocked_dead(self, storage: Storage) -> None:
        """A storage that died while locked is unlocked: the deallocation policy applies now."""
        storage.evict_on_unlock = False
        if storage.external_refs == 0:
            self._on_dead(storage)

    def _replay(self, recipe: Storage | Recipe, link: dict[str, Any] | None = None) -> None:
        """Recompute a recipe whose inputs are resident and locked; refill every evicted
        output (siblings included) and drop the duplicates of resident ones. ``link``
        goes into the remat events (``cascade_link``). The cost-model thrash guard is
        checked first (``_check_slowdown``)."""
        self._check_slowdown(recipe)
        stats = self.stats
        arrays = [self._array(cell) for cell in recipe.inputs]
        total = sum(recipe.out_nbytes)
        self._reserve(total, recipe.op.name)
        try:
            xp = backend.xp_for(recipe.device) if recipe.device is not None else None
            results = recipe.op.forward(xp, *arrays)
        except BaseException:
            self.memory -= total
            raise
        if recipe.op.n_outputs == 1:
            results = (results,)
        self.clock += recipe.run_cost
        stats.remats += 1
        stats.remat_cost += recipe.run_cost
        for ref, nbytes, result in zip(recipe.outputs, recipe.out_nbytes, results, strict=True):
            storage = ref()
            if storage is not None and storage.buffer is None and not storage.banished:
                storage.buffer = result
                self._on_state_change(storage)
                storage.last_access = self.clock
                if storage.evictable:
                    self._add_candidate(storage)
                if storage.external_refs == 0:
                    self._dead_remats.append(storage)
                self._record(
                    "remat", storage, cost=recipe.run_cost, replay=stats.remats, **(link or {})
                )
            else:
                self.memory -= nbytes

    def _check_slowdown(self, recipe: Storage | Recipe) -> None:
        """The cost-model thrash guard, checked before every replay: a replay that would
        take the recomputation past ``max_slowdown - 1`` times the larger of the compute
        so far and the compute expected by the end of the step (``Runtime.mark_step``)
        raises ``ThrashError`` instead."""
        runtime = self.runtime
        limit = runtime.max_slowdown
        if limit is None:
            return
        stats = runtime.stats_
        compute = stats.compute_cost
        expected = runtime.expected_compute
        base = compute if compute >= expected else expected
        if base > 0:
            slowdown = 1.0 + (stats.remat_cost + recipe.run_cost) / base
            if slowdown > limit:
                raise ThrashError(
                    recipe.op.name, slowdown, limit, self.budget, expected=compute < expected
                )
