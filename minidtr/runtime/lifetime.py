"""Lifetimes: external references, the deallocation policies, pinning, constants.

Part of ``Allocator`` (a mixin, so that each concern reads on its own). A
storage's external references are its live Tensor handles; when the last one
dies, the active runtime's policy applies: ``eager`` evicts it at once (its
recipe stays while an evicted child may need it), ``banish`` frees it for good
and turns its children into constants, ``ignore`` leaves it to the heuristic.

Eager eviction has one trap, which ``rebuild_orphans`` closes. When a dead
storage has an evicted child that is still referenced (an *orphan*: typically
a gradient waiting for the rest of its sum, or a recurrent state), evicting the
parent makes the child's rebuild need the parent's rebuild, and so on up the
chain of dead values. The heuristic evicted the child when its parent was
resident and cheap to reach; that cost is stale the moment the parent goes.
Left alone, such orphans become the ends of long chains whose rebuild replays
much of the network. So the orphans are rebuilt first, while the parent is
still resident (one op each); the heuristic can evict them again, scored with
what they cost now. An orphan is rebuilt at most once between two reads of it:
a heuristic without staleness (h_MSPS) may evict a rebuilt orphan again at
once, and a storage with many parents (DenseNet's concatenations) would then
be rebuilt at each parent's death, again and again. Deaths that happen while
the allocator is busy (an op, a rematerialization, a garbage-collector pass
inside either) wait in a queue until it is done.

A dead storage is *useful* while some referenced storage below it is evicted
with only dead, evicted storages in between, so that its rebuild would need
it: an orphan, or one further down (a pending gradient below the dead loss
gradient and stacked scores of an LSTM). A useful storage that dies is not
evicted (after its orphans are rebuilt, those that fit) but stays resident as
an ordinary candidate, and so do dead storages rematerialized to rebuild
others (*dead remats*: a DenseNet layer's inputs are rebuilt one after another
from the same dead convolution outputs). Once it is no longer useful (checked
when an access is done and when deaths are settled), it is freed.
"""

from __future__ import annotations

from .candidates import LAZY_SLACK
from .runtime import BudgetError, ThrashError
from .storage import Cell, Storage


class Lifetime:
    def add_ref(self, cell: Cell) -> None:
        """A new external handle (a Tensor) to ``cell``'s value."""
        (cell.storage if cell.is_view else cell).external_refs += 1
        if self.observer is not None:
            self.observer.on_add_ref(cell)

    def release(self, cell: Cell) -> None:
        """An external handle died; the last one triggers the deallocation policy. An
        observer hears of a death while the allocator is busy when the access is done, with
        the policies (``_settle_dying``), so a trace holds it where it takes effect."""
        if self.observer is not None:
            if self._busy:
                self._released.append(cell)
            else:
                self.observer.on_release(cell)
        storage = cell.storage if cell.is_view else cell
        storage.external_refs -= 1
        if storage.external_refs:
            return
        if self._busy or self._dying or self._released:
            self._on_dead(storage)
            return
        if not storage.locks and not self._dead_remats and not self._kept_dead:
            if storage.op is None:
                return  # a constant: no policy frees it; it goes with its metadata (forget)
            runtime = self.runtimes[-1]
            if (
                runtime.dealloc == "eager"
                and storage.buffer is not None
                and not storage.pinned
                and runtime.events is None
                and self.tracking is None
                and (
                    not self.listing  # else: no neighbourhood term watched, no orphan made
                    or not self.candidates.watching
                    and not (self.candidates.orphans_possible and has_evicted_child(storage))
                )
            ):
                # the common case, a temporary dying between ops with no orphans to rebuild:
                # what _apply_policy would do, evict(storage, reason="dead"), inlined with the
                # table's pop. Dropping the buffer runs no Python code, so nothing needs
                # ``_busy``.
                storage.buffer = None
                self.memory -= storage.nbytes
                row = storage.row
                if row:
                    table = self.candidates
                    table.storages[row] = None
                    table.dirty[row] = 1
                    storage.row = 0
                    table.count -= 1
                    if len(table.storages) > 2 * table.count + LAZY_SLACK:
                        table.compact()
                stats = runtime.stats_
                stats.evictions += 1
                stats.dead_evictions += 1
                return
        self._busy = True
        try:
            self._apply_policy(storage)
            if self._dying or self._released:
                self._drain_dying()
            elif self._dead_remats or self._kept_dead:
                self._free_dead_remats()
        finally:
            self._busy = False

    def _on_dead(self, storage: Storage) -> None:
        """The last external reference died: apply the deallocation policy, now or, while
        the allocator is busy, when the access in progress is done."""
        self._dying.append(storage)
        self._settle_dying()

    def _settle_dying(self) -> None:
        """Apply the deallocation policy to the queued dead storages, in the order they died.

        Nothing runs while the allocator is busy (an op, a rematerialization, an eviction
        search, a garbage-collector pass inside any of them): the access in progress calls
        this when it is done, so a death never changes the allocator under a running access.
        An error while rebuilding orphans (a ThrashError) does not leave the dead storage
        resident: it is evicted anyway, and the error is raised by the next access or when
        the runtime exits (a death may happen inside ``Tensor.__del__``, where it could not
        surface).
        """
        if self._busy:
            return
        self._busy = True
        try:
            self._drain_dying()
        finally:
            self._busy = False

    def _drain_dying(self) -> None:
        while self._dying or self._released:
            released, self._released = self._released, []
            if self.observer is not None:
                for cell in released:
                    self.observer.on_release(cell)
            if self._dying:
                self._apply_policy(self._dying.popleft())
        self._free_dead_remats()  # what only the dead needed is garbage now

    def _apply_policy(self, storage: Storage) -> None:
        if storage.external_refs:
            return  # a new handle was made meanwhile
        runtime = self.runtimes[-1]
        policy = runtime.dealloc
        if policy == "ignore" or storage.banished:
            return
        if storage.locks:
            storage.evict_on_unlock = True
            return
        if policy == "banish" and self._banish(storage):
            return
        if storage.buffer is None or storage.op is None or storage.pinned:
            return  # not resident, or not evictable
        if (
            self.budget is not None
            and runtime.rebuild_orphans
            and self.pending_error is None
            and has_evicted_child(storage)  # otherwise it has no orphans and is not useful
        ):
            if orphans_of(storage):
                try:
                    self._rebuild_orphans(storage)
                except BaseException as error:  # noqa: BLE001 (kept, raised at a safe point)
                    # without the frames where it happened: they hold the dying run's
                    # values, which must not outlive the user's references to them
                    self.pending_error = error.with_traceback(None)
                if storage.buffer is None or storage.external_refs or storage.locks:
                    return
            if self.pending_error is None and useful_dead(storage):
                self._kept_dead[storage] = None  # evicted ones below still need it
                return
        self.evict(storage, reason="dead")

    def raise_pending(self) -> None:
        """Raise an error that happened where it could not surface (see ``_settle_dying``)."""
        error = self.pending_error
        if error is not None:
            self.pending_error = None
            try:
                raise error
            finally:
                del error  # no cycle through this frame: its traceback would keep it

    def _rebuild_orphans(self, storage: Storage) -> None:
        """Rematerialize the orphans of a dead, resident storage, holding it resident. An
        orphan that does not fit in the budget stays evicted: it is not needed yet."""
        orphans = orphans_of(storage)
        stats = self.stats
        before = stats.remats
        storage.locks += 1
        self.candidates.dirty[storage.row] = 1
        self._tentative = True  # a BudgetError here is expected: no garbage collection
        try:
            self._unlock(self._lock(orphans, trigger=f"orphans of #{storage.id}"))
        except ThrashError:
            raise
        except BudgetError:
            pass
        finally:
            self._tentative = False
            storage.locks -= 1
            self._free_dead_remats()
        for orphan in orphans:
            if orphan.buffer is not None:
                orphan.orphan_rebuilt_at = orphan.last_access
        stats.orphan_remats += stats.remats - before

    def _banish(self, storage: Storage) -> bool:
        """Free a dead storage for good; its children lose their way to be recomputed, so
        they become constants. Not possible while an evicted child still needs it."""
        if storage.op is None:
            return False
        children = storage.live_children()
        if any(c.buffer is None and not c.banished for c in children):
            return False
        for child in children:
            if child.op is not None:
                child.drop_recipe()
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
        storage.drop_recipe()
        storage.banished = True
        storage.pinned = False
        self.stats.banished += 1
        self._record("banish", storage)
        return True

    def pin(self, storage: Storage) -> None:
        """Make a storage unevictable (rematerializing it first if it was evicted)."""
        if storage.pinned or storage.op is None:
            return
        with self.holding(storage):
            storage.pinned = True
            self.candidates.pop(storage, None)
            self.pinned_bytes += storage.nbytes

    def make_constant(self, storage: Storage, if_resident: bool = False) -> None:
        """Drop a storage's recipe (rematerializing it first if needed): it becomes a constant,
        never evicted, and no longer keeps its inputs' metadata alive. With ``if_resident``
        an evicted storage keeps its recipe instead (nothing is recomputed); an observer is
        told either way (``on_make_constant_if_resident``), so that a trace recorded without
        a budget replays the same rule under one."""
        if storage.op is None:
            return
        observer = self.observer
        if if_resident and storage.buffer is None:
            if observer is not None:
                observer.on_make_constant_if_resident(storage)
            return
        if storage.buffer is not None:  # nothing to rematerialize, nothing that could evict
            self._drop_to_constant(storage, if_resident)
            return
        with self.holding(storage):
            self._drop_to_constant(storage, if_resident)

    def _drop_to_constant(self, storage: Storage, if_resident: bool) -> None:
        storage.drop_recipe()
        self.candidates.pop(storage, None)
        if storage.pinned:
            storage.pinned = False
            self.pinned_bytes -= storage.nbytes
        self.constant_bytes += storage.nbytes
        observer = self.observer
        if observer is not None:
            if if_resident:
                observer.on_make_constant_if_resident(storage)
            else:
                observer.on_make_constant(storage)

    def unpin(self, storage: Storage) -> None:
        if not storage.pinned:
            return
        storage.pinned = False
        self.pinned_bytes -= storage.nbytes
        if storage.buffer is not None and storage.op is not None:
            self._add_candidate(storage)

    def forget(self, storage: Storage) -> None:
        """A storage's metadata was garbage collected (``Storage.__del__``). Without a
        candidate table (no budget) a resident one can be, in a reference cycle with its
        last handle, whose release may come after: the buffer goes now, so that the
        release finds nothing to evict."""
        if storage.buffer is not None:
            storage.buffer = None
            self.memory -= storage.nbytes
            if storage.op is None:
                self.constant_bytes -= storage.nbytes
            elif storage.pinned:
                self.pinned_bytes -= storage.nbytes
            if self.runtimes and self.runtimes[-1].events is not None:
                self._record("free", storage)
        elif self._scoring:
            # a garbage-collector pass inside a score: the cached closures being read may
            # include this storage, so start a new epoch rather than edit them
            self.neighbourhood.invalidate_all()
            self.eq_classes.invalidate_all()
        else:
            self._on_state_change(storage)

    def _free_dead_remats(self) -> None:
        """Storages nobody references, rematerialized only to recompute others, stay
        resident as candidates while they are useful (``useful_dead``) and are freed once
        the access that needed them is done and they are not (unless dealloc is
        ``ignore``, or ``keep_dead_remats`` keeps them all): no garbage outlives the
        operation, and a run does not depend on earlier ones."""
        kept = self._kept_dead
        if not self._dead_remats and not kept:
            return
        for storage in self._dead_remats:
            kept[storage] = None
        self._dead_remats = []
        if self.runtime.dealloc == "ignore" or self.runtime.keep_dead_remats:
            kept.clear()
            return
        for storage in list(kept):
            if storage.buffer is None or storage.external_refs or not storage.evictable:
                del kept[storage]
            elif not storage.locks and not useful_dead(storage):
                del kept[storage]
                self.evict(storage, reason="dead")


USEFUL_SEARCH = 256  # storages visited at most when looking below a dead storage


def useful_dead(storage: Storage) -> bool:
    """Whether a dead storage would shorten the rebuild of an evicted, referenced one: one
    reached from it through evicted children that nobody references (at most
    ``USEFUL_SEARCH`` storages visited). It runs for every dead storage kept, after every
    access, so it reads the children's weak references itself rather than build lists."""
    seen = {id(storage)}
    stack = [storage]
    while stack and len(seen) < USEFUL_SEARCH:
        children = stack.pop().children
        if not children:
            continue
        for ref in children if type(children) is list else (children,):
            child = ref()
            if child is None or child.buffer is not None or id(child) in seen:
                continue
            seen.add(id(child))
            if child.banished or child.op is None:
                continue
            if child.external_refs > 0:
                return True
            stack.append(child)
    return False


def has_evicted_child(storage: Storage) -> bool:
    """Whether a live child of ``storage`` is evicted: what orphans and usefulness need
    (a quick test on every death under a budget, without building the children's list)."""
    children = storage.children
    if type(children) is not list:
        child = children() if children else None
        return child is not None and child.buffer is None
    for ref in children:
        child = ref()
        if child is not None and child.buffer is None:
            return True
    return False


def orphans_of(storage: Storage) -> list[Storage]:
    """Evicted children of ``storage`` that are still referenced (see the module docstring),
    except those evicted again since they were last rebuilt as orphans without anything
    reading them: rebuilding those once more would only repeat the same eviction."""
    return [
        c
        for c in storage.live_children()
        if c.buffer is None
        and not c.banished
        and c.external_refs > 0
        and c.op is not None
        and c.orphan_rebuilt_at != c.last_access
    ]
