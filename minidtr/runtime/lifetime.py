"""Lifetimes: external references, the deallocation policies, pinning, constants.

Part of ``Allocator`` (a mixin, so that each concern reads on its own). A
storage's external references are its live Tensor handles; when the last one
dies, the active runtime's policy applies: ``eager`` evicts it at once (its
recipe stays while an evicted child may need it), ``banish`` frees it for good
and turns its children into constants, ``ignore`` leaves it to the heuristic.
"""

from __future__ import annotations

from .storage import Cell, Storage


class Lifetime:
    def add_ref(self, cell: Cell) -> None:
        """A new external handle (a Tensor) to ``cell``'s value."""
        cell.storage.external_refs += 1
        if self.observer is not None:
            self.observer.on_add_ref(cell)

    def release(self, cell: Cell) -> None:
        """An external handle died; the last one triggers the deallocation policy."""
        if self.observer is not None:
            self.observer.on_release(cell)
        storage = cell.storage
        storage.external_refs -= 1
        if storage.external_refs == 0:
            self._on_dead(storage)

    def _on_dead(self, storage: Storage) -> None:
        """The last external reference died: apply the deallocation policy."""
        policy = self.runtime.dealloc
        if policy == "ignore" or storage.banished:
            return
        if storage.locks:
            storage.evict_on_unlock = True
            return
        if policy == "banish" and self._banish(storage):
            return
        if storage.buffer is not None and storage.evictable:
            self.evict(storage, reason="dead")

    def _banish(self, storage: Storage) -> bool:
        """Free a dead storage for good; its children lose their way to be recomputed, so
        they become constants. Not possible while an evicted child still needs it."""
        if storage.producer is None:
            return False
        children = storage.live_children()
        if any(c.buffer is None and not c.banished for c in children):
            return False
        for child in children:
            if child.producer is not None:
                child.producer = None
                self.candidates.pop(child, None)
                if child.pinned:
                    self.pinned_bytes -= child.nbytes
                    child.pinned = False
                self.constant_bytes += child.nbytes
        if storage.buffer is not None:
            storage.buffer = None
            self.memory -= storage.nbytes
            self.candidates.pop(storage, None)
            if storage.pinned:
                self.pinned_bytes -= storage.nbytes
        else:
            self._on_state_change(storage)
        storage.producer = None
        storage.banished = True
        storage.pinned = False
        self.stats.banished += 1
        self._record("banish", storage)
        return True

    def pin(self, storage: Storage) -> None:
        """Make a storage unevictable (rematerializing it first if it was evicted)."""
        if storage.pinned or storage.producer is None:
            return
        self._unlock(self._lock([storage]))
        self._free_dead_remats()
        storage.pinned = True
        self.candidates.pop(storage, None)
        self.pinned_bytes += storage.nbytes

    def make_constant(self, storage: Storage) -> None:
        """Drop a storage's recipe (rematerializing it first if needed): it becomes a constant,
        never evicted, and no longer keeps its inputs' metadata alive."""
        if storage.producer is None:
            return
        self._unlock(self._lock([storage]))
        self._free_dead_remats()
        storage.producer = None
        self.candidates.pop(storage, None)
        if storage.pinned:
            storage.pinned = False
            self.pinned_bytes -= storage.nbytes
        self.constant_bytes += storage.nbytes
        if self.observer is not None:
            self.observer.on_make_constant(storage)

    def unpin(self, storage: Storage) -> None:
        if not storage.pinned:
            return
        storage.pinned = False
        self.pinned_bytes -= storage.nbytes
        if storage.buffer is not None and storage.producer is not None:
            self.candidates[storage] = None

    def forget(self, storage: Storage) -> None:
        """A storage's metadata was garbage collected (``Storage.__del__``)."""
        if storage.buffer is not None:
            self.memory -= storage.nbytes
            if storage.producer is None:
                self.constant_bytes -= storage.nbytes
            elif storage.pinned:
                self.pinned_bytes -= storage.nbytes
            if self.runtimes and self.runtime.events is not None:
                self._record("free", storage)
        else:
            self._on_state_change(storage)

    def _free_dead_remats(self) -> None:
        """Storages nobody references, rematerialized only to recompute others, are freed
        again once the access that needed them is done (unless dealloc is ``ignore``), so
        no garbage outlives the operation and a run does not depend on earlier ones."""
        if not self._dead_remats:
            return
        dead, self._dead_remats = self._dead_remats, []
        if self.runtime.dealloc == "ignore":
            return
        for storage in dead:
            if (
                storage.buffer is not None
                and storage.external_refs == 0
                and not storage.locks
                and storage.evictable
            ):
                self.evict(storage, reason="dead")
