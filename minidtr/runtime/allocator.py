"""The allocator: the only place buffers are created, counted, evicted and rebuilt.

Every op goes through ``compute``: lock its inputs (rematerializing evicted ones
first), make room for its outputs (evicting the lowest-scoring unlocked storages
until they fit the budget), run the kernel, record the outputs with their
recipe (``outputs.py``), unlock. Reading a value (``read``) takes the same path. The
kernel is whatever the recipe's op does, so the simulator drives this same class with
ops that only return placeholders: the live runtime and the simulator share every
policy decision.

The allocator is composed of parts, each owning its state:

    ledger      the counted bytes and the budget in force         ledger.py
    eviction    candidates, the victim search, e* and eq classes  eviction.py
    remat       locking and rebuilding what an access reads       remat.py
    lifetimes   references, deaths and the deallocation rules     lifetime.py
    guard       the thrash guard and the timing of eviction work  guard.py
    addresses   the arena under fit="contiguous", or None          placement.py
    fast        the accelerator's hot paths, or None              fast/

and keeps itself what every part reads: the logical ``clock``, the stack of
active ``runtimes`` (the innermost decides the policy; the tightest budget
holds), the ``observer`` (the simulator's trace recorder) and the *access
protocol*: ``busy`` is set while an op, a read or a search is under way, and
deaths then wait (``Lifetimes.settle``) until ``done`` ends the access, so that
nothing changes under a running kernel; ``accesses`` counts the ops and reads
under way; ``interrupt_requested`` asks for a ``KeyboardInterrupt`` at the next
consistent point (``interrupts.py``). Every entry (an op, a read, a death, a
runtime entering or leaving) holds the allocator's ``lock``: threads that share a
device take turns, a whole op or death at a time, and the nested entries of one
thread (a death during an op) pass through it.

With ``Runtime(reference=True)`` innermost the allocator runs the reference
policy only (``fast`` is None, the candidates are a plain ordered set, e* is
walked at every score); otherwise the accelerator (``fast/``) replaces those
pieces with code that decides the same, faster.
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any

import numpy as np

from .. import backend
from . import fast, interrupts, placement, realmem
from .audit import Audit, audit_for, check_outputs
from .costs import model_cost
from .errors import BudgetError, PlacementError, allocation_error
from .eviction import Eviction
from .guard import ThrashGuard
from .ledger import Ledger
from .lifetime import Lifetimes, raising
from .outputs import new_outputs
from .realmem import RealMemory
from .remat import Rematerializer, with_workspace
from .runtime import Runtime, Stats
from .storage import Cell, Recipe, Storage, distinct_storages
from .views import array_of, new_views

# Check every kernel's outputs against the shapes and dtypes its op declared (``infer``):
# catches bugs in ops, at a cost on every op, so the test suite turns it on
# (tests/conftest.py) and ordinary runs check only ops defined outside minidtr
# (``Op.check_results``).
CHECK_OPS = False


class Allocator:
    """Budgeted memory for one device, with the DTR eviction manager built in."""

    # How many allocators are alive. A storage keeps its allocator alive, so while there is
    # one, every storage is its: no value can come from another (``FastPath.compute``).
    alive = 0

    def __init__(self, device: str | None = "cpu", default: Runtime | None = None):
        self.xp = backend.xp_for(device) if device is not None else None  # (first: it may fail)
        Allocator.alive += 1
        EVERY.add(self)
        self.device = device
        self.clock = 0.0
        self.next_id = 0
        self.observer = None  # a trace recorder (minidtr.sim) when one is attached
        self.lock = threading.RLock()  # held by every entry: one thread's work at a time
        self.busy = False
        self.accesses = 0
        self.interrupt_requested = False
        self.runtimes: list[Runtime] = []
        self._entered: list[Stats] = []  # each active runtime's counters when it entered
        # the innermost runtime and its counters (kept by push and pop: read everywhere)
        self.runtime: Runtime | None = None
        self.stats: Stats | None = None
        self.ledger = Ledger()
        self.eviction = Eviction(self)
        self.remat = Rematerializer(self)
        self.lifetimes = Lifetimes(self)
        self.guard = ThrashGuard(self)
        self.fast: fast.FastPath | None = None
        self.addresses: placement.ContiguousFit | None = None
        self.audit: Audit | None = None  # while an active runtime audits (audit.py)
        self.kernel_workspace = 0  # reserved for the kernel running now (compute, replay)
        self.meter: RealMemory | None = None  # while a runtime with measure_real is active
        self.lends = False  # set for good once another allocator's storage has a parent here
        (default or Runtime(device=device or "cpu")).enter_on(self)

    def __del__(self) -> None:
        if "device" in vars(self):  # (one whose device failed was never counted)
            Allocator.alive -= 1

    # ---- runtimes ---------------------------------------------------------------------

    @property
    def memory(self) -> int:
        """Counted resident bytes (``ledger.memory``)."""
        return self.ledger.memory

    @property
    def constant_bytes(self) -> int:
        return self.ledger.constant_bytes

    @property
    def budget(self) -> int | None:
        """The budget in force: the tightest of the active runtimes'."""
        return self.ledger.budget

    def push(self, runtime: Runtime) -> None:
        """Make ``runtime`` the innermost active runtime (``Runtime.__enter__``)."""
        if runtime.budget is not None and self.ledger.memory > 0:
            # garbage in reference cycles (left by earlier work) must neither count against
            # this run nor leave when the cycle collector happens to run: decisions under
            # a budget then depend on the program alone (an allocator holding nothing has
            # nothing to lose, and skips the collection)
            self.lifetimes.collect_garbage()
        self.runtimes.append(runtime)
        self.runtime, self.stats = runtime, runtime.stats_
        self._entered.append(dataclasses.replace(runtime.stats_))
        self.eviction.sampler.seed(runtime.seed)
        self._select_policy_code()
        self.audit = audit_for(self)
        if self.device == "cuda":
            backend.install_cuda_oom_handler(self.eviction.free_device_memory)
        try:
            self.apply_budget("entering the runtime")
        except BudgetError:
            self.pop(runtime)
            raise
        if runtime.measure_real:  # from the memory the budget left, not what came before
            realmem.start(self, runtime)

    def pop(self, runtime: Runtime) -> None:
        """Deactivate the innermost runtime (``Runtime.__exit__``)."""
        if self.runtimes[-1] is not runtime:
            raise RuntimeError(f"{runtime!r} is not the innermost active runtime")
        self.runtimes.pop()
        entered = self._entered.pop()
        if self.meter is not None and runtime in self.meter.runtimes:
            realmem.stop(self, runtime)
        if not self.runtimes:
            self.runtime = self.stats = None
            if self.device == "cuda":
                backend.limit_device_pool(None)  # else apply_budget limits it, below
            return
        self.runtime = self.runtimes[-1]
        self.stats = self.runtime.stats_
        self.runtime.stats_.add(runtime.stats_, entered)
        self.runtime.inner_stats.add(runtime.stats_, entered)
        self._select_policy_code()
        self.audit = audit_for(self)
        if runtime.dealloc == "ignore" and self.runtime.dealloc != "ignore":
            # what died while deallocation was ignored falls to the policy in force now
            for storage in self.eviction.candidates:
                if not storage.external_refs and storage.buffer is not None and not storage.locks:
                    self.lifetimes.died(storage)
        self.apply_budget("leaving a runtime")

    def _select_policy_code(self) -> None:
        """Run the reference policy while the innermost runtime asks for it
        (``reference=True``), the accelerated one otherwise."""
        reference = self.runtime.reference or self.runtime.as_prototype  # fast/ stands aside
        if reference == (self.fast is None):
            return
        order = self.eviction.candidates.in_order()
        if reference:
            fast.uninstall(self, order)
        else:
            fast.install(self, order)

    def apply_budget(self, reason: str) -> None:
        """Recompute the budget in force (the tightest active one) and evict to meet it;
        ``reason`` names the change in a ``BudgetError``."""
        budgets = [rt.budget for rt in self.runtimes if rt.budget is not None]
        ledger = self.ledger
        ledger.budget = min(budgets) if budgets else None
        if self.device == "cuda":
            backend.limit_device_pool(ledger.budget)
        searched = ledger.budget is not None or any(rt.dealloc == "ignore" for rt in self.runtimes)
        self.eviction.budget_changed(ledger.budget, searched)
        if ledger.budget is not None and ledger.memory > ledger.budget:
            was_busy, self.busy = self.busy, True
            try:
                self.eviction.make_room(ledger.budget, reason, 0)
            finally:
                self.done((), was_busy)
        placement.apply_fit(self, reason)  # fit="contiguous": the arena at the budget's size
        self.note_peak()

    # ---- constants -----------------------------------------------------------------------

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
        with self.lock:
            self.check_pending()
            if shape is None:
                shape, dtype = (nbytes,), np.dtype(np.uint8)
            self.next_id += 1
            storage = Storage.new(
                allocator=self, id=self.next_id, name=name, nbytes=nbytes, shape=shape,
                dtype=dtype, device=self.device,
            )  # fmt: skip
            was_busy, self.busy = self.busy, True
            ledger = self.ledger
            try:
                try:
                    self.reserve(nbytes, name)
                except BudgetError as error:
                    raise error.named(f"{name} {shape} {dtype}") from None
                try:
                    array = (
                        make_array()
                        if self.meter is None
                        else self.meter.measure(make_array, nbytes)
                    )
                except BaseException as error:
                    self.unreserve(nbytes)
                    failure = allocation_error(error, name, [(shape, dtype)], self.device)
                    if failure is None:
                        raise
                    raise failure from error
                if int(array.nbytes) != nbytes:
                    self.unreserve(nbytes)
                    raise AssertionError(f"{name}: made {array.nbytes} bytes, declared {nbytes}")
                storage.buffer = array
                if self.addresses is not None:
                    self.addresses.bind([storage])
                storage.last_access = self.clock
                ledger.constant_bytes += nbytes
                if self.observer is not None:
                    self.observer.on_constant(storage)
            finally:
                self.done((), was_busy)
            self.record("alloc", storage)
            return storage

    # ---- running ops -----------------------------------------------------------------------

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
        running statistics), so no chain of recipes grows from step to step. The
        accelerator takes the ops it can (``fast.FastPath.compute``); the others,
        and every op under the reference policy, take ``compute_general``."""
        lock = self.lock  # (acquire and release: a ``with`` costs twice as much)
        lock.acquire()
        try:
            if self.interrupt_requested:
                interrupts.answer()
            if not self.busy:
                if self.lifetimes.pending_error is not None:
                    self.lifetimes.raise_pending()
                if self.fast is not None and not op.is_view:
                    outputs = self.fast.compute(op, inputs, metas, device, constant)
                    if outputs is not None:
                        return outputs
            return self.compute_general(op, inputs, metas, device, constant)
        finally:
            lock.release()

    def compute_general(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        metas: Sequence[tuple],
        device: str | None,
        constant: bool,
    ) -> list[Cell]:
        """``compute`` for every case: lock the inputs (``Rematerializer.lock``, which
        rebuilds the evicted ones), make room for the outputs and the kernel's workspace
        (``reserve``, which evicts), run the kernel, release the workspace, record the
        outputs, unlock."""
        parents = distinct_storages(inputs)
        was_busy, self.busy = self.busy, True
        locked: Sequence[Storage] = ()
        self.accesses += 1
        try:
            try:
                locked = self.remat.lock_cells(parents, op, inputs)
            except BudgetError as error:  # rebuilding an input
                raise rebuild_error(error, op.name) from None
            arrays = [array_of(cell) for cell in inputs]
            if op.is_view:
                return new_views(self, Recipe(op, inputs, parents, device), arrays, metas)
            sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in metas]
            total = sum(sizes)
            workspace = op.workspace(*inputs) if op.has_workspace else 0
            self.reserve(total + workspace, with_workspace(op.name, workspace), (*sizes, workspace))
            self.kernel_workspace = workspace
            try:
                results, cost = self.run(op, inputs, device, arrays, metas)
            except BaseException:
                self.unreserve(total + workspace)
                raise
            finally:
                self.kernel_workspace = 0
            self.ledger.memory -= workspace
            cells = new_outputs(
                self, op, inputs, parents, device, results, metas, sizes, cost, constant, workspace
            )
            if self.audit is not None and not constant:
                self.audit.computed(op, cells)
            return cells
        finally:
            self.accesses -= 1
            self.done(locked, was_busy)

    def done(self, locked: Sequence[Storage], was_busy: bool) -> None:
        """The end of an access: unlock, free what only it needed, settle what died
        meanwhile, and raise an error met while settling (when this ends the outermost
        access and no error is already on its way)."""
        self.remat.unlock(locked)
        lifetimes = self.lifetimes
        if lifetimes.dead_remats or lifetimes.kept_dead:
            lifetimes.free_dead_remats()
        self.busy = was_busy
        if lifetimes.dying or lifetimes.released:
            lifetimes.settle()
        if lifetimes.pending_error is not None and not was_busy and not raising():
            lifetimes.raise_pending()

    def check_pending(self) -> None:
        if self.lifetimes.pending_error is not None and not self.busy:
            self.lifetimes.raise_pending()

    def run(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        device: str | None,
        arrays: list,
        metas: Sequence[tuple],
    ) -> tuple[Any, float]:
        """Execute an op's kernel on the arrays of ``inputs``, measuring or estimating its
        cost; returns what ``op.forward`` returns (one array, or a tuple for several
        outputs) and the cost, by which the clock has advanced. Under the audit the kernel
        runs guarded (``Audit.run``: read-only inputs, the op's attributes watched)."""
        if self.audit is None:
            results, elapsed = self.run_kernel(op, device, arrays, metas)
        else:
            results, elapsed = self.audit.run(self.run_kernel, op, device, arrays, metas)
        runtime = self.runtime
        cost = elapsed if runtime.cost == "time" else model_cost(runtime.cost, op, inputs, metas)
        self.clock += cost
        stats = runtime.stats_
        stats.ops += 1
        stats.compute_cost += cost
        return results, cost

    def run_kernel(
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
        try:
            if n == 1:
                results = op.forward(xp, arrays[0])
            elif n == 2:
                results = op.forward(xp, arrays[0], arrays[1])
            else:
                results = op.forward(xp, *arrays)
        except (MemoryError, ValueError) as error:
            failure = allocation_error(error, op.name, metas, device or self.device)
            if failure is None:
                raise
            raise failure from error
        if device == "cuda":
            backend.synchronize(xp)
        elapsed = perf_counter_ns() - started
        if xp is not None and (CHECK_OPS or op.check_results):
            check_outputs(op, metas, results, arrays, xp)
        return results, (float(elapsed) if elapsed > 1 else 1.0)

    # ---- reading values ------------------------------------------------------------------

    def read(self, cell: Cell):
        """The array of ``cell``, rematerializing its storage first if it was evicted."""
        if self.fast is not None:
            return self.fast.read(cell)
        with self.holding(cell.storage):
            if self.observer is not None:
                self.observer.on_read(cell)
            return array_of(cell)

    @contextmanager
    def holding(self, storage: Storage) -> Iterator[None]:
        """Keep ``storage`` resident and locked for the body (rematerializing it first)."""
        with self.lock:
            self.check_pending()
            was_busy, self.busy = self.busy, True
            locked: Sequence[Storage] = ()
            self.accesses += 1
            try:
                try:
                    locked = self.remat.lock([storage])
                except BudgetError as error:
                    raise rebuild_error(error, "a read") from None
                yield
            finally:
                self.accesses -= 1
                self.done(locked, was_busy)

    def lock_for_another(self, storage: Storage) -> None:
        """Lock one of this allocator's storages for an access of another allocator,
        rebuilding it here first if it was evicted; the other unlocks it."""
        with self.lock:
            self.check_pending()
            was_busy, self.busy = self.busy, True
            try:
                self.remat.lock([storage], "read by another allocator")
            finally:
                self.done((), was_busy)

    # ---- making room -----------------------------------------------------------------------

    def reserve(self, nbytes: int, op_name: str, pieces: Sequence[int] = ()) -> None:
        """Count ``nbytes`` more, evicting first to make room under the budget (under a
        contiguous fit, room for each of ``pieces``, default ``nbytes``: placement.py)."""
        ledger = self.ledger
        budget = ledger.budget
        if self.addresses is not None:
            self.addresses.reserve(pieces or (nbytes,), op_name, nbytes)
        elif budget is not None and ledger.memory + nbytes > budget:
            outermost = self.guard.begin()
            try:
                self.eviction.make_room(budget - nbytes, op_name, nbytes)
            finally:
                if outermost:
                    self.guard.end()
        ledger.memory += nbytes
        self.note_peak()

    def unreserve(self, nbytes: int) -> None:
        """Give back what ``reserve`` counted for a kernel that failed."""
        self.ledger.memory -= nbytes
        if self.addresses is not None:
            self.addresses.drop()

    def note_peak(self) -> None:
        stats = self.stats
        if self.ledger.memory > stats.peak_memory:
            stats.peak_memory = self.ledger.memory

    def record(self, kind: str, storage: Storage, **extra: Any) -> None:
        """Add an event about ``storage`` to the event log, if one is kept."""
        runtime = self.runtime
        if runtime.events is not None:
            if self.addresses is not None:
                extra["address"] = self.addresses.address(storage)
            runtime.record(
                kind,
                id=storage.id,
                op=storage.name,
                nbytes=storage.nbytes,
                clock=self.clock,
                memory=self.ledger.memory,
                **extra,
            )

    # ---- the parts' public faces ---------------------------------------------------------

    def evict(self, storage: Storage, reason: str = "budget") -> None:
        """Free a resident storage's buffer, keeping its recipe (``Eviction.evict``)."""
        with self.lock:
            self.eviction.evict(storage, reason)

    def release(self, cell: Cell) -> None:
        """A Tensor handle to ``cell`` died (``Lifetimes.release``). While accelerated, the
        allocator's ``release`` is ``FastPath.release`` instead (``fast.install``). The
        one entry whose callers hold the lock (``Tensor.__del__``, which is on every
        op's path, takes it without a call more)."""
        self.lifetimes.release(cell)

    def add_ref(self, cell: Cell) -> None:
        with self.lock:
            self.lifetimes.add_ref(cell)

    def pin(self, storage: Storage) -> None:
        with self.lock:
            self.lifetimes.pin(storage)

    def unpin(self, storage: Storage) -> None:
        with self.lock:
            self.lifetimes.unpin(storage)

    def make_constant(self, storage: Storage, if_resident: bool = False) -> None:
        with self.lock:
            self.lifetimes.make_constant(storage, if_resident)

    def forget(self, storage: Storage) -> None:
        with self.lock:
            self.lifetimes.forget(storage)

    @property
    def pending_error(self) -> BaseException | None:
        return self.lifetimes.pending_error

    def raise_pending(self) -> None:
        self.lifetimes.raise_pending()

    def discard_pending(self) -> None:
        """Drop an error met while settling deaths (the run already fails with its own)."""
        self.lifetimes.pending_error = None


# Every allocator alive, for ``os.fork`` and the exit. A fork waits until no thread is
# inside one, so that the child does not start with a lock held by a thread it does not
# have (its first op would wait forever) or with an op half done; the exit, below.
EVERY: weakref.WeakSet[Allocator] = weakref.WeakSet()
_held_over_fork: list[Allocator] = []
EXIT_WAIT = 10.0  # seconds an exit waits for a daemon thread's op under way


def _before_fork() -> None:
    for allocator in sorted(EVERY, key=id):
        allocator.lock.acquire()
        _held_over_fork.append(allocator)


def _after_fork() -> None:
    while _held_over_fork:
        _held_over_fork.pop().lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def _hold_at_exit() -> None:
    """At exit, once the threads that are not daemons have ended: the main thread takes
    every allocator's lock for good. The interpreter then stops the daemon threads
    wherever they are, perhaps inside an op with its lock held, and the deaths that the
    shutdown runs (garbage in reference cycles, module globals) would wait for that lock
    forever (a daemon computing while the program ended hung every such exit)."""
    for allocator in sorted(EVERY, key=id):
        allocator.lock.acquire(timeout=EXIT_WAIT)


atexit.register(_hold_at_exit)


def rebuild_error(error: BudgetError, access: str) -> BudgetError:
    """A BudgetError met rebuilding what ``access`` reads, naming both (a PlacementError
    too; a ThrashError names its own cause)."""
    if type(error) in (BudgetError, PlacementError):
        return error.named(f"recomputing {error.op} for {access}")
    return error
