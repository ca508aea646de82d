"""The contiguous fit: the allocator's part that gives every resident value an address.

Under ``Runtime(fit="bytes")`` (the default, the paper's rule) a value fits when the
resident bytes plus its own stay within the budget, and this part does not exist
(``Allocator.addresses`` is None: no address work at all). Under
``fit="contiguous"`` the budget is an ``Arena`` (``arena.py``) of ``budget`` bytes,
and a new value (an op's output, its kernel's workspace, a constant) fits only if one
free block holds it, rounded up to the arena's alignment. When none does, the lowest-
scoring candidates are evicted, in the heuristic's order as under the byte rule (the
same ``Eviction.choose_victim``), until one does; each eviction frees its victim's
block, which merges with its free neighbours.

``ContiguousFit`` owns the arena, the block of every resident storage (``placed``, by
storage id), the blocks reserved for the op that is running (``pending``: a stack of
frames, one per ``Allocator.reserve``, its outputs' blocks in order, then its
workspace's) and the storages still to be given a block (``unplaced``: those resident
when the arena was laid out). What it measures goes to the innermost runtime's
``Stats``: ``placement_failures`` (requests that found no block at first),
``fragmentation_sum`` (1 - largest free block / free bytes at each of them: their
mean is the ``fragmentation`` of ``Runtime.stats()``), ``extra_evictions``
(evictions made while the bytes already fitted the budget but no block held the
request: what the contiguous rule costs beyond the byte rule at that moment) and
``peak_address`` (the most address space in use at once, ``Arena.touched``).

The arena is laid out afresh, the resident values packed from address 0 in the order
they were made (under ``split`` the constants from the top end), when it is created
(a runtime with ``fit="contiguous"`` becomes the innermost one) and when the budget in
force changes: those are the only moments when values move. On NumPy all of this is
bookkeeping next to NumPy's own buffers.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from . import eviction as eviction_module
from .arena import Arena, Block, aligned
from .errors import PlacementError
from .options import MAX_BUDGET
from .storage import Storage
from .victims import Choice
from .window import window_victims

if TYPE_CHECKING:
    from .allocator import Allocator


def apply_fit(allocator: Allocator, reason: str) -> None:
    """Give the allocator the fit the innermost runtime asks for, at the budget in force
    (``Allocator.apply_budget``, after a runtime enters or leaves, or a budget changes):
    under ``bytes`` no placement; under ``contiguous`` the one it has (same policy) or a
    new one with every resident storage still to place, then ``ContiguousFit.apply``."""
    runtime = allocator.runtime
    current = allocator.addresses
    if runtime.fit != "contiguous":
        allocator.addresses = None
        return
    if current is None or current.arena.policy != runtime.placement:
        current = ContiguousFit(allocator, arena_size(allocator.budget), runtime.placement)
        allocator.addresses = current
    current.apply(allocator.budget, reason)


def arena_size(budget: int | None) -> int:
    """The arena of a budget: ``budget`` bytes, or (no budget) as many as a budget can
    be, so that the addresses are still measured."""
    return MAX_BUDGET if budget is None else budget


class ContiguousFit:
    """The arena of one allocator and the blocks of its values; see the module docstring."""

    def __init__(self, allocator: Allocator, size: int, policy: str = "best"):
        self.allocator = allocator
        self.arena = Arena(size, policy)
        self.placed: dict[int, Block] = {}
        self.pending: list[list[Block | None]] = []
        self.unplaced: list[Storage] = resident_storages(allocator)
        # set while the arena is being changed: a storage collected meanwhile (its
        # ``__del__``) frees its block only when the change is over (``deferred``)
        self.changing = False
        self.deferred: list[Block] = []
        self.failed = 0  # the size of the request ``try_place`` last found no block for

    # ---- reserving for an op, and giving the blocks to its outputs --------------------

    def reserve(self, pieces: Sequence[int], op_name: str, needed: int) -> None:
        """A block for each of ``pieces`` (an op's outputs, then its workspace), evicting
        until there are; pushed as a frame of ``pending`` (``bind``, ``take``, ``drop``)."""
        frame = self.try_place(pieces)
        if frame is None:
            allocator = self.allocator
            outermost = allocator.guard.begin()
            try:
                frame = self.make_room(pieces, op_name, needed)
            finally:
                if outermost:
                    allocator.guard.end()
        self.pending.append(frame)

    def bind(self, storages: Sequence[Storage]) -> None:
        """Give the top frame's blocks to ``storages``, in order; free the rest (the
        workspace) and pop the frame."""
        for i, storage in enumerate(storages):
            self.take(i, storage)
        self.drop()

    def take(self, i: int, storage: Storage) -> None:
        """Give block ``i`` of the top frame to ``storage`` (a replay's refilled output)."""
        frame = self.pending[-1]
        block, frame[i] = frame[i], None
        if block is not None:
            block.owner = weakref.ref(storage)
            self.placed[storage.id] = block

    def drop(self) -> None:
        """Pop the top frame, freeing the blocks no storage took (a workspace, a replay's
        duplicate outputs, every block of an op that failed)."""
        for block in self.pending.pop():
            if block is not None:
                self._free_block(block)

    def free(self, storage: Storage) -> None:
        """``storage`` left memory (evicted, banished, collected): free its block."""
        block = self.placed.pop(storage.id, None)
        if block is not None:
            self._free_block(block)
        elif self.unplaced and storage in self.unplaced:
            self.unplaced.remove(storage)

    def address(self, storage: Storage) -> int | None:
        """Where ``storage`` lies in the arena (None: it has no block)."""
        block = self.placed.get(storage.id)
        return None if block is None else block.start

    # ---- the loop ----------------------------------------------------------------------

    def try_place(self, pieces: Sequence[int]) -> list[Block | None] | None:
        """Place the storages still unplaced, then a block for each piece (None for one of
        0 bytes); the pieces' blocks, or None, with none of them placed, when one does not
        fit (``failed`` then says which size)."""
        self.changing = True
        try:
            while self.unplaced:
                storage = self.unplaced[0]
                if storage.nbytes and not self._place_storage(storage):
                    self.failed = storage.nbytes
                    return None
                del self.unplaced[0]
            frame: list[Block | None] = []
            for nbytes in pieces:
                block = self.arena.place(nbytes) if nbytes else None
                if nbytes and block is None:
                    for placed in frame:
                        if placed is not None:
                            self.arena.free(placed)
                    self.failed = nbytes
                    return None
                frame.append(block)
            self._note_peak()
            return frame
        finally:
            self._flush()

    def make_room(self, pieces: Sequence[int], op_name: str, needed: int) -> list[Block | None]:
        """Evict until every piece (and every unplaced storage) has a block: the
        heuristic's victims (``victims``), one search at a time. Counts the failure and
        its fragmentation once, and each eviction made while the bytes alone would
        already fit as extra. Before giving up, Python's cycle collector runs once, as
        under the byte rule (``Eviction.make_room``)."""
        allocator = self.allocator
        ledger, arena, stats = allocator.ledger, self.arena, allocator.stats
        stats.placement_failures += 1
        stats.fragmentation_sum += arena.fragmentation()
        collected = False
        largest = max([*pieces, *(s.nbytes for s in self.unplaced)], default=0)
        possible = self.could_fit(largest)  # evicting only ever frees: checked once
        while (frame := self.try_place(pieces)) is None:
            victims = self.victims(pieces) if possible else []
            if not victims:
                if not collected and self._may_collect():
                    collected = True
                    allocator.lifetimes.collect_garbage()
                    possible = self.could_fit(largest)
                    continue
                raise self.error(op_name, needed)
            for storage, choice in victims:
                extra = ledger.budget is None or ledger.memory + needed <= ledger.budget
                stats.extra_evictions += extra
                detail = {"free_bytes": arena.free_bytes, "largest_free": arena.largest_free()}
                allocator.eviction.evict(storage, "budget", choice, {**detail, "extra": extra})
            del victims
        return frame

    def victims(self, pieces: Sequence[int]) -> list[tuple[Storage, Choice]]:
        """What to evict next for the request that failed: the lowest-scoring candidate
        (``Eviction.choose_victim``), or under a window heuristic every value of the
        cheapest window that would hold the whole request (``window.py``): its pieces and
        the storages still unplaced, side by side, so that all of them then fit. When no
        window holds the whole, the one for the piece that failed; when that one is free
        already (the pieces fit apart, not together), the lowest-scoring candidate. Empty
        when nothing can go."""
        heuristic = self.allocator.runtime.heuristic
        if getattr(heuristic, "window", False):
            sizes = [*pieces, *(s.nbytes for s in self.unplaced)]
            whole = sum(aligned(n, self.arena.alignment) for n in sizes if n)
            victims = window_victims(self, heuristic, whole)
            if not victims and whole > self.failed:
                victims = window_victims(self, heuristic, self.failed)
            if victims:
                return victims
        choice = self.allocator.eviction.choose_victim()
        return [] if choice.victim is None else [(choice.victim, choice)]

    def could_fit(self, nbytes: int) -> bool:
        """Whether evicting every unlocked evictable storage would leave a free range that
        holds ``nbytes``: runs of free blocks and such storages' blocks, in address
        order. When not, evicting cannot help and the loop stops at once."""
        need = aligned(nbytes, self.arena.alignment)
        run = 0
        for block in self.arena.blocks():
            storage = None if block.free or block.owner is None else block.owner()
            if block.free or (
                storage is not None
                and storage.op is not None
                and not storage.pinned
                and not storage.locks
            ):
                run += block.size
                if run >= need:
                    return True
            else:
                run = 0
        return False

    def _may_collect(self) -> bool:
        return (
            eviction_module.COLLECT_BEFORE_FAILING
            and not self.allocator.lifetimes.rebuilding_orphans
        )

    def error(self, op_name: str, needed: int) -> PlacementError:
        """The budget error of a request no block can hold, with the arena's state."""
        allocator = self.allocator
        ledger, arena = allocator.ledger, self.arena
        return PlacementError(
            op_name,
            needed,
            aligned(self.failed, arena.alignment),
            ledger.budget,
            ledger.memory,
            ledger.pinned_bytes,
            ledger.constant_bytes,
            allocator.eviction.locked_bytes(),
            arena.largest_free(),
            arena.free_bytes,
        )

    # ---- the budget ---------------------------------------------------------------------

    def apply(self, budget: int | None, reason: str) -> None:
        """The budget in force is ``budget``: lay the arena out again at that size when it
        changed, and place the storages still unplaced (evicting as a request does)."""
        size = arena_size(budget)
        if size != self.arena.size:
            self.relayout(size)
        if self.unplaced:
            allocator = self.allocator
            was_busy, allocator.busy = allocator.busy, True
            try:
                self.reserve((), reason, 0)  # places them, or evicts
                self.drop()
            finally:
                allocator.done((), was_busy)

    def relayout(self, size: int) -> None:
        """A new arena of ``size`` bytes, every resident storage still to place, in the
        order they were made."""
        if self.pending:
            raise RuntimeError("the budget cannot change while an op is making room")
        owners = [block.owner() for block in self.placed.values()]
        storages = [s for s in owners if s is not None and s.buffer is not None]
        self.unplaced = sorted([*storages, *self.unplaced], key=lambda s: s.id)
        self.placed.clear()
        self.arena = Arena(size, self.arena.policy, self.arena.alignment)

    # ---- the layout, for readers (a window heuristic, the explorer) ----------------------

    def layout(self) -> Iterator[tuple[Block, Storage | None]]:
        """Every block in address order with the storage in it (None: a free block, or
        one reserved for the op that is running)."""
        for block in self.arena.blocks():
            owner = None if block.free or block.owner is None else block.owner()
            yield block, owner

    # ---- internals -------------------------------------------------------------------

    def _place_storage(self, storage: Storage) -> bool:
        constant = True if storage.op is None else None  # under split: the top end
        block = self.arena.place(storage.nbytes, weakref.ref(storage), constant)
        if block is None:
            return False
        self.placed[storage.id] = block
        return True

    def _free_block(self, block: Block) -> None:
        self.deferred.append(block)
        if not self.changing:
            self.changing = True
            self._flush()

    @contextlib.contextmanager
    def unchanged(self) -> Iterator[None]:
        """The arena keeps its blocks meanwhile: a block freed (its storage collected by a
        garbage-collector pass) is freed at the end (a window decision reads them)."""
        if self.changing:
            yield
            return
        self.changing = True
        try:
            yield
        finally:
            self._flush()

    def _flush(self) -> None:
        """Free the deferred blocks, then end the change (``changing`` is set: a block
        freed by a collection meanwhile joins the list)."""
        try:
            while self.deferred:
                self.arena.free(self.deferred.pop())
        finally:
            self.changing = False

    def _note_peak(self) -> None:
        stats = self.allocator.stats
        end = self.arena.touched()
        if stats is not None and end > stats.peak_address:
            stats.peak_address = end


def resident_storages(allocator: Allocator) -> list[Storage]:
    """The allocator's resident storages, in the order they were made, found among the
    objects Python's cycle collector tracks (as the accelerator's table finds its
    candidates when it starts listing; skipped when nothing is resident)."""
    if not allocator.ledger.memory:
        return []
    found = [
        obj
        for obj in gc.get_objects()
        if type(obj) is Storage and obj.allocator is allocator and obj.buffer is not None
    ]
    return sorted(found, key=lambda s: s.id)
