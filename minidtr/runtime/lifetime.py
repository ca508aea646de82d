"""Lifetimes: external references, the deallocation policies, pinning, constants.

A storage's external references are its live Tensor handles; when the last one
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
much of the network. Two ways keep the rebuild one op: rebuild the orphans now,
while the parent is still resident, or keep the parent (as a useful dead
storage, below). The one that holds fewer bytes is taken: the orphans are
rebuilt when together they are no larger than the parent (a gradient of the
same shape, a recurrent state), and the heuristic can evict them again, scored
with what they cost now; otherwise the parent stays, an ordinary candidate
whose score counts what its eviction would cost the orphans (a DenseNet
concatenation's many narrow inputs are not rebuilt at each of its deaths). An
orphan is rebuilt at most once between two reads of it:
a heuristic without staleness (h_MSPS) may evict a rebuilt orphan again at
once, and a storage with many parents (DenseNet's concatenations) would then
be rebuilt at each parent's death, again and again.

A dead storage is *useful* while some referenced storage below it is evicted
with only dead, evicted storages in between, so that its rebuild would need
it: an orphan, or one further down (a pending gradient below the dead loss
gradient and stacked scores of an LSTM). A useful storage that dies is not
evicted (after its orphans are rebuilt, those that fit) but stays resident as
an ordinary candidate, and so do dead storages rematerialized to rebuild
others (*dead remats*: a DenseNet layer's inputs are rebuilt one after another
from the same dead convolution outputs). Once it is no longer useful (checked
when an access is done and when deaths are settled), it is freed.

Deaths that happen while the allocator is busy (an op, a rematerialization, a
garbage-collector pass inside either) wait in a queue until it is done: a death
never changes the allocator under a running access. So do deaths during a pass of
Python's cycle collector (``CycleCollection``): it clears every weak reference to
the garbage before it runs any finalizer, a Tensor's death among them, so until the
pass is done the children lists no longer show values whose handles have not died
yet, and the policy would read a graph half torn down.
"""

from __future__ import annotations

import gc
import sys
import weakref
from collections import deque
from typing import TYPE_CHECKING

from .cycles import COLLECTION
from .errors import BudgetError, ThrashError
from .storage import Cell, Storage

if TYPE_CHECKING:
    from .allocator import Allocator


class Lifetimes:
    """Owns: ``dying`` (dead storages waiting for the policy, in the order they died),
    ``released`` (handles that died meanwhile, for the observer), ``dead_remats`` (dead
    storages rebuilt by the access in progress), ``kept_dead`` (dead storages kept while
    useful), ``superseded`` (old versions of parameters and buffers, ``supersede``),
    ``pending_error`` (an error met while settling deaths, raised by the next access) and
    ``rebuilding_orphans`` (set while orphans are rebuilt, which may fail)."""

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.dying: deque[Storage] = deque()
        self.released: list[Cell] = []
        self.dead_remats: list[Storage] = []
        self.kept_dead: dict[Storage, None] = {}
        self.superseded: weakref.WeakSet[Storage] = weakref.WeakSet()
        self.pending_error: BaseException | None = None
        self.rebuilding_orphans = False
        self.young_since = older_collections()  # (collect_garbage)
        self.survivors: tuple[int, list[weakref.ref[Storage]]] | None = None

    def collect_garbage(self) -> None:
        """Free the values that only garbage in reference cycles holds (a recursive
        closure's, a traceback's), so that what a run can do does not depend on when
        Python's cycle collector happens to run (on entering a budgeted runtime, and
        before a ``BudgetError``).

        What was made since this allocator was created stays in the collector's young
        generations until a collection of generation 1 or 2 runs (it moves the survivors
        to the oldest). Until then collecting the young generations frees every cycle
        that holds this allocator's values (a fraction of a millisecond), unless an
        object older than the allocator was made to hold one and then dropped; after
        it, only a full collection does (tens of milliseconds in a process that loaded a
        large library such as PyTorch)."""
        if older_collections() != self.young_since:
            gc.collect()
            return
        allocator = self.allocator
        # ``get_objects`` holds every young object, garbage included, while the storages
        # are picked out: a collection the weak references' allocations set off then
        # would find the garbage alive and move it to the oldest generation, beyond the
        # young collection below (seen with ``gc.set_threshold(1)``)
        automatic = gc.isenabled()
        gc.disable()
        try:
            young = [
                weakref.ref(obj)
                for generation in (0, 1)
                for obj in gc.get_objects(generation)
                if type(obj) is Storage and obj.allocator is allocator
            ]
        finally:
            if automatic:
                gc.enable()
        gc.collect(1)  # which moves the survivors on: the next collection is full
        self.survivors = (allocator.next_id, young)

    def take_survivors(self) -> list[Storage] | None:
        """Every storage of this allocator still alive, as ``collect_garbage`` found them in
        the young generations (None if it did not, or a storage was made since), so that
        the accelerator's table need not scan the whole heap for them (fast/table.py)."""
        survivors, self.survivors = self.survivors, None
        if survivors is None or survivors[0] != self.allocator.next_id:
            return None
        return [s for ref in survivors[1] if (s := ref()) is not None]

    def add_ref(self, cell: Cell) -> None:
        """A new external handle (a Tensor) to ``cell``'s value."""
        storage = cell.storage if cell.is_view else cell
        storage.external_refs += 1
        if storage.buffer is None:
            self.referenced_evicted(storage)
        observer = self.allocator.observer
        if observer is not None:
            observer.on_add_ref(cell)

    def release(self, cell: Cell) -> None:
        """An external handle died; the last one triggers the deallocation policy. An
        observer hears of a death while the allocator is busy when the access is done,
        with the policies (``settle``), so that a trace holds it where it takes effect."""
        allocator = self.allocator
        if allocator.observer is not None:
            collecting = COLLECTION.here()
            if allocator.busy or collecting:
                self.released.append(cell)
                if collecting:
                    COLLECTION.wait(self)
            else:
                allocator.observer.on_release(cell)
        storage = cell.storage if cell.is_view else cell
        storage.external_refs -= 1
        if storage.external_refs == 0:
            self.died(storage)

    def died(self, storage: Storage) -> None:
        """The last external reference died: apply the deallocation policy, now or, while
        the allocator is busy, when the access in progress is done, and during a pass of
        the cycle collector when the pass is. An observer hears of it at once."""
        observer = self.allocator.observer
        if observer is not None:
            observer.on_death(storage)
        self.dying.append(storage)
        if COLLECTION.here():
            COLLECTION.wait(self)
            return
        self.settle()

    def settle(self) -> None:
        """Apply the deallocation policy to the queued dead storages, in the order they died.

        Nothing runs while the allocator is busy: the access in progress calls this when
        it is done. An error while rebuilding orphans (a ThrashError) does not leave the
        dead storage resident: it is evicted anyway, and the error is raised by the next
        access or when the runtime exits (a death may happen inside ``Tensor.__del__``,
        where it could not surface)."""
        allocator = self.allocator
        if allocator.busy:
            return
        allocator.busy = True
        try:
            self.drain()
        finally:
            allocator.busy = False

    def drain(self) -> None:
        observer = self.allocator.observer
        while self.dying or self.released:
            released, self.released = self.released, []
            if observer is not None:
                for cell in released:
                    observer.on_release(cell)
            if self.dying:
                self.apply_policy(self.dying.popleft())
        self.free_dead_remats()  # what only the dead needed is garbage now

    def unlocked_dead(self, storage: Storage) -> None:
        """A storage that died while locked is unlocked: the policy applies now."""
        storage.evict_on_unlock = False
        if storage.external_refs == 0:
            self.died(storage)

    def apply_policy(self, storage: Storage) -> None:
        if storage.external_refs:
            return  # a new handle was made meanwhile
        allocator = self.allocator
        runtime = allocator.runtime
        policy = runtime.dealloc
        if policy == "ignore" or storage.banished:
            return
        if storage.locks:
            storage.evict_on_unlock = True
            return
        if policy == "banish" and self.banish(storage):
            return
        if storage.buffer is None or storage.op is None or storage.pinned:
            if runtime.as_prototype:
                allocator.eviction.candidates.kept.append(storage)  # a constant: never freed
            elif storage.op is None and storage.buffer is not None and storage in self.superseded:
                self.free_dead_constant(storage)
            return  # not resident, or not evictable
        if (
            allocator.ledger.budget is not None
            and runtime.rebuild_orphans
            and not runtime.as_prototype  # the paper's simulator: plain eager eviction
            and self.pending_error is None
            and has_evicted_child(storage)  # otherwise it has no orphans and is not useful
        ):
            orphans = orphans_to_rebuild(storage)
            if orphans:
                try:
                    self.rebuild_orphans(storage, orphans)
                except BaseException as error:  # noqa: BLE001 (kept, raised at a safe point)
                    # without the frames where it happened: they hold the dying run's
                    # values, which must not outlive the user's references to them
                    self.pending_error = error.with_traceback(None)
                if storage.buffer is None or storage.external_refs or storage.locks:
                    return
            if self.pending_error is None and self.is_useful(storage):
                self.kept_dead[storage] = None  # evicted ones below still need it
                return
        allocator.eviction.evict(storage, "dead")

    def supersede(self, storage: Storage) -> None:
        """``Tensor.assign`` replaced the constant ``storage`` (a parameter or buffer an
        update gave a new value): when it dies, ``free_dead_constant`` applies."""
        if storage.op is None and storage.buffer is not None:
            self.superseded.add(storage)

    def free_dead_constant(self, storage: Storage) -> None:
        """An old version of a parameter (or buffer) that an update replaced
        (``supersede``), once nobody references it, can still be read by recipes below
        it: its live children's, and through dead evicted ones, those of the values
        below them. A constant cannot be evicted, so it would stay for as long as they
        live: a state carried from step to step (``h = h.detach()``) would keep every
        step's old parameters. So the first resident values on every path down from it
        (through dead evicted storages) are made constants, as they would be had the
        update been in place, when together they hold no more bytes than it: their
        recipes go, and with them the last references to it and to the dead values
        between. Nothing is done when an evicted value someone references, a dead
        resident one (kept for what is below it), a locked one or another allocator's
        lies on the way, or past ``USEFUL_SEARCH`` storages: their rebuilds may need it."""
        self.superseded.discard(storage)
        if not storage.children:
            return
        allocator = self.allocator
        seen = {storage}
        stack = [storage]
        below: list[Storage] = []
        while stack:
            for child in stack.pop().live_children():
                if child in seen or child.op is None:
                    continue  # a constant (or banished) child reads nothing
                seen.add(child)
                if len(seen) > USEFUL_SEARCH or child.allocator is not allocator or child.locks:
                    return
                if child.buffer is None:
                    if child.external_refs:
                        return  # evicted and referenced: its rebuild may need the constant
                    stack.append(child)
                elif child.external_refs and not child.evict_on_unlock:
                    below.append(child)
                else:
                    return  # dead and resident: kept for what is below it
        if below and sum(child.nbytes for child in below) <= storage.nbytes:
            for child in below:  # in a trace: ANNOTATE CONSTANT, IF_RESIDENT
                self.to_constant(child, if_resident=True)

    def cut_dead_chains(self, storage: Storage) -> None:
        """A value fed back into its own recipe step after step, with nothing updated (a
        state carried under ``no_grad``), leaves a chain of dead values above the live
        one: their buffers go (``eager``), but their metadata stays, since the live value
        could be evicted and rebuilt from them, by a replay of the whole chain. So every
        ``CHAIN_CHECK`` recipes deep (``Storage.recipe_depth``; no bundled model's step
        is deeper than about 200) the values above a new one are walked, up to
        ``CHAIN_WALK`` of them: when at least half are dead, evicted and made from dead
        values and constants only (a backward pass's used gradients read live
        activations: no such chain), the live, resident ones that read a dead value
        become constants. Nothing is rebuilt through them any more, so the chain above
        them goes, and each keeps its value: no rebuild of anything else needs more than
        it did. A chain stays shorter than about ``CHAIN_CHECK`` recipes, and a step's
        graph is walked once every ``CHAIN_CHECK`` recipes deep. A replay of a trace
        makes the same cuts at the same ops (the same depths): they are not written in
        the trace."""
        allocator = self.allocator
        if storage.recipe_depth % CHAIN_CHECK or allocator.runtime.as_prototype:
            return  # (the paper's simulator keeps every chain)
        seen = {storage}
        stack = list(storage.parents)
        dead = 0
        reading_dead: list[Storage] = []
        while stack and len(seen) <= CHAIN_WALK:
            node = stack.pop()
            if node in seen or node.op is None or node.allocator is not allocator:
                continue
            seen.add(node)
            if dead_evicted(node):
                dead += all(p.op is None or dead_evicted(p) for p in node.parents)
            elif (
                node.buffer is not None
                and node.external_refs
                and any(map(dead_evicted, node.parents))
            ):
                reading_dead.append(node)
            stack.extend(node.parents)
        if 2 * dead >= CHAIN_WALK:
            for node in reading_dead:
                self.to_constant(node)

    def referenced_evicted(self, storage: Storage) -> None:
        """A handle was made to an evicted value (nothing to do here; the accelerator's
        usefulness answers listen: fast/usefulness.py)."""

    def is_useful(self, storage: Storage) -> bool:
        """``useful_dead(storage)``; while accelerated, ``fast/usefulness.py``'s instead
        (an attribute of this object, set by ``fast.install``)."""
        return useful_dead(storage)

    def raise_pending(self) -> None:
        """Raise an error that happened where it could not surface (see ``settle``)."""
        error = self.pending_error
        if error is not None:
            self.pending_error = None
            try:
                raise error
            finally:
                del error  # no cycle through this frame: its traceback would keep it

    def rebuild_orphans(self, storage: Storage, orphans: list[Storage]) -> None:
        """Rematerialize ``orphans``, those of a dead, resident storage, holding it
        resident. An orphan that does not fit in the budget stays evicted: it is not
        needed yet."""
        allocator = self.allocator
        stats = allocator.stats
        before = stats.remats
        storage.locks += 1
        allocator.eviction.candidates.touch(storage)
        self.rebuilding_orphans = True  # a BudgetError here is expected: no collection
        remat = allocator.remat
        try:
            remat.unlock(remat.lock(orphans, f"orphans of #{storage.id}"))
        except ThrashError:
            raise
        except BudgetError:
            pass
        finally:
            self.rebuilding_orphans = False
            storage.locks -= 1
            self.free_dead_remats()
        for orphan in orphans:
            if orphan.buffer is not None:
                orphan.orphan_rebuilt_at = orphan.last_access
        stats.orphan_remats += stats.remats - before

    def banish(self, storage: Storage) -> bool:
        """Free a dead storage for good; its children lose their way to be recomputed, so
        they become constants. Not possible while an evicted child still needs it."""
        if storage.op is None:
            return False
        children = storage.live_children()
        if any(c.buffer is None and not c.banished for c in children):
            return False
        for child in children:
            if child.op is not None:
                child.allocator.lifetimes.to_constant(child)  # its owner counts it
        allocator = self.allocator
        if storage.buffer is not None:
            storage.buffer = None
            allocator.ledger.memory -= storage.nbytes
            allocator.eviction.candidates.discard(storage)
            if storage.pinned:
                allocator.ledger.pinned_bytes -= storage.nbytes
        else:
            allocator.eviction.left_evicted(storage)
        storage.drop_recipe()
        storage.banished = True
        storage.pinned, storage.pins = False, 0
        allocator.stats.banished += 1
        allocator.record("banish", storage)
        if allocator.addresses is not None:
            allocator.addresses.free(storage)
        return True

    def to_constant(self, storage: Storage, if_resident: bool | None = None) -> None:
        """Drop the recipe of a resident storage: it is counted as a constant from now on.
        The observer hears of it (``make_constant``'s rule) unless ``if_resident`` is None
        (a banished storage's child)."""
        storage.drop_recipe()
        allocator = self.allocator
        ledger = allocator.ledger
        allocator.eviction.candidates.discard(storage)
        if storage.pinned:
            storage.pinned, storage.pins = False, 0
            ledger.pinned_bytes -= storage.nbytes
        ledger.constant_bytes += storage.nbytes
        observer = allocator.observer
        if observer is not None and if_resident is not None:
            if if_resident:
                observer.on_make_constant_if_resident(storage)
            else:
                observer.on_make_constant(storage)

    def pin(self, storage: Storage) -> None:
        """Make a storage unevictable (rematerializing it first if it was evicted) until
        as many ``unpin`` calls as ``pin`` calls: pins are counted, so two handles (a
        value and a view of it) pinned by two pieces of code stay pinned until both
        unpin. A constant is never evicted: pinning it does nothing."""
        if storage.op is None:
            return
        if storage.pinned:
            storage.pins += 1
            return
        allocator = self.allocator
        with allocator.holding(storage):
            storage.pinned = True
            storage.pins = 1
            allocator.eviction.candidates.discard(storage)
            allocator.ledger.pinned_bytes += storage.nbytes

    def unpin(self, storage: Storage) -> None:
        """Undo one ``pin``; the storage is evictable again when every pin is undone."""
        if storage.op is None:
            return
        if not storage.pinned:
            raise RuntimeError(
                f"unpin: storage #{storage.id} ({storage.nbytes:,} bytes) is not pinned "
                "(each unpin() undoes one pin())"
            )
        storage.pins -= 1
        if storage.pins:
            return
        storage.pinned = False
        self.allocator.ledger.pinned_bytes -= storage.nbytes
        if storage.buffer is not None:
            self.allocator.eviction.candidates.add(storage)

    def make_constant(self, storage: Storage, if_resident: bool = False) -> None:
        """Drop a storage's recipe (rematerializing it first if needed): it becomes a
        constant, never evicted, and no longer keeps its inputs' metadata alive. With
        ``if_resident`` an evicted storage keeps its recipe instead (nothing is
        recomputed); an observer is told either way, so that a trace recorded without a
        budget replays the same rule under one."""
        if storage.op is None:
            return
        allocator = self.allocator
        observer = allocator.observer
        if if_resident and storage.buffer is None:
            if observer is not None:
                observer.on_make_constant_if_resident(storage)
            return
        if storage.buffer is None:
            with allocator.holding(storage):
                self.to_constant(storage, if_resident)
        else:  # nothing to rematerialize, nothing that could evict
            self.to_constant(storage, if_resident)

    def forget(self, storage: Storage) -> None:
        """A storage's metadata was garbage collected (``Storage.__del__``). A resident one
        can be, in a reference cycle with its last handle, whose release may come after:
        the buffer goes now, so that the release finds nothing to evict."""
        allocator = self.allocator
        eviction = allocator.eviction
        if storage.buffer is not None:
            storage.buffer = None
            ledger = allocator.ledger
            ledger.memory -= storage.nbytes
            if storage.op is None:
                ledger.constant_bytes -= storage.nbytes
            elif storage.pinned:
                ledger.pinned_bytes -= storage.nbytes
            if allocator.runtimes and allocator.runtime.events is not None:
                allocator.record("free", storage)
            if allocator.addresses is not None:
                allocator.addresses.free(storage)
        elif eviction.scoring:
            # a garbage-collector pass inside a score: the cached values being read may
            # include this storage, so start a new epoch rather than edit them
            eviction.neighbourhood.invalidate_all()
            eviction.eq_classes.invalidate_all()
        else:
            eviction.left_evicted(storage)

    def free_dead_remats(self) -> None:
        """Storages nobody references, rematerialized only to recompute others, stay
        resident as candidates while they are useful (``useful_dead``) and are freed once
        the access that needed them is done and they are not (unless dealloc is
        ``ignore``, or ``keep_dead_remats`` keeps them all): no garbage outlives the
        operation, and a run does not depend on earlier ones."""
        kept = self.kept_dead
        if not self.dead_remats and not kept:
            return
        for storage in self.dead_remats:
            kept[storage] = None
        self.dead_remats = []
        runtime = self.allocator.runtime
        if runtime.dealloc == "ignore" or runtime.keep_dead_remats or runtime.as_prototype:
            kept.clear()
            return
        for storage in list(kept):
            if storage.buffer is None or storage.external_refs or not storage.evictable:
                del kept[storage]
            elif not storage.locks and not self.is_useful(storage):
                del kept[storage]
                self.allocator.eviction.evict(storage, "dead")


USEFUL_SEARCH = 256  # storages visited at most when looking below a dead storage
CHAIN_CHECK = 1024  # every this many recipes deep, a new value looks for dead chains above
CHAIN_WALK = 256  # ... among at most this many values (cut_dead_chains)


def useful_dead(storage: Storage) -> bool:
    """Whether a dead storage would shorten the rebuild of an evicted, referenced one: one
    reached from it through evicted children that nobody references (at most
    ``USEFUL_SEARCH`` storages visited)."""
    seen = {id(storage)}
    stack = [storage]
    while stack and len(seen) < USEFUL_SEARCH:
        for child in stack.pop().live_children():
            if child.buffer is not None or id(child) in seen:
                continue
            seen.add(id(child))
            if child.banished or child.op is None:
                continue
            if child.external_refs > 0:
                return True
            stack.append(child)
    return False


def dead_evicted(storage: Storage) -> bool:
    """Evicted with no handle: kept only as metadata for what may be rebuilt from it."""
    return storage.op is not None and storage.buffer is None and not storage.external_refs


def has_evicted_child(storage: Storage) -> bool:
    """Whether a live child of ``storage`` is evicted: what orphans and usefulness need."""
    return any(child.buffer is None for child in storage.live_children())


def orphans_to_rebuild(storage: Storage) -> list[Storage]:
    """The orphans of a dead ``storage`` to rebuild before it is evicted: none when
    together they hold more bytes than it (it is kept instead, while useful)."""
    orphans = orphans_of(storage)
    if sum(orphan.nbytes for orphan in orphans) > storage.nbytes:
        return []
    return orphans


def orphans_of(storage: Storage) -> list[Storage]:
    """Evicted children of ``storage`` that are still referenced, except those evicted
    again since they were last rebuilt as orphans without anything reading them:
    rebuilding those once more would only repeat the same eviction."""
    return [
        c
        for c in storage.live_children()
        if c.buffer is None
        and not c.banished
        and c.external_refs > 0
        and c.op is not None
        and c.orphan_rebuilt_at != c.last_access
    ]


def older_collections() -> int:
    """How many collections of generations 1 and 2 Python's cycle collector has run."""
    stats = gc.get_stats()
    return stats[1]["collections"] + stats[2]["collections"]


def raising() -> bool:
    """Whether an exception is being handled (an error already on its way up)."""
    return sys.exc_info()[1] is not None
