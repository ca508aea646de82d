"""Replay a trace under a budget with the live runtime's own allocator and heuristics.

Nothing here decides what to evict. ``Replayer`` drives a
``minidtr.runtime.Allocator`` that has no array backend (``device=None``)
with ops whose kernels return placeholders and whose cost is the trace's
TIME, so locking, rematerialization, eviction, heuristics, deallocation and
the statistics are exactly the live runtime's code.

How instructions map onto the allocator:

- a name is one external reference: defining it is ``add_ref``, dropping it
  ``release`` (which applies the deallocation policy);
- ``CONSTANT`` is ``add_constant``; ``CALL`` is ``compute`` with every
  argument locked; a result of ``MEMORY`` bytes is a cell of shape
  ``(MEMORY,)`` and dtype uint8; its ``WORKSPACE`` is reserved with the results
  and released after the kernel (a ``TraceOp`` declares it), in a replay too;
- the allocator's views share the storage of their *first* input, so the
  results of a CALL that alias argument ``j`` come from a view call whose
  first input is argument ``j`` (the other arguments follow, so they are
  still locked). A CALL that mixes fresh and aliased results becomes a fresh
  call carrying TIME followed by zero-cost view calls; one whose results
  alias several arguments gets one view call per argument. (Neither occurs in
  the prototype's logs or in minidtr's recordings.)
- ``MUTATE`` is a fresh call producing one new storage per mutated argument,
  then the mutated names are rebound (add_ref new, release old);
- ``ANNOTATE CONSTANT`` (minidtr's extension) is ``make_constant``, with
  ``if_resident`` when it carries ``IF_RESIDENT``;
- at the end every name still held is an output: its storage is pinned
  (rematerialized if evicted), which can itself run out of budget.

A view's accesses cost nothing in the allocator (views are recomputed from
their base on every access), so a view op's TIME counts once, as compute.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..runtime.allocator import Allocator
from ..runtime.options import RuntimeOptions
from ..runtime.runtime import BudgetError, Runtime, ThrashError
from ..runtime.storage import Cell
from .clairvoyant import make_trace_heuristic
from .instructions import slowdown_of
from .trace import (
    STEP,
    Annotate,
    Call,
    Constant,
    Copy,
    CopyFrom,
    MakeConstant,
    Mutate,
    Release,
    Trace,
)

BYTE = np.dtype(np.uint8)
RESIDENT = object()  # the placeholder an op "computes": any object other than None


class Placeholder:
    """A constant's stand-in buffer; ``add_constant`` checks its ``nbytes``."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        self.nbytes = nbytes


class Thrashing(Exception):
    """Recomputation passed the thrash limit."""


class ThrashGuard:
    """Stops a replay once recomputation passes ``limit``, even in the middle of one
    instruction's cascade of rematerializations (checked by every kernel call)."""

    __slots__ = ("stats", "limit")

    def __init__(self, stats, limit: float):
        self.stats, self.limit = stats, limit

    def check(self) -> None:
        if self.stats.remat_cost > self.limit:
            raise Thrashing


class TraceOp:
    """An op of a trace: a name, a TIME, a WORKSPACE and a kernel that computes
    placeholders."""

    __slots__ = ("name", "n_outputs", "is_view", "time", "guard", "bytes", "has_workspace")

    def __init__(
        self,
        name: str,
        n_outputs: int,
        is_view: bool,
        time_ns: float,
        guard: ThrashGuard,
        workspace: int = 0,
    ):
        self.name, self.n_outputs, self.is_view, self.time = name, n_outputs, is_view, time_ns
        self.guard = guard
        self.bytes = workspace
        self.has_workspace = workspace > 0

    def workspace(self, *inputs: Cell) -> int:
        return self.bytes

    def forward(self, xp, *arrays):
        self.guard.check()
        if self.n_outputs == 1:
            return RESIDENT
        return (RESIDENT,) * self.n_outputs

    def output(self, xp, array, index: int):  # one output of a view op (``Op.output``)
        self.guard.check()
        return RESIDENT

    def __repr__(self) -> str:
        return f"TraceOp({self.name}, time={self.time})"


def trace_cost(op: TraceOp, in_metas, out_metas) -> float:
    return op.time


@dataclass
class Baseline:
    """The unbounded replay of a trace."""

    peak_memory: int  # bytes, constants included: what budget ratios are relative to
    constant_floor: int  # the most bytes of constants alive at once
    bottleneck: int  # the most bytes one op needs at once (constants, inputs, outputs, workspace)
    bottleneck_op: str = ""  # the op that needs ``bottleneck`` bytes
    working_set: int = 0  # the most non-constant bytes one op needs (inputs, outputs, workspace)
    working_set_op: str = ""


@dataclass
class SimResult:
    trace: str
    heuristic: str
    dealloc: str
    ratio: float | None
    budget: int | None
    status: str  # "ok" | "oom" | "thrash"
    slowdown: float  # (compute + recompute) / compute; nan on oom
    compute: float  # the trace's total TIME
    remat_cost: float
    remats: int
    output_remats: int  # remats made to make the outputs resident at the end
    evictions: int  # all evictions, those of dead storages included
    dead_evictions: int
    banished: int
    orphan_remats: int  # remats made to rebuild orphans of dead storages (lifetime.py)
    peak_memory: int
    ops: int
    instructions_done: int
    search_time: float  # seconds spent choosing victims
    replay_time: float  # seconds for the whole replay
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ops_per_second(self) -> float:
        return self.ops / self.replay_time if self.replay_time > 0 else math.inf

    def row(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("extra")
        out.update(self.extra)
        return out


# The runtime's settings that mean something in a replay; the others are fixed by it (the
# cost is the trace's TIME, the thrash guard is the replay's own, there is no device).
REPLAY_SETTINGS = (
    "budget",
    "heuristic",
    "dealloc",
    "sample",
    "min_size",
    "seed",
    "record_events",
    "rebuild_orphans",
    "keep_dead_remats",
    "reference",
    "fit",
    "placement",
    "as_prototype",
)

# What a replay under fit="contiguous" measures besides (``result.extra``, the sweep's CSV
# columns then): requests no free block held at first, the mean fragmentation at them,
# the evictions made while the bytes alone fitted, the highest end address in use.
ADDRESS_COLUMNS = ("placement_failures", "fragmentation", "extra_evictions", "peak_address")


def replay_options(options: RuntimeOptions | None = None, **settings: Any) -> RuntimeOptions:
    """``options`` (default: the runtime's defaults) with the ``settings`` given (those of
    ``REPLAY_SETTINGS`` whose value is not None) put over them."""
    unknown = sorted(set(settings) - set(REPLAY_SETTINGS))
    if unknown:
        raise TypeError(
            f"unexpected keyword arguments {unknown}: a replay takes the runtime settings "
            f"{list(REPLAY_SETTINGS)} (or options=RuntimeOptions(...))"
        )
    given = {name: value for name, value in settings.items() if value is not None}
    base = RuntimeOptions() if options is None else options
    return base.replace(**given) if given else base


class Replayer:
    """Apply trace instructions one at a time to a fresh backend-less allocator.

    The runtime's settings are ``options`` with ``budget``, ``heuristic``, ``dealloc`` and
    the other ``REPLAY_SETTINGS`` keywords put over them where given (not None); the
    simulator's trace heuristic (belady) is allowed here. With ``live_guard``
    the options' ``max_slowdown`` applies as in a live run (``ThrashError``), each
    ``ANNOTATE STEP`` of the trace marking a step as ``minidtr train`` does
    (``Runtime.mark_step``): the first step is expected to compute what it computes in
    ``trace`` (a budgeted ``train`` measures the unbounded run first), each later one
    what the step before it did.
    """

    def __init__(
        self,
        budget: int | None = None,
        heuristic: str | None = None,
        dealloc: str | None = None,
        *,
        thrash_cost: float = math.inf,
        measure_floors: bool = False,
        trace: Trace | None = None,
        options: RuntimeOptions | None = None,
        live_guard: bool = False,
        **settings: Any,
    ):
        options = replay_options(
            options, budget=budget, heuristic=heuristic, dealloc=dealloc, **settings
        )
        self.options = options
        self.allocator = Allocator(device=None)
        self.informed = make_trace_heuristic(options.heuristic, trace)
        self.position = 0
        self.runtime = Runtime.from_options(
            options.replace(
                heuristic=self.informed or options.heuristic,
                cost=trace_cost,
                # the replay has its own guard, against the trace's compute; live_guard
                # adds the live runtime's (against the compute expected by each step's end)
                max_slowdown=options.max_slowdown if live_guard else None,
                max_wall_slowdown=None,
            )
        )
        self.runtime.enter_on(self.allocator)
        self.cells: dict[str, Cell] = {}
        self.guard = ThrashGuard(self.runtime.stats_, thrash_cost)
        self.measure_floors = measure_floors
        self._first_step_cost = trace.step_costs[0] if trace and trace.step_costs else None
        # constants only because they were resident when a trace said IF_RESIDENT: a budget
        # can evict them before, so no floor counts them as constants
        self.conditional: weakref.WeakSet = weakref.WeakSet()
        self.constant_floor = 0
        self.bottleneck = 0
        self.bottleneck_op = ""
        self.working_set = 0
        self.working_set_op = ""
        self._dispatch = {
            Constant: self._constant,
            Call: self._call,
            Mutate: self._mutate,
            Copy: self._copy,
            CopyFrom: self._copy_from,
            Release: self._release,
            Annotate: self._annotate,
            MakeConstant: self._make_constant,
        }

    @property
    def stats(self):
        return self.runtime.stats_

    def step(self, ins) -> None:
        informed = self.informed
        if informed is None:
            self._dispatch[type(ins)](ins)
        else:
            informed.before(self.position, self.stats.compute_cost, ins, self.cells)
            self._dispatch[type(ins)](ins)
            informed.after(self.position, ins, self.cells)
        self.position += 1
        self.guard.check()

    def resident(self, name: str) -> bool:
        return self.cells[name].storage.buffer is not None

    def finish(self) -> int:
        """Make every name still held resident (pinned): the step's outputs. Returns the
        number of remats this took."""
        before = self.stats.remats
        if self.informed is not None:
            self.informed.before(self.position, self.stats.compute_cost)
        for cell in self.cells.values():
            self.allocator.pin(cell.storage)
            self.guard.check()
        return self.stats.remats - before

    def close(self) -> None:
        if self.runtime.active:
            self.runtime.leave()

    # ---- instructions --------------------------------------------------------------------

    def _define(self, name: str, cell: Cell) -> None:
        self.cells[name] = cell
        self.allocator.add_ref(cell)

    def _constant(self, ins: Constant) -> None:
        nbytes = ins.nbytes
        storage = self.allocator.add_constant(lambda: Placeholder(nbytes), nbytes, ins.name)
        self._define(ins.name, storage)
        if self.measure_floors:
            self.constant_floor = max(self.constant_floor, self._constants())

    def _constants(self) -> int:
        """Constant bytes alive that every budget keeps (``conditional`` ones excluded)."""
        return self.allocator.constant_bytes - sum(s.nbytes for s in self.conditional)

    def _note_bottleneck(self, op: str, args: tuple[Cell, ...], fresh_bytes: int) -> None:
        seen: list = []
        working = fresh_bytes
        for cell in args:
            storage = cell.storage
            if (storage.op is not None or storage in self.conditional) and not any(
                storage is s for s in seen
            ):
                seen.append(storage)
                working += storage.nbytes
        need = self._constants() + working
        if need > self.bottleneck:
            self.bottleneck, self.bottleneck_op = need, op
        if working > self.working_set:
            self.working_set, self.working_set_op = working, op

    def _call(self, ins: Call) -> None:
        args = tuple(self.cells[a] for a in ins.args)
        compute = self.allocator.compute
        fresh = [r for r in ins.results if r.alias < 0]
        if self.measure_floors:
            self._note_bottleneck(ins.op, args, sum(r.nbytes for r in fresh) + ins.workspace)
        made: dict[str, Cell] = {}
        time_left = ins.time
        if fresh or not ins.results:
            op = TraceOp(ins.op, len(fresh), False, time_left, self.guard, ins.workspace)
            metas = [((r.nbytes,), BYTE) for r in fresh]
            for r, cell in zip(fresh, compute(op, args, metas, None, ins.constant), strict=True):
                made[r.name] = cell
            time_left = 0.0
        if len(made) < len(ins.results):
            for j in sorted({r.alias for r in ins.results if r.alias >= 0}):
                group = [r for r in ins.results if r.alias == j]
                op = TraceOp(ins.op, len(group), True, time_left, self.guard)
                inputs = (args[j], *args[:j], *args[j + 1 :])
                metas = [((r.nbytes,), BYTE) for r in group]
                for r, cell in zip(group, compute(op, inputs, metas, None), strict=True):
                    made[r.name] = cell
                time_left = 0.0
        for r in ins.results:
            self._define(r.name, made[r.name])
        if ins.constant and self.measure_floors:
            self.constant_floor = max(self.constant_floor, self._constants())

    def _mutate(self, ins: Mutate) -> None:
        args = tuple(self.cells[a] for a in ins.args)
        sizes = [args[i].storage.nbytes for i in ins.mutate]
        if self.measure_floors:
            self._note_bottleneck(ins.op, args, sum(sizes))
        op = TraceOp(ins.op, len(sizes), False, ins.time, self.guard)
        new = self.allocator.compute(op, args, [((n,), BYTE) for n in sizes], None)
        for i, cell in zip(ins.mutate, new, strict=True):
            name = ins.args[i]
            old = self.cells[name]
            self._define(name, cell)
            self._drop(old)

    def _copy(self, ins: Copy) -> None:
        self._define(ins.dst, self.cells[ins.src])

    def _copy_from(self, ins: CopyFrom) -> None:
        old = self.cells[ins.dst]
        self._define(ins.dst, self.cells[ins.src])
        self._drop(old)

    def _make_constant(self, ins: MakeConstant) -> None:
        storage = self.cells[ins.name].storage
        had_recipe = storage.producer is not None
        self.allocator.make_constant(storage, if_resident=ins.if_resident)
        if ins.if_resident and had_recipe and self.measure_floors:
            self.conditional.add(storage)
        elif self.measure_floors:
            self.constant_floor = max(self.constant_floor, self._constants())

    def _annotate(self, ins: Annotate) -> None:
        if ins.annotation == STEP:
            expected, self._first_step_cost = self._first_step_cost, None
            self.runtime.mark_step(expected_cost=expected)

    def _release(self, ins: Release) -> None:
        self._drop(self.cells.pop(ins.name))

    def _drop(self, cell: Cell) -> None:
        """A handle to ``cell`` dies (``Allocator.release``, whose callers hold its lock)."""
        with self.allocator.lock:
            self.allocator.release(cell)


def baseline(trace: Trace) -> Baseline:
    """The unbounded replay of ``trace`` (``measure_baseline``), measured once and kept
    with the trace."""
    if trace.measured_baseline is None:
        trace.measured_baseline = measure_baseline(trace)
    return trace.measured_baseline


def measure_baseline(trace: Trace) -> Baseline:
    """Replay without a budget: the peak (what ratios are relative to) and the two floors
    below which no policy can run the trace."""
    replayer = Replayer(None, "dtr", "eager", measure_floors=True)
    try:
        for ins in trace.instructions:
            replayer.step(ins)
        replayer.finish()
        return Baseline(
            replayer.stats.peak_memory,
            replayer.constant_floor,
            max(replayer.bottleneck, replayer.constant_floor),
            replayer.bottleneck_op,
            replayer.working_set,
            replayer.working_set_op,
        )
    finally:
        replayer.close()


def resolve_budget(
    trace: Trace, ratio: float | None, budget: int | None, prototype: bool = False
) -> int | None:
    """The budget in bytes: ``budget``, or ``ratio`` x the unbounded peak (with
    ``prototype``, the paper's simulator's peak: ``minidtr.sim.prototype``)."""
    if ratio is not None and budget is not None:
        raise ValueError("give a budget ratio or a budget in bytes, not both")
    if ratio is None:
        return budget
    if not 0 < ratio < math.inf:
        raise ValueError(f"the budget ratio must be a finite number > 0, got {ratio}")
    if prototype:
        from .prototype import prototype_peak

        return int(ratio * prototype_peak(trace))
    return int(ratio * baseline(trace).peak_memory)


def simulate(
    trace: Trace,
    ratio: float | None = None,
    budget: int | None = None,
    heuristic: str | None = None,
    dealloc: str | None = None,
    thrash: float | None = 2.0,
    *,
    outputs: bool = True,
    options: RuntimeOptions | None = None,
    live_guard: bool = False,
    **settings: Any,
) -> SimResult:
    """Replay ``trace`` under ``budget`` bytes, or ``ratio`` x the unbounded replay's peak
    (constants included; neither = unbounded).

    The runtime's settings are ``options`` (default: the runtime's defaults, heuristic
    dtr, dealloc eager) with ``budget``, ``heuristic``, ``dealloc`` and any other of
    ``REPLAY_SETTINGS`` given by keyword put over them (``sample=True``, ...). Stops with
    status ``"thrash"`` once recomputation passes ``(thrash - 1)`` x the trace's compute
    (the slowdown would pass ``thrash``; None or inf: never), and with ``"oom"`` when the
    budget cannot be met. With ``outputs`` the names held at the end are made resident
    (the prototype's rule); ``outputs=False`` stops after the last instruction, which is
    what a live run's statistics correspond to. ``record_events`` keeps the runtime's
    event log in ``result.extra["events"]``. ``rebuild_orphans=False`` is the paper's plain
    eager eviction (see ``minidtr.runtime.lifetime``); with ``keep_dead_remats`` too, a
    replay keeps dead rematerialized storages as candidates, as the paper's simulator does.
    ``live_guard`` adds the live runtime's thrash guard, ``options.max_slowdown``
    (before each rematerialization, against the compute expected by the end of the step,
    the trace's ``ANNOTATE STEP`` marks standing for ``minidtr train``'s, see
    ``Replayer``; at each mark and at the end, the slowdown so far), status ``"thrash"``
    too, so a replay stops where the live run would.
    """
    if not isinstance(trace, Trace):
        raise TypeError(
            f"simulate: trace must be a Trace (sim.load_log reads one from a file), got "
            f"{type(trace).__name__} {trace!r}"
        )
    if thrash is not None and not thrash >= 1:  # (NaN too: the guard was silently off)
        raise ValueError(
            f"simulate: thrash must be a slowdown >= 1, or None for no limit (the command "
            f"line's --thrash 0), got {thrash!r}"
        )
    options = replay_options(
        options, budget=budget, heuristic=heuristic, dealloc=dealloc, **settings
    )
    bytes_budget = resolve_budget(trace, ratio, options.budget, options.as_prototype)
    total = trace.total_compute
    limit = (thrash - 1.0) * total if thrash is not None and math.isfinite(thrash) else math.inf
    replayer = Replayer(
        options=options.replace(budget=bytes_budget),
        thrash_cost=limit,
        trace=trace,
        live_guard=live_guard,
    )
    status, error, done, output_remats = "ok", None, 0, 0
    started = time.perf_counter()
    # A trace's costs may be any finite numbers: a score past the largest float is inf, as
    # the reference loop's Python division gives it, without NumPy's overflow warning
    # from the accelerated search's arrays (a TIME of 1e307 over a staleness of 1e-9).
    try:
        with np.errstate(over="ignore"):
            for ins in trace.instructions:
                replayer.step(ins)
                done += 1
            if outputs:
                output_remats = replayer.finish()
            replayer.runtime.check_slowdown()  # the live guard's check at exit
    except (Thrashing, ThrashError):
        status = "thrash"
    except BudgetError as e:
        status, error = "oom", str(e)
        if bytes_budget is not None:
            from .floors import below_floor_message

            why = below_floor_message(trace, bytes_budget, replayer.options.dealloc)
            if why is not None:
                error = f"{why} ({error})"
    finally:
        elapsed = time.perf_counter() - started
        replayer.close()
    stats = replayer.stats
    slowdown = slowdown_of(stats.remat_cost, total)
    extra = {"events": replayer.runtime.events} if options.record_events else {}
    if options.fit == "contiguous":
        measured = replayer.runtime.address_stats()
        extra.update({name: measured[name] for name in ADDRESS_COLUMNS})
    return SimResult(
        trace=trace.name,
        heuristic=replayer.runtime.heuristic.name,
        dealloc=options.dealloc,
        ratio=ratio,
        budget=bytes_budget,
        status=status,
        slowdown=math.nan if status == "oom" else slowdown,
        compute=total,
        remat_cost=stats.remat_cost,
        remats=stats.remats,
        output_remats=output_remats,
        evictions=stats.evictions,
        dead_evictions=stats.dead_evictions,
        banished=stats.banished,
        orphan_remats=stats.orphan_remats,
        peak_memory=stats.peak_memory,
        ops=trace.ops,
        instructions_done=done,
        search_time=stats.search_time,
        replay_time=elapsed,
        error=error,
        extra=extra,
    )
