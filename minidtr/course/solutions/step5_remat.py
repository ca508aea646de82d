"""Step 5: rematerialization, with cascades and locking (a reference solution).

Every op and every read locks its input storages first, so that nothing evicts
them while the kernel runs. ``lock`` does that when they are all resident; when one
is evicted, ``rematerialize`` rebuilds it first, as the paper's pseudocode does:

    rematerialize(t):
        for each input s of t's recipe, evicted ones first:
            if s is evicted: rematerialize(s)
            lock(s)
        replay t's recipe (the same op on the same inputs: the same bits)
        unlock the inputs

This solution is that recursion; the runtime's own (``minidtr/runtime/remat.py``)
makes the same decisions with an explicit stack, so that a chain of any length
needs no Python stack.
"""

from __future__ import annotations

from collections.abc import Sequence

from minidtr.runtime.remat import (
    CascadeLink,
    Rematerializer,
    producer_of,
    reads_staleness,
    rebuild_need,
)
from minidtr.runtime.storage import Recipe, Storage


def lock(
    remat: Rematerializer, storages: Sequence[Storage], trigger: str = "read"
) -> Sequence[Storage]:
    """Lock every storage for an access; returns what it locked. All resident: count a
    lock on each and touch it (used now). Otherwise ``rematerialize``."""
    allocator = remat.allocator
    if any(s.buffer is None or s.allocator is not allocator for s in storages):
        return remat.rematerialize(storages, trigger)
    touch = allocator.eviction.candidates.touch
    for storage in storages:
        storage.locks += 1
        storage.last_access = allocator.clock
        touch(storage)
    return storages


class Cascade:
    """The remats of one access: its number in the event log is taken at its first replay."""

    def __init__(self, remat: Rematerializer, trigger: str):
        self.remat, self.trigger, self.number = remat, trigger, None

    def link(self, parent: Storage | None) -> CascadeLink | None:
        if self.remat.allocator.runtime.events is None:
            return None
        if self.number is None:
            self.remat.cascades += 1
            self.number = self.remat.cascades
        return CascadeLink(self.number, self.trigger, None if parent is None else parent.id)


def rematerialize(
    remat: Rematerializer, storages: Sequence[Storage], trigger: str
) -> list[Storage]:
    """Lock every storage, rebuilding the evicted ones first; returns what it locked."""
    return lock_inputs(remat, storages, Cascade(remat, trigger), None)


def lock_inputs(
    remat: Rematerializer, inputs: Sequence[Storage], cascade: Cascade, owner: Storage | None
) -> list[Storage]:
    """Mark the access's own inputs used; rebuild the evicted ones, the largest rebuild
    first, locking each as it comes back; then lock the resident ones, rebuilding any
    that were evicted meanwhile (the access's own at once, under a heuristic without
    staleness). ``owner``: the storage whose recipe reads these inputs (None: the
    access)."""
    allocator = remat.allocator
    touch = allocator.eviction.candidates.touch
    evicted: list[Storage] = []
    resident: list[Storage] = []
    locked: list[Storage] = []
    for storage in inputs:
        if storage.allocator is not allocator:  # another allocator's value: its owner locks it
            storage.allocator.lock_for_another(storage)
            locked.append(storage)
            continue
        if owner is None:  # the access itself: a use by the program (a rebuild is not)
            storage.last_access = allocator.clock
            touch(storage)
        (evicted if storage.buffer is None else resident).append(storage)
    if owner is None and evicted and not reads_staleness(allocator):
        for storage in resident:  # without staleness, nothing else keeps them resident
            remat.lock_one(storage, locked)
        resident = []
    try:
        while True:
            evicted.sort(key=rebuild_need)
            while evicted:
                rebuild_next(remat, evicted, locked, cascade, owner)
            again = [s for s in resident if s.buffer is None]
            if not again:
                break
            resident = [s for s in resident if s.buffer is not None]
            evicted = again
        for storage in resident:
            remat.lock_one(storage, locked)
        return locked
    except BaseException:
        remat.unlock(locked)
        raise


def rebuild_next(
    remat: Rematerializer,
    evicted: list[Storage],
    locked: list[Storage],
    cascade: Cascade,
    owner: Storage | None,
) -> None:
    """Rebuild the last of ``evicted`` (unless a sibling's replay refilled it already) and
    lock it, with any other output of the same replay that ``evicted`` waits for."""
    target = evicted[-1]
    if target.buffer is not None:
        remat.lock_one(evicted.pop(), locked)
        return
    recipe = producer_of(target)
    replay(remat, recipe, cascade, target, owner)
    for ref in recipe.outputs:
        output = ref()
        if output is not None and output.buffer is not None and output in evicted:
            evicted.remove(output)
            remat.lock_one(output, locked)


def replay(
    remat: Rematerializer,
    recipe: Storage | Recipe,
    cascade: Cascade,
    target: Storage,
    owner: Storage | None,
) -> None:
    """Lock the recipe's inputs (rebuilding evicted ones: the recursion), replay it, unlock.
    Its remat events name ``owner``, whose rebuild needs ``target``, as their parent."""
    inner = lock_inputs(remat, recipe.parents, cascade, target)
    try:
        remat.replay(recipe, cascade.link(owner))
    finally:
        remat.unlock(inner)
