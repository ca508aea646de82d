"""The allocator: the only place buffers are created, counted, evicted and rematerialized.

Every op goes through ``compute``: lock its inputs (rematerializing evicted
ones first, depth-first with an explicit stack), make room for its outputs by
evicting the lowest-scoring unlocked storages until they fit the budget, run
the kernel, record the outputs with their recipe, unlock. Most ops need
neither a rematerialization nor an eviction, and take the fast path
(``_compute_resident``) straight through. Reading a value (``read``) takes the
same path. The kernel is whatever the recipe's op does, so the simulator
drives this same class with ops that only return placeholders: the live
runtime and the simulator share every policy decision.

Locking and rematerializing live in ``remat.py``, choosing and evicting
victims in ``eviction.py``, references and the deallocation policies in
``lifetime.py`` (mixins of ``Allocator``).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import random
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any

import numpy as np

from .. import backend
from .candidates import CandidateTable
from .eviction import Eviction
from .lifetime import Lifetime
from .neighbourhood import EquivalenceClasses, EvictedNeighbourhood
from .remat import Rematerialization
from .runtime import WALL_GUARD_AFTER, BudgetError, Runtime, Stats, ThrashError
from .storage import (
    MAX_VIEW_DEPTH,
    Cell,
    Recipe,
    Storage,
    StridedLayout,
    ViewCell,
    distinct_storages,
    resident_storages,
)

NOMINAL_FLOPS_PER_NS = 32.0
NOMINAL_BYTES_PER_NS = 8.0

# Check every kernel's outputs against the shapes and dtypes its op declared (``infer``):
# catches bugs in ops, at a cost on every op, so the test suite turns it on
# (tests/conftest.py) and ordinary runs leave it off.
CHECK_OPS = False


BYTE = np.dtype(np.uint8)


def is_c_contiguous(array: Any) -> bool:
    """Layout of a real array (a view's layout decides whether reshape can view it);
    the simulator's placeholders count as contiguous."""
    flags = getattr(array, "flags", None)
    return True if flags is None else bool(flags.c_contiguous)


def meta_nbytes(shape: tuple[int, ...], dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def check_outputs(op: Any, metas: Sequence[tuple], results: Sequence[Any]) -> None:
    """Raise if a kernel's results differ from the (shape, dtype) its op declared."""
    for i, ((shape, dtype), r) in enumerate(zip(metas, results, strict=True)):
        if r.shape != shape or r.dtype != dtype:
            raise AssertionError(
                f"{op.name}: output {i} is {r.shape} {r.dtype}, but the op declared "
                f"{shape} {dtype} (a bug in the op)"
            )


class Allocator(Rematerialization, Eviction, Lifetime):
    """Budgeted memory for one device, with the DTR eviction manager built in."""

    def __init__(self, device: str | None = "cpu", default: Runtime | None = None):
        self.device = device
        self.xp = backend.xp_for(device) if device is not None else None
        self.memory = 0
        self.constant_bytes = 0
        self.pinned_bytes = 0
        self.clock = 0.0
        # resident, evictable storages, in insertion order, while ``listing``
        self.candidates = CandidateTable()
        # whether ``candidates`` is kept: only while a budget (or the ``ignore`` policy, whose
        # dead storages the table keeps resident) is active; see ``_start_listing``. (An
        # attribute more would pass CPython's 30 shared dict keys: slower attribute reads.)
        self.listing = False
        self.neighbourhood = EvictedNeighbourhood()  # h_DTR's exact e*
        self.eq_classes = EquivalenceClasses()  # h_DTR^eq's union-find
        self.tracking: str | None = None  # which of the two is kept up to date
        self.next_id = 0
        self.budget: int | None = None
        self.observer = None  # a trace recorder (minidtr.sim) when one is attached
        self._sampler = random.Random(0)
        self._dead_remats: list[Storage] = []
        self._kept_dead: dict[Storage, None] = {}  # dead remats kept while useful
        self._dying: deque[Storage] = deque()  # dead storages waiting for the policy
        self._released: list[Cell] = []  # handles that died meanwhile, for the observer
        self._busy = False  # inside an op, a rematerialization or a search: deaths wait
        self._scoring = False  # inside an eviction search (only the garbage collector can
        # free a storage then)
        self._tentative = False  # rebuilding orphans, which may fail: no collection then
        self.pending_error: BaseException | None = None  # raised by the next access
        self.cascades = 0  # accesses that rematerialized something (numbers remat events)
        self._overhead_since: float | None = None  # eviction work under way since then
        # set by deferred_interrupts' SIGINT handler: raise KeyboardInterrupt at the next
        # point where the allocator's state is consistent (before an op, a remat, a search)
        self.interrupt_requested = False
        self._accesses = 0  # ops and reads under way (not their clean-up)
        self.runtimes: list[Runtime] = []
        self._snapshots: list[Stats] = []
        self.push(default or Runtime(device=device or "cpu"))

    # ---- runtimes -----------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        return self.runtimes[-1]

    @property
    def stats(self) -> Stats:
        return self.runtimes[-1].stats_

    def push(self, runtime: Runtime) -> None:
        if runtime.allocator is not None:
            raise RuntimeError(f"{runtime!r} is already active; a runtime cannot be re-entered")
        if runtime.budget is not None and self.memory > 0:
            # garbage in reference cycles (left by earlier work) must neither count against
            # this run nor leave when the cycle collector happens to run: decisions under
            # a budget then depend on the program alone (an allocator holding nothing has
            # nothing to lose, and skips the cost of a full collection)
            gc.collect()
        runtime.allocator = self
        runtime._active_since = time.perf_counter()
        self.runtimes.append(runtime)
        self._snapshots.append(dataclasses.replace(runtime.stats_))
        self._sampler.seed(runtime.seed)
        try:
            self.apply_budget()
        except BudgetError:
            self.pop(runtime)
            raise
        if self.device == "cuda":
            backend.install_cuda_oom_handler(self.free_device_memory)

    def pop(self, runtime: Runtime) -> None:
        if self.runtimes[-1] is not runtime:
            raise RuntimeError(f"{runtime!r} is not the innermost active runtime")
        self.runtimes.pop()
        since = self._snapshots.pop()
        runtime.stats_.wall_time += time.perf_counter() - runtime._active_since
        runtime.allocator = None
        if self.runtimes:
            self.runtimes[-1].stats_.add(runtime.stats_, since)
            if runtime.dealloc == "ignore" and self.runtime.dealloc != "ignore":
                # what died while deallocation was ignored falls to the policy in force now
                for storage in [s for s in self.candidates if s.external_refs == 0]:
                    if storage.buffer is not None and not storage.locks:
                        self._on_dead(storage)
            self.apply_budget()

    def apply_budget(self) -> None:
        """Recompute the effective budget (the tightest active one) and evict to meet it."""
        budgets = [rt.budget for rt in self.runtimes if rt.budget is not None]
        self.budget = min(budgets) if budgets else None
        if self.budget is not None or any(rt.dealloc == "ignore" for rt in self.runtimes):
            if not self.listing:
                self._start_listing()
        elif self.listing:
            self._stop_listing()
        if self.budget is None:
            # nothing is scored: stop maintaining e*, and stop flagging the rows a change
            # touches (the next decision re-flags every row). Flagging for msps walks
            # every evicted descendant, so a long evicted chain freed after an msps run
            # would walk its whole remaining tail once per death.
            self.track(None)
            self.candidates.watching = None
        if self.budget is not None and self.memory > self.budget:
            was_busy, self._busy = self._busy, True
            try:
                self._evict_until(self.budget, "entering the runtime", 0)
            finally:
                self._done([], was_busy)
        self._note_peak()

    def _start_listing(self) -> None:
        """Fill the candidate table with the resident, evictable storages alive now, in the
        order a table kept all along would hold them (``CandidateTable.listed_at``).

        Without a budget nothing is scored, so no table is kept (its ``add`` and ``pop``
        cost 7-9% of an op's instructions). A resident storage then lives as long as
        something references it, and every live ``Storage`` is tracked by Python's cycle
        collector, so ``gc.get_objects()`` finds them all (one pass over the heap, as
        entering a budgeted runtime already makes with ``gc.collect``). It is skipped when
        every resident byte is a constant's or pinned (a storage of 0 bytes made without a
        budget is then not listed: evicting it would free nothing). A storage frozen by
        ``gc.freeze()`` is not in ``gc.get_objects()``: it stays resident, unevictable."""
        self.listing = True
        if self.memory == self.constant_bytes + self.pinned_bytes:
            return
        found = [
            obj
            for obj in gc.get_objects()
            if type(obj) is Storage
            and obj.allocator is self
            and obj.buffer is not None
            and obj.op is not None
            and not obj.pinned
        ]
        table = self.candidates
        listed_at = table.listed_at
        found.sort(key=lambda s: listed_at.get(s) or (s.id, 0))
        for storage in found:
            table.add(storage)

    def _stop_listing(self) -> None:
        """Empty the candidate table (no budget is active any more), remembering its order
        for a later ``_start_listing``: as if each storage had been added again now."""
        table = self.candidates
        for storage in table:
            table.note_listed(storage, self.next_id)
            storage.row = 0
        table.clear()
        self.listing = False

    def _add_candidate(self, storage: Storage) -> None:
        if self.listing:
            self.candidates.add(storage)
        else:
            self.candidates.note_listed(storage, self.next_id)

    # ---- constants -----------------------------------------------------------------

    def add_constant(
        self,
        make_array: Callable[[], Any],
        nbytes: int,
        name: str = "constant",
        shape: tuple[int, ...] | None = None,
        dtype=None,
    ) -> Storage:
        """Register a buffer with no recipe (an input, a parameter): counted, never
        evicted. Room is made before ``make_array`` allocates, so the budget holds.
        The value's ``shape`` and ``dtype`` default to ``nbytes`` bytes."""
        self._check_pending()
        if shape is None:
            shape, dtype = (nbytes,), BYTE
        self.next_id += 1
        storage = Storage(self, self.next_id, name, nbytes, shape, dtype, self.device)
        was_busy, self._busy = self._busy, True
        try:
            self._reserve(nbytes, name)
            try:
                array = make_array()
            except BaseException:
                self.memory -= nbytes
                raise
            if int(array.nbytes) != nbytes:
                self.memory -= nbytes
                raise AssertionError(f"{name}: made {array.nbytes} bytes, declared {nbytes}")
            storage.buffer = array
            storage.last_access = self.clock
            self.constant_bytes += nbytes
            if self.observer is not None:
                self.observer.on_constant(storage)
        finally:
            self._done([], was_busy)
        self._record("alloc", storage)
        return storage

    # ---- running ops ---------------------------------------------------------------

    def compute(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        metas: Sequence[tuple],
        device: str | None,
        constant: bool = False,
    ) -> list[Cell]:
        """Run ``op`` on ``inputs`` under the budget and return its output cells.

        ``metas`` are the (shape, dtype) of the outputs, known before running so
        that room is made before any buffer exists. With ``constant`` the outputs
        keep no recipe: they are constants, never evicted (optimizer updates,
        running statistics), so no chain of recipes grows from step to step.

        This is the hot path of every op, in two parts. Most ops take the fast path
        (``_compute_resident``): not a view, every input resident, room without
        evicting. The others take ``_compute_general``, which rematerializes evicted
        inputs, evicts to make room, and makes views.
        """
        if self.interrupt_requested:
            raise KeyboardInterrupt
        if not self._busy:
            if self.pending_error is not None:
                self.raise_pending()
            if not op.is_view:
                outputs = self._compute_resident(op, inputs, metas, device, constant)
                if outputs is not None:
                    return outputs
        return self._compute_general(op, inputs, metas, device, constant)

    def _compute_resident(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        metas: Sequence[tuple],
        device: str | None,
        constant: bool,
    ) -> list[Storage] | None:
        """``compute``'s fast path: an op that is not a view, whose inputs are all
        resident and whose outputs fit the budget without evicting, while nothing watches
        (no observer, no event log) and the cost is the measured time. Nothing can evict
        an input meanwhile (no room is made, and deaths wait while the allocator is busy),
        so they are not even locked: no rematerialization frame, no search, no event.
        Returns None, having changed nothing, when the op is not such a case."""
        if len(metas) == 1:
            shape, dtype = metas[0]
            nbytes, sizes = dtype.itemsize, None
            for d in shape:
                nbytes *= d
        else:
            sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in metas]
            nbytes = sum(sizes)
        runtime = self.runtimes[-1]
        if (
            (self.budget is not None and self.memory + nbytes > self.budget)
            or self.observer is not None
            or runtime.events is not None
            or runtime.cost != "time"
            or device != self.device
            or (parents := resident_storages(inputs)) is None
        ):
            return None
        for storage in parents:
            if storage.allocator is not self:
                return None  # another allocator's value: locked through its owner
        self._busy = True
        clock = self.clock
        dirty = self.candidates.dirty  # the candidate table re-reads these rows (candidates.py)
        for storage in parents:
            storage.last_access = clock  # an access counts from when it is requested
            dirty[storage.row] = 1
        try:
            arrays = []
            for cell in inputs:
                arrays.append(self._array(cell) if cell.is_view else cell.buffer)
            memory = self.memory = self.memory + nbytes  # fits: checked above
            stats = runtime.stats_
            if memory > stats.peak_memory:
                stats.peak_memory = memory
            try:
                result, cost = self._run_kernel(op, device, arrays, metas)
            except BaseException:
                self.memory -= nbytes
                raise
            self.clock += cost
            stats.ops += 1
            stats.compute_cost += cost
            if sizes is None and not constant:
                outputs = [
                    self._new_evictable(
                        op, inputs, parents, device, 0, result, metas[0], nbytes, cost
                    )
                ]
            else:
                outputs = self._new_outputs(
                    op, inputs, parents, device, result, metas, sizes or [nbytes], cost, constant
                )
        finally:
            if self._dying or self._released or self._kept_dead:
                self._done((), False)  # deaths during the op, dead storages kept meanwhile
            else:
                self._busy = False
        return outputs

    def _compute_general(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        metas: Sequence[tuple],
        device: str | None,
        constant: bool,
    ) -> list[Cell]:
        """``compute`` for every case: lock the inputs (``_lock``, which rematerializes
        the evicted ones), make room for the outputs (``_reserve``, which evicts), run
        the kernel, record the outputs, unlock."""
        parents = distinct_storages(inputs)
        was_busy, self._busy = self._busy, True
        locked: Sequence[Storage] = ()
        self._accesses += 1
        try:
            locked = self._lock(parents, op.name)
            arrays = []
            for cell in inputs:
                arrays.append(self._array(cell) if cell.is_view else cell.buffer)
            if op.is_view:
                return self._new_views(Recipe(op, inputs, parents, device), arrays, metas)
            sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in metas]  # meta_nbytes
            total = sum(sizes)
            self._reserve(total, op.name)
            try:
                results, cost = self._run(op, inputs, device, arrays, metas)
            except BaseException:
                self.memory -= total
                raise
            return self._new_outputs(
                op, inputs, parents, device, results, metas, sizes, cost, constant
            )
        finally:
            self._accesses -= 1
            self._done(locked, was_busy)

    def _new_views(self, recipe: Recipe, arrays: list, metas: Sequence[tuple]) -> list[Cell]:
        """The cells of a view op: they share their input's storage and allocate nothing."""
        results, recipe.run_cost = self._run(recipe.op, recipe.inputs, recipe.device, arrays, metas)
        if recipe.op.n_outputs == 1:
            results = (results,)
        viewed = recipe.inputs[0]
        base = viewed.storage
        base.cost += recipe.run_cost
        base.last_access = self.clock
        device = recipe.device
        depth = viewed.depth + 1 if viewed.is_view else 1
        cells = []
        for i, (shape, dtype) in enumerate(metas):
            result = results[i]
            layout = None
            if depth > MAX_VIEW_DEPTH:  # read it in one step from the buffer (``_array``)
                layout = StridedLayout.locate(result, base.buffer)
            contiguous = is_c_contiguous(result)
            steps = depth if layout is None else 1
            cells.append(ViewCell(base, recipe, i, shape, dtype, device, contiguous, steps, layout))
        if self.observer is not None:
            self.observer.on_compute(recipe, cells)
        return cells

    def _new_outputs(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        parents: tuple[Storage, ...],
        device: str | None,
        results: Any,
        metas: Sequence[tuple],
        sizes: list[int],
        cost: float,
        constant: bool,
    ) -> list[Storage]:
        """Record the outputs of an op that just ran (what its ``forward`` returned) as
        new storages, which are also the outputs' cells: a constant, its own recipe (one
        output) or one of the outputs that share a ``Recipe``."""
        if op.n_outputs == 1:
            results = (results,)
        recipe: Storage | Recipe
        if len(metas) == 1 and not constant:
            output = self._new_evictable(
                op, inputs, parents, device, 0, results[0], metas[0], sizes[0], cost
            )
            cells, recipe = [output], output  # its own recipe
        else:
            # shared by the outputs; for constants, only the observer's record of the op
            recipe = Recipe(op, inputs, parents, device)
            recipe.run_cost = cost
            recipe.out_nbytes = tuple(sizes)
            if constant:
                cells = [
                    self._new_constant(op.name, results[i], meta, sizes[i], device, i)
                    for i, meta in enumerate(metas)
                ]
            else:
                cells = [
                    self._new_evictable(
                        op, inputs, parents, device, i, results[i], meta, sizes[i], cost, recipe
                    )
                    for i, meta in enumerate(metas)
                ]
                recipe.outputs = tuple([weakref.ref(storage) for storage in cells])
        if self.runtimes[-1].events is not None:
            for storage in cells:
                self._record("alloc", storage, cost=cost)
        if self.observer is not None:
            self.observer.on_compute(recipe, cells)
        return cells

    def _new_constant(
        self, name: str, result: Any, meta: tuple, nbytes: int, device: str | None, index: int
    ) -> Storage:
        """The storage of an op's output computed under ``as_constants``: no recipe."""
        self.next_id += 1
        shape, dtype = meta
        contiguous = True if device is None else result.flags.c_contiguous
        self.constant_bytes += nbytes
        return Storage(
            self, self.next_id, name, nbytes, shape, dtype, device, index, contiguous, result,
            0.0, self.clock,
        )  # fmt: skip

    def _new_evictable(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        parents: tuple[Storage, ...],
        device: str | None,
        index: int,
        result: Any,
        meta: tuple,
        nbytes: int,
        cost: float,
        shared: Recipe | None = None,
    ) -> Storage:
        """The storage of output ``index`` of an op that just ran (its own recipe, or one
        of the outputs of ``shared``): a candidate for eviction and a child of each of
        ``parents``."""
        self.next_id += 1
        shape, dtype = meta
        contiguous = True if device is None else result.flags.c_contiguous  # placeholders
        storage = Storage(
            self, self.next_id, op.name, nbytes, shape, dtype, device, index, contiguous,
            result, cost, self.clock, op, inputs, parents, shared,
        )  # fmt: skip
        if self.listing:  # CandidateTable.add of a new storage, inlined: runs for every op
            table = self.candidates
            storage.row = len(table.storages)
            table.storages.append(storage)
            table.dirty.append(1)
            table.count += 1
        ref = weakref.ref(storage)
        for parent in parents:  # Storage.add_child_ref, inlined: runs for every op
            children = parent.children
            if not children:
                parent.children = ref
            elif type(children) is list:
                children.append(ref)
                if len(children) >= parent.prune_at:
                    parent.prune_children()
            else:
                parent.children = [children, ref]
        return storage

    def _done(self, locked: Sequence[Storage], was_busy: bool) -> None:
        """The end of an access: unlock, free what only it needed, evict what died meanwhile."""
        for storage in locked:
            storage.locks -= 1
            if storage.evict_on_unlock and storage.locks == 0:
                storage.allocator._unlocked_dead(storage)
        if self._dead_remats or self._kept_dead:
            self._free_dead_remats()
        self._busy = was_busy
        if self._dying or self._released:
            self._settle_dying()
        if self.pending_error is not None and not was_busy and sys.exc_info()[1] is None:
            self.raise_pending()  # an error while settling deaths: surface it with this access

    def _check_pending(self) -> None:
        if self.pending_error is not None and not self._busy:
            self.raise_pending()

    def _run(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        device: str | None,
        arrays: list,
        metas: Sequence[tuple],
    ) -> tuple[Any, float]:
        """Execute an op's kernel on the arrays of ``inputs``, measuring or estimating its
        cost; returns what ``op.forward`` returns (one array, or a tuple for several
        outputs) and the cost, by which the clock has advanced."""
        results, elapsed = self._run_kernel(op, device, arrays, metas)
        runtime = self.runtimes[-1]
        mode = runtime.cost
        if mode == "time":
            cost = elapsed
        else:
            in_metas = [(c.shape, c.dtype) for c in inputs]
            if mode == "flops":
                flops, nbytes = op.cost(in_metas, list(metas))
                cost = max(flops / NOMINAL_FLOPS_PER_NS + nbytes / NOMINAL_BYTES_PER_NS, 1.0)
            else:
                cost = float(mode(op, in_metas, list(metas)))
        self.clock += cost
        stats = runtime.stats_
        stats.ops += 1
        stats.compute_cost += cost
        return results, cost

    def _run_kernel(
        self, op: Any, device: str | None, arrays: list, metas: Sequence[tuple]
    ) -> tuple[Any, float]:
        """Run a kernel; returns what ``op.forward`` returns and the nanoseconds it took
        (at least 1: the cost under ``Runtime(cost="time")``)."""
        if device == self.device:
            xp = self.xp
        else:
            xp = backend.xp_for(device) if device is not None else None
        started = perf_counter_ns()
        n = len(arrays)  # one and two inputs without *args: see ops.op.apply
        if n == 1:
            results = op.forward(xp, arrays[0])
        elif n == 2:
            results = op.forward(xp, arrays[0], arrays[1])
        else:
            results = op.forward(xp, *arrays)
        if device == "cuda":
            backend.synchronize(xp)
        elapsed = perf_counter_ns() - started
        if CHECK_OPS and xp is not None:
            check_outputs(op, metas, (results,) if op.n_outputs == 1 else results)
        return results, (float(elapsed) if elapsed > 1 else 1.0)

    # ---- reading values --------------------------------------------------------------

    def read(self, cell: Cell):
        """The array of ``cell``, rematerializing its storage first if it was evicted."""
        with self.holding(cell.storage):
            if self.observer is not None:
                self.observer.on_read(cell)
            return self._array(cell)

    @contextmanager
    def holding(self, storage: Storage) -> Iterator[None]:
        """Keep ``storage`` resident and locked for the body (rematerializing it first)."""
        self._check_pending()
        was_busy, self._busy = self._busy, True
        locked: Sequence[Storage] = ()
        self._accesses += 1
        try:
            locked = self._lock([storage])
            yield
        finally:
            self._accesses -= 1
            self._done(locked, was_busy)

    def _array(self, cell: Cell):
        """The array of a cell whose storage is resident: the buffer, or a view of it, made
        by applying the view ops from the buffer or from the nearest view with a layout
        (at most ``MAX_VIEW_DEPTH`` of them)."""
        if not cell.is_view:
            return cell.buffer
        chain = []
        while cell.is_view:
            if cell.layout is not None:
                array = cell.layout.view_of(cell.storage.buffer)
                if array is not None:
                    break
            chain.append(cell)
            cell = cell.view_recipe.inputs[0]
        else:
            array = cell.buffer
        for view in reversed(chain):
            recipe = view.view_recipe
            xp = backend.xp_for(recipe.device) if recipe.device is not None else None
            out = recipe.op.forward(xp, array)
            array = out if recipe.op.n_outputs == 1 else out[view.index]
        return array

    def track(self, mode: str | None) -> None:
        """Maintain the neighbourhood structure a heuristic needs ("estar", "eq") or none.
        Switching starts a new epoch: cached values are rebuilt lazily from the graph."""
        if mode != self.tracking:
            self.tracking = mode
            if mode == "estar":
                self.neighbourhood.invalidate_all()
            elif mode == "eq":
                self.eq_classes.invalidate_all()

    def _on_state_change(self, storage: Storage) -> None:
        """An evicted storage became resident, banished or freed."""
        if self.tracking == "estar":
            self.neighbourhood.on_change(storage)
        elif self.tracking == "eq":
            self.eq_classes.on_leave(storage)
        if self.candidates.watching == "ancestors":
            self.candidates.mark_descendants(storage)

    # ---- making room ----------------------------------------------------------------------

    def _reserve(self, nbytes: int, op_name: str) -> None:
        budget = self.budget
        if budget is not None and self.memory + nbytes > budget:
            outermost = self._begin_overhead()
            try:
                self._evict_until(budget - nbytes, op_name, nbytes)
            finally:
                if outermost:
                    self._end_overhead()
        memory = self.memory = self.memory + nbytes
        stats = self.runtimes[-1].stats_
        if memory > stats.peak_memory:
            stats.peak_memory = memory

    def _begin_overhead(self) -> bool:
        """Start timing eviction work (making room, rematerializing) unless it is already
        being timed; check the wall-clock thrash guard first. True when this call started
        the timing (and so must end it). A requested interrupt is raised here only within
        an op or a read: the rebuilds that follow a tensor's death can run inside
        ``Tensor.__del__``, where an exception cannot surface."""
        if self.interrupt_requested and self._accesses:
            raise KeyboardInterrupt
        if self._overhead_since is not None:
            return False
        runtime = self.runtime
        limit = runtime.max_wall_slowdown
        if limit is not None:
            wall = runtime.wall_time()
            if wall >= WALL_GUARD_AFTER:
                slowdown = runtime.wall_slowdown()
                if slowdown > limit:
                    s = runtime.stats_
                    detail = (
                        f"{s.overhead_time:.1f} s of {wall:.1f} s: {s.search_time:.1f} s "
                        f"searching {s.searches:,} times, {s.remats:,} remats"
                    )
                    if 2 * s.search_time > s.overhead_time and (
                        getattr(runtime.heuristic, "cost", None) == "estar"
                    ):
                        detail += (
                            "; mostly h_DTR's exact e*, which heuristic='dtr_eq' "
                            "approximates at a fraction of the cost"
                        )
                    raise ThrashError(
                        "eviction", slowdown, limit, self.budget, wall=True, detail=detail
                    )
        self._overhead_since = time.perf_counter()
        return True

    def _end_overhead(self) -> None:
        self.stats.overhead_time += time.perf_counter() - self._overhead_since
        self._overhead_since = None

    def _note_peak(self) -> None:
        stats = self.stats
        if self.memory > stats.peak_memory:
            stats.peak_memory = self.memory

    def _record(self, kind: str, storage: Storage, **extra: Any) -> None:
        runtime = self.runtime
        if runtime.events is not None:
            runtime.record(
                kind,
                id=storage.id,
                op=storage.name,
                nbytes=storage.nbytes,
                clock=self.clock,
                memory=self.memory,
                **extra,
            )


_ALLOCATORS: dict[str, Allocator] = {}


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Inside the ``with``, a first Ctrl-C (SIGINT) does not interrupt whatever Python is
    doing: it asks every allocator to raise ``KeyboardInterrupt`` at its next consistent
    point (the start of an op, of a rematerialization, of a search for room), so an
    interrupted run leaves no half-made storage or miscounted byte behind. A second
    Ctrl-C interrupts at once. A Ctrl-C that no allocator acted on by the end of the
    ``with`` (the work inside ran no op after it) is raised there, not lost. Only in the
    main thread (elsewhere it does nothing)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if not _ALLOCATORS or any(a.interrupt_requested for a in _ALLOCATORS.values()):
            raise KeyboardInterrupt
        for allocator in _ALLOCATORS.values():
            allocator.interrupt_requested = True

    previous = signal.signal(signal.SIGINT, handler)
    unanswered = False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
        for allocator in _ALLOCATORS.values():
            unanswered = unanswered or allocator.interrupt_requested
            allocator.interrupt_requested = False
    if unanswered:
        raise KeyboardInterrupt


def allocator_for(device: str) -> Allocator:
    """The process-wide allocator of a device (created on first use)."""
    allocator = _ALLOCATORS.get(device)
    if allocator is None:
        allocator = _ALLOCATORS[device] = Allocator(device)
    return allocator
