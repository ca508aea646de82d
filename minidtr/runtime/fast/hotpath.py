"""Accelerates ``Allocator.compute_general`` and ``Lifetimes.release`` for the cases that
make up nearly every op and every death: the same steps, inlined, with nothing that
cannot happen in those cases.

``compute``: an op that is not a view, whose inputs are all resident values of this
allocator and whose outputs and kernel workspace fit the budget without evicting, while
nothing watches (no observer, no event log, no audit). Nothing can evict an
input meanwhile (no room is made, and deaths wait while the allocator is busy), so
they are not even locked: no rematerialization frame, no search, no event. It makes
the same storages, counts the same bytes and moves the clock as the general path
would; it returns None, having changed nothing, for every other op.

``release``: a temporary dying between ops under ``eager`` with no orphans to
rebuild, no neighbourhood term watched but e*'s and no usefulness remembered
(``usefulness.py``) is evicted inline (what ``Lifetimes.apply_policy`` would do:
``Eviction.evict(storage, "dead")``), also when it has evicted children, once their
orphans and its usefulness were asked as ``apply_policy`` asks; every other death takes
the reference path.

``read``: ``Allocator.read``, the same steps without a generator's context.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..costs import NOMINAL_BYTES_PER_NS, NOMINAL_FLOPS_PER_NS, model_cost
from ..cycles import COLLECTION
from ..errors import BudgetError
from ..lifetime import CHAIN_CHECK, orphans_to_rebuild
from ..storage import Cell, Recipe, Storage, resident_storages
from ..views import array_of
from .table import LAZY_SLACK
from .usefulness import has_evicted_child

if TYPE_CHECKING:
    from ..allocator import Allocator

NEW_STORAGE = Storage.new


class FastPath:
    """The hot paths of one allocator (see the module docstring)."""

    __slots__ = ("allocator", "ledger", "lifetimes", "table", "usefulness", "columns")

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.ledger = allocator.ledger
        self.lifetimes = allocator.lifetimes
        self.table = allocator.eviction.candidates
        self.usefulness = self.table.usefulness  # the table keeps it for good (``clear``)
        self.columns = None  # the arena's blocks as arrays, for a window heuristic (addresses.py)

    def compute(self, op: Any, inputs: tuple, metas: Sequence, device: Any, constant: bool) -> Any:
        """``Allocator.compute_general``, all inlined, for the module docstring's cases."""
        if len(metas) == 1:
            shape, dtype = metas[0]
            nbytes, sizes = math.prod(shape) * dtype.itemsize, None
        else:
            sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in metas]
            nbytes = sum(sizes)
        allocator, ledger, runtime = self.allocator, self.ledger, self.allocator.runtime
        budget = ledger.budget
        if (
            (budget is not None and ledger.memory + nbytes > budget)
            or allocator.observer is not None
            or allocator.addresses is not None  # a contiguous fit places every value
            or runtime.events is not None
            or allocator.audit is not None
            or device != allocator.device
            or (parents := resident_storages(inputs)) is None
            or (allocator.alive > 1 and not all_owned(parents, allocator))  # its owner locks it
        ):
            return None
        workspace = op.workspace(*inputs) if op.has_workspace else 0
        if workspace and budget is not None and ledger.memory + nbytes + workspace > budget:
            return None
        allocator.busy = True
        for storage in parents:  # (the candidate table re-reads the dirty rows: table.py)
            storage.last_access = allocator.clock  # an access counts from when it is requested
            self.table.dirty[storage.row] = 1
        stats = runtime.stats_
        try:
            arrays = []
            for cell in inputs:
                arrays.append(array_of(cell) if cell.is_view else cell.buffer)
            memory = ledger.memory = ledger.memory + nbytes + workspace  # outputs and workspace
            if memory > stats.peak_memory:
                stats.peak_memory = memory
            allocator.kernel_workspace = workspace
            try:
                y, cost = allocator.run_kernel(op, device, arrays, metas)
                if runtime.cost != "time":
                    cost = estimated_cost(runtime.cost, op, inputs, metas)
            except BaseException:
                ledger.memory -= nbytes + workspace
                raise
            finally:
                allocator.kernel_workspace = 0
            ledger.memory -= workspace
            allocator.clock += cost
            stats.ops += 1
            stats.compute_cost += cost
            if sizes is None and not constant:
                return [self.new_evictable(op, inputs, parents, device, y, metas[0], nbytes, cost)]
            return self.new_outputs(
                op, inputs, parents, device, y, metas, sizes or [nbytes], cost, constant
            )
        finally:
            if self.lifetimes.dying or self.lifetimes.released or self.lifetimes.kept_dead:
                allocator.done((), False)  # deaths during the op, dead storages kept meanwhile
            else:
                allocator.busy = False

    def new_outputs(
        self,
        op: Any,
        inputs: tuple,
        parents: tuple,
        device: Any,
        results: Any,
        metas: Sequence,
        sizes: list,
        cost: float,
        constant: bool,
    ) -> list[Storage]:
        """``outputs.new_outputs`` with nothing watching (no observer, no event log):
        several outputs sharing a ``Recipe``, or constants (optimizer updates, running
        statistics), made as ``new_evictable`` makes one."""
        results = (results,) if op.n_outputs == 1 else results
        if constant:
            allocator = self.allocator
            allocator.ledger.constant_bytes += sum(sizes)
            cells = []
            for i, (shape, dtype) in enumerate(metas):
                result = results[i]
                allocator.next_id += 1
                cells.append(NEW_STORAGE(
                    allocator, allocator.next_id, op.name, sizes[i], shape, dtype, device, i,
                    True if device is None else result.flags.c_contiguous, result, 0.0,
                    allocator.clock,
                ))  # fmt: skip
            return cells
        recipe = Recipe(op, inputs, parents, device)
        recipe.run_cost = cost
        recipe.out_nbytes = tuple(sizes)
        new = self.new_evictable
        cells = [
            new(op, inputs, parents, device, results[i], meta, sizes[i], cost, i, recipe)
            for i, meta in enumerate(metas)
        ]
        recipe.outputs = tuple([weakref.ref(storage) for storage in cells])
        return cells

    def new_evictable(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        parents: tuple[Storage, ...],
        device: str | None,
        result: Any,
        meta: tuple,
        nbytes: int,
        cost: float,
        index: int = 0,
        shared: Recipe | None = None,
    ) -> Storage:
        """``outputs.new_evictable``, with ``CandidateTable.add`` of a new storage and
        ``Storage.tell_parents`` inlined."""
        allocator = self.allocator
        allocator.next_id += 1
        shape, dtype = meta
        # ``Storage.new(allocator=..., ...)`` as the reference makes it, positionally
        # (tests/test_reference.py compares the storages)
        storage = NEW_STORAGE(
            allocator, allocator.next_id, op.name, nbytes, shape, dtype, device, index,
            True if device is None else result.flags.c_contiguous, result, cost,
            allocator.clock, op, inputs, parents, shared,
        )  # fmt: skip
        table = self.table
        if table.listing:  # else its place is its id (``CandidateTable.add``)
            storage.row = len(table.storages)
            table.storages.append(storage)
            table.dirty.append(1)
            table.count += 1
        ref = weakref.ref(storage)
        depth = 0
        for parent in parents:
            if parent.recipe_depth > depth:
                depth = parent.recipe_depth
            children = parent.children
            if not children:
                parent.children = ref
            elif type(children) is list:
                children.append(ref)
                if len(children) >= parent.prune_at:
                    parent.prune_children()
            else:
                parent.children = [children, ref]
        storage.recipe_depth = depth = depth + 1
        if not depth % CHAIN_CHECK:
            self.lifetimes.cut_dead_chains(storage)
        return storage

    def read(self, cell: Cell) -> Any:
        """``Allocator.read``: ``holding``'s steps written out, without the generator's
        context, whose entering and leaving took longer than the rest of a read (one runs
        per gradient accumulation)."""
        allocator = self.allocator
        lock = allocator.lock  # (acquire and release: a ``with`` costs twice as much)
        lock.acquire()
        try:
            allocator.check_pending()
            was_busy, allocator.busy = allocator.busy, True
            locked: Sequence[Storage] = ()
            allocator.accesses += 1
            try:
                try:
                    locked = allocator.remat.lock([cell.storage])
                except BudgetError as error:
                    from ..allocator import rebuild_error  # (allocator.py imports this module)

                    raise rebuild_error(error, "a read") from None
                if allocator.observer is not None:
                    allocator.observer.on_read(cell)
                return array_of(cell)
            finally:
                allocator.accesses -= 1
                allocator.done(locked, was_busy)
        finally:
            lock.release()

    def release(self, cell: Cell) -> None:
        """``Lifetimes.release``, a plain temporary's death inlined (callers hold the lock)."""
        allocator, lifetimes = self.allocator, self.lifetimes
        storage = cell.storage if cell.is_view else cell
        if self.usefulness.regions and storage.external_refs == 1 and storage.buffer is None:
            self.usefulness.changed(storage)  # an evicted one's last handle: a yes may be a no
        if allocator.observer is not None or allocator.addresses is not None:
            lifetimes.release(cell)
            return
        storage.external_refs -= 1
        if storage.external_refs:
            return
        if storage.op is None:  # a constant: it goes with its metadata (forget), unless
            if storage in lifetimes.superseded:  # an old version recipes may still read
                lifetimes.died(storage)  # (free_dead_constant)
            return
        runtime, table, tracking = allocator.runtime, self.table, allocator.eviction.tracking
        if (
            allocator.busy
            or COLLECTION.running  # (``cycles.CycleCollection``)
            or lifetimes.dying
            or lifetimes.released
            or storage.locks
            or lifetimes.dead_remats
            or lifetimes.kept_dead
            or self.usefulness.regions  # an inline eviction would not be heard by it
            or not (  # a plain death: apply_policy would evict it at once, nothing else
                runtime.dealloc == "eager"
                and storage.buffer is not None
                and not storage.pinned
                and runtime.events is None
                and (tracking is None or tracking == "estar")
                and (
                    not table.listing  # else: no orphan made, no term watched but e*'s
                    or table.watching in (None, "estar")
                    and not (
                        (table.orphans_possible or allocator.lends)
                        and has_evicted_child(storage)
                        and not self.evicted_at_once(storage)
                    )
                )
            )
        ):
            lifetimes.died(storage)
            return
        # evict(storage, "dead") inlined, with the table's pop (no Python runs: no ``busy``)
        storage.buffer = None
        if tracking is not None:
            allocator.eviction.neighbourhood.on_evicted(storage)  # waits for a decision
        self.ledger.memory -= storage.nbytes
        row = storage.row
        if row:
            table.storages[row] = None
            table.dirty[row] = 1
            storage.row = 0
            table.count -= 1
            if len(table.storages) > 2 * table.count + LAZY_SLACK:
                table.compact()
        runtime.stats_.evictions += 1
        runtime.stats_.dead_evictions += 1

    def evicted_at_once(self, storage: Storage) -> bool:
        """Whether ``Lifetimes.apply_policy`` would evict a dead ``storage`` that has an
        evicted child at once: no orphans to rebuild, not useful (``usefulness.py``). The
        deaths of a budgeted step's temporaries are mostly such (on the LSTM at 0.3, 124
        a step, every one evicted)."""
        allocator, lifetimes = self.allocator, self.lifetimes
        runtime = allocator.runtime
        if (
            self.ledger.budget is None
            or not runtime.rebuild_orphans
            or runtime.as_prototype
            or lifetimes.pending_error is not None
        ):
            return True
        if orphans_to_rebuild(storage):
            return False
        return not lifetimes.is_useful(storage)


def all_owned(storages: tuple[Storage, ...], allocator: Allocator) -> bool:
    return all(storage.allocator is allocator for storage in storages)


def estimated_cost(model: Any, op: Any, inputs: Sequence, metas: Sequence) -> float:
    """``costs.model_cost``; for an op that keeps ``Op.cost``'s default estimate
    (``default_cost``) under ``flops``, the same estimate read from the input cells,
    without the lists of metas (a third of a microsecond an op; whole numbers, so the
    same float)."""
    if model != "flops" or not getattr(op, "default_cost", False):
        return model_cost(model, op, inputs, metas)
    flops = nbytes = 0
    for shape, dtype in metas:
        n = math.prod(shape)
        flops += n
        nbytes += n * dtype.itemsize
    for cell in inputs:
        nbytes += math.prod(cell.shape) * cell.dtype.itemsize
    return max(flops / NOMINAL_FLOPS_PER_NS + nbytes / NOMINAL_BYTES_PER_NS, 1.0)
