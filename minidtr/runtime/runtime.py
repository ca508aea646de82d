"""``md.Runtime``: the memory policy (budget, heuristic, deallocation, cost) as a context manager.

All storages of a process live in one allocator per device; a Runtime is the
policy that allocator applies while the runtime is active. Everything
resident counts against the budget: activations, gradients, constants,
parameters and optimizer state, whether created inside the ``with`` or
before it. Runtimes nest: the effective budget is the tightest of all active
ones, and the innermost decides heuristic, deallocation and cost, and records
the events: an outer runtime's statistics count what ran inside an inner one,
its event log does not (the inner one's, with ``record_events``, has it), and its
thrash guards do not judge it (the inner one's guard settings applied to it). A runtime
can be entered again after it exits (its statistics accumulate), but not
while it is already active. A device's runtimes serve one thread at a time:
entering one while another thread's is active on the same device is an error
(the two stacks would interleave); ``minidtr.sim`` replays have an allocator
each and run in any thread. Ops, reads and deaths may come from any thread: they
take turns on the allocator's lock, and count against the budget in force.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import interrupts
from .errors import BudgetError, ThrashError
from .guard import WALL_GUARD_AFTER  # noqa: F401  (re-exported)
from .heuristics import make_heuristic
from .options import (  # noqa: F401  (re-exported: the settings' checks lived here)
    COST_MODELS,
    DEALLOC_POLICIES,
    DEFAULT_MAX_SLOWDOWN,
    DEFAULT_MAX_WALL_SLOWDOWN,
    MAX_BUDGET,
    OPTION_NAMES,
    RuntimeOptions,
    check_budget,
    check_limit,
)

__all__ = ["BudgetError", "Runtime", "Stats", "ThrashError"]


@dataclass(slots=True)  # updated on every op: slot reads and writes are the cheapest
class Stats:
    """A runtime's counters.

    ``remats`` counts rematerializations: one per recipe replayed, i.e. one recomputed
    op, however many outputs it refills (the event log has one ``remat`` event per
    output refilled; ``minidtr explain`` and the simulator count replays, as here).
    Under ``as_prototype`` a view op computed again counts too, as the paper's
    simulator counts it, though it refills no storage and logs no event.
    ``compute_cost`` and ``remat_cost`` are in the cost model's units; the slowdown is
    (compute + remat) / compute. ``search_time`` is wall seconds spent scoring
    candidates; ``overhead_time`` is wall seconds spent on eviction work as a whole
    (making room: searching and evicting; and rematerializing), and ``wall_time`` the
    wall seconds the runtime has been active: the thrash guard's wall-clock measure is
    wall_time / (wall_time - overhead_time).
    """

    ops: int = 0
    evictions: int = 0
    remats: int = 0
    banished: int = 0
    dead_evictions: int = 0
    orphan_remats: int = 0
    compute_cost: float = 0.0
    remat_cost: float = 0.0
    peak_memory: int = 0
    search_time: float = 0.0
    searches: int = 0
    scored: int = 0
    overhead_time: float = 0.0
    wall_time: float = 0.0
    # measured with ``measure_real`` (``realmem.py``), else None: the most bytes of arrays
    # at once, and what the process held at its worst (Python objects included)
    real_peak: int | None = None
    traced_peak: int | None = None
    # under fit="contiguous" (``placement.py``): requests no free block held at first, the
    # sum of the fragmentation (1 - largest free block / free bytes) at each, evictions
    # made while the bytes alone fitted, and the highest end address of a used block
    placement_failures: int = 0
    fragmentation_sum: float = 0.0
    extra_evictions: int = 0
    peak_address: int = 0

    def add(self, other: Stats, since: Stats) -> None:
        """Add what ``other`` counted after the snapshot ``since`` (for nested runtimes;
        not ``wall_time``, which the outer runtime's own clock already covers, nor the
        measured peaks: the meter measures for every measuring runtime active)."""
        for name in SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name) - getattr(since, name))
        self.peak_memory = max(self.peak_memory, other.peak_memory)
        self.peak_address = max(self.peak_address, other.peak_address)

    @property
    def slowdown(self) -> float:
        """(compute + remat) / compute in the cost model; 1 before anything was computed."""
        total = self.compute_cost
        return (total + self.remat_cost) / total if total > 0 else 1.0


# the measures of the contiguous fit: in ``Runtime.stats()`` only under it
ADDRESS_STATS = ("placement_failures", "fragmentation_sum", "extra_evictions", "peak_address")
STATS = tuple(f.name for f in dataclasses.fields(Stats) if f.name not in ADDRESS_STATS)
# the counters a nested runtime adds to the one it runs in (``Stats.add``)
MEASURED = ("real_peak", "traced_peak")
SUMMED = tuple(
    f.name
    for f in dataclasses.fields(Stats)
    if f.name not in ("peak_memory", "peak_address", "wall_time", *MEASURED)
)
# The settings a Runtime keeps in another form than its RuntimeOptions field (the others
# are plain attributes of the same name).
OWN_FORM = ("budget", "heuristic", "record_events")


class Runtime:
    """A memory budget and eviction policy; see the module docstring."""

    def __init__(
        self,
        budget: int | None = None,
        heuristic: str | Any = "dtr",
        dealloc: str = "eager",
        cost: str | Callable[..., float] = "time",
        **options: Any,
    ):
        """Each keyword is a field of ``RuntimeOptions``, which says what it means
        (``Runtime.from_options`` takes such an object whole). A bad value raises
        ``ValueError`` or ``TypeError`` here, before the runtime is used."""
        unknown = sorted(set(options) - set(OPTION_NAMES))
        if unknown:
            raise TypeError(
                f"Runtime got unknown setting(s) {', '.join(unknown)}; the settings are "
                f"{', '.join(OPTION_NAMES)}"
            )
        self._configure(
            RuntimeOptions(
                budget=budget, heuristic=heuristic, dealloc=dealloc, cost=cost, **options
            )
        )

    @classmethod
    def from_options(cls, options: RuntimeOptions) -> Runtime:
        """A runtime with the settings ``options``."""
        runtime = cls.__new__(cls)
        runtime._configure(options)
        return runtime

    def _configure(self, options: RuntimeOptions) -> None:
        """Copy the settings to plain attributes (what the allocator reads on every op)."""
        for name in OPTION_NAMES:
            if name not in OWN_FORM:
                setattr(self, name, getattr(options, name))
        self._budget = options.budget
        self._use_heuristic(options.heuristic)
        self.stats_ = Stats()
        self.events: list[dict[str, Any]] | None = [] if options.record_events else None
        # the cost of the view ops run since the last event (they have no event of their
        # own), which the next event carries as its view_cost
        self.unlogged_view_cost = 0.0
        self._steps_marked = 0
        self._step_start: float | None = None  # compute_cost when the current step began
        # the compute the run is expected to have done by the end of the current step: the
        # cost-model guard measures recomputation against max(compute so far, this)
        self.expected_compute = 0.0
        # the part of stats_.remat_cost asked for (``minidtr.testing.recompute``), which
        # the thrash guard does not charge: no budget made it
        self.asked_remat_cost = 0.0
        # what inner runtimes counted, added to stats_ when they exit (``Allocator.pop``):
        # reported by stats(), but not judged by this runtime's thrash guards, since it
        # ran under the inner runtime's guard settings
        self.inner_stats = Stats()
        self.allocator = None
        self._active_since = 0.0  # perf_counter() when last entered
        self._thread: int | None = None  # the thread that entered it (while active)
        self._sigint: object | None = None  # the handler ``__enter__`` replaced (interrupts.py)

    @property
    def heuristic(self) -> Any:
        """The heuristic in force (an object with ``score``). Assigning one, or a name
        as ``Runtime(heuristic=...)`` takes, switches it from the next eviction on; the
        value is checked as when the runtime is made."""
        return self._heuristic

    @heuristic.setter
    def heuristic(self, heuristic: str | Any) -> None:
        dataclasses.replace(self.options, heuristic=heuristic)  # refuses what Runtime(...) refuses
        allocator = self.allocator
        if allocator is not None:
            self._detach_heuristic(allocator)
        self._use_heuristic(heuristic)
        attach = getattr(self._heuristic, "attach", None)  # a heuristic that watches (learned)
        if allocator is not None and attach is not None:
            attach(allocator)

    def _use_heuristic(self, heuristic: str | Any) -> None:
        self._heuristic_given = heuristic
        if hasattr(heuristic, "score"):
            self._heuristic = heuristic
        else:
            self._heuristic = make_heuristic(heuristic, self.seed)

    @property
    def options(self) -> RuntimeOptions:
        """The settings now in force (the attributes, which may have been changed since
        the runtime was made), as a ``RuntimeOptions``."""
        given = self._heuristic_given
        named = isinstance(given, str) and given == self.heuristic.name
        copied = {name: getattr(self, name) for name in OPTION_NAMES if name not in OWN_FORM}
        return RuntimeOptions(
            budget=self._budget,
            heuristic=given if named else self.heuristic,
            record_events=self.events is not None,
            **copied,
        )

    @property
    def budget(self) -> int | None:
        return self._budget

    @budget.setter
    def budget(self, value: int | None) -> None:
        """Change the budget; when active, evicts at once to meet a lower one."""
        value = check_budget(value)
        allocator = self.allocator
        if allocator is None:
            self._budget = value
            return
        with allocator.lock:
            old, self._budget = self._budget, value
            try:
                allocator.apply_budget("setting the budget")
            except BudgetError:
                self._budget = old
                allocator.apply_budget("setting the budget back")
                raise

    @property
    def active(self) -> bool:
        return self.allocator is not None

    def __enter__(self) -> Runtime:
        from .registry import allocator_for

        self.enter_on(allocator_for(self.device))
        self._sigint = interrupts.install()  # Ctrl-C waits for a consistent point
        return self

    def enter_on(self, allocator: Any) -> Runtime:
        """Become the innermost active runtime of ``allocator`` (what ``with`` does on the
        device's allocator; an allocator enters its default runtime this way)."""
        if self.allocator is not None:
            raise RuntimeError(f"{self!r} is already active; a runtime cannot be re-entered")
        with allocator.lock:  # (another thread's op waits, and so does its runtime)
            thread = threading.get_ident()
            innermost = allocator.runtimes[-1] if len(allocator.runtimes) > 1 else None
            if innermost is not None and innermost._thread != thread and innermost.owner_alive:
                raise RuntimeError(_other_thread(self, innermost, allocator))
            self._thread = thread
            self._active_since = time.perf_counter()
            attach = getattr(self.heuristic, "attach", None)  # a heuristic that watches (learned)
            if attach is not None:
                attach(allocator)
            try:
                allocator.push(self)
            except BaseException:
                self._detach_heuristic(allocator)
                raise
            self.allocator = allocator
            return self

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles of an inactive runtime (its settings and counters); an active
        one belongs to its allocator's stack, which a copy could neither join nor leave."""
        if self.allocator is not None:
            raise TypeError(
                f"cannot copy or pickle {self!r} while it is active: copy it before "
                "entering it or after leaving it"
            )
        return self.__dict__

    @property
    def owner_alive(self) -> bool:
        """Whether the thread that entered this active runtime still runs. One that ended
        inside its ``with`` (or that a forked child does not have) owns it no more: any
        thread may then leave it, or enter another runtime above it."""
        return any(thread.ident == self._thread for thread in threading.enumerate())

    def _detach_heuristic(self, allocator: Any) -> None:
        detach = getattr(self.heuristic, "detach", None)
        if detach is not None:
            detach(allocator)

    def leave(self) -> None:
        """Stop being active (what the end of the ``with`` does, before its checks)."""
        if self.allocator is None:
            raise RuntimeError(f"{self!r} is not active: it cannot be left")
        other = self._thread != threading.get_ident() and len(self.allocator.runtimes) > 1
        if other and self.owner_alive:
            raise RuntimeError(f"{self!r} was entered in another thread: leave it there")
        with self.allocator.lock:
            self.allocator.pop(self)
        self._detach_heuristic(self.allocator)
        self.allocator = None
        self.stats_.wall_time += time.perf_counter() - self._active_since

    def __exit__(self, *exc) -> None:
        allocator = self.allocator
        self.leave()
        interrupted = interrupts.uninstall(self._sigint)
        self._sigint = None
        if exc[0] is None:
            allocator.raise_pending()  # e.g. a ThrashError met while a tensor died
            self.check_slowdown()
            if interrupted:
                raise KeyboardInterrupt  # a Ctrl-C no op answered is not lost
        else:
            allocator.discard_pending()  # the run already fails with its own error

    def stats(self) -> dict[str, Any]:
        """Counters since creation (all activations together), with current memory."""
        out = {name: getattr(self.stats_, name) for name in STATS}  # asdict, without copies
        out["budget"] = self._budget
        out["heuristic"] = self.heuristic.name
        out["dealloc"] = self.dealloc
        from .registry import allocator_for

        allocator = self.allocator or allocator_for(self.device)
        out["memory"] = allocator.memory
        out["slowdown"] = self.stats_.slowdown
        out["wall_time"] = self.wall_time()
        if self.fit == "contiguous":
            out.update(self.address_stats())
        return out

    def address_stats(self) -> dict[str, Any]:
        """What the contiguous fit measured (``placement.py``): its failures, the mean
        fragmentation at them, the extra evictions and the peak address."""
        stats = self.stats_
        failures = stats.placement_failures
        return {
            "fit": self.fit,
            "placement": self.placement,
            "placement_failures": failures,
            "fragmentation": stats.fragmentation_sum / failures if failures else 0.0,
            "extra_evictions": stats.extra_evictions,
            "peak_address": stats.peak_address,
        }

    def wall_time(self) -> float:
        """Wall seconds this runtime has been active, the current activation included."""
        running = time.perf_counter() - self._active_since if self.allocator is not None else 0.0
        return self.stats_.wall_time + running

    def wall_slowdown(self) -> float:
        """Wall time over wall time without eviction work (1 when there was none)."""
        wall = self.wall_time()
        rest = wall - self.stats_.overhead_time
        return wall / rest if rest > 0 else math.inf

    def record(self, kind: str, **fields: Any) -> None:
        """Add an event to the log, with the ``view_cost`` of the view ops run since the
        event before (so that the log's costs add up to ``stats()["compute_cost"]``)."""
        if self.unlogged_view_cost:
            fields["view_cost"] = self.unlogged_view_cost
            self.unlogged_view_cost = 0.0
        self.events.append({"event": kind, **fields})

    def mark_step(self, step: int | None = None, expected_cost: float | None = None) -> None:
        """Mark the start of a training step: for the cost-model thrash guard, and in the
        event log when events are recorded (``minidtr explain`` and the plots show step
        boundaries). ``step`` defaults to the number of steps marked so far.

        From a mark on, ``max_slowdown`` measures recomputation against the larger of the
        compute so far and the compute expected by the end of this step: what the run had
        computed at the mark plus ``expected_cost`` (the step's compute in the cost
        model's units), or, when it is not given, plus the previous step's compute (the
        compute between the last two marks; nothing at the first mark). So a step is not
        stopped early for recomputing before much of its compute has run, and every step
        that computes at least what was expected ends with the run's slowdown within the
        limit (``RuntimeOptions.max_slowdown`` says it exactly)."""
        if expected_cost is not None and (
            isinstance(expected_cost, bool)
            or not isinstance(expected_cost, numbers.Real)
            or not math.isfinite(expected_cost)
            or expected_cost < 0
        ):
            raise ValueError(
                f"mark_step: expected_cost must be a finite number >= 0 (the step's compute "
                f"in the cost model), got {expected_cost!r}"
            )
        self.check_slowdown()
        from .registry import allocator_for

        allocator = self.allocator or allocator_for(self.device)
        compute = self.stats_.compute_cost
        if expected_cost is None:
            expected_cost = 0.0 if self._step_start is None else compute - self._step_start
        self._step_start = compute
        self.expected_compute = compute + expected_cost
        if step is None:
            step = self._steps_marked
        self._steps_marked = step + 1
        observer = allocator.observer
        if observer is not None and hasattr(observer, "on_step"):
            observer.on_step()
        if self.events is not None:
            self.record("step", step=step, clock=allocator.clock, memory=allocator.memory)

    @property
    def charged_remat_cost(self) -> float:
        """The recomputation the thrash guard charges: all of ``stats_.remat_cost`` but
        what was asked for (``asked_remat_cost``) and what inner runtimes recomputed
        (``inner_stats``)."""
        return self.stats_.remat_cost - self.asked_remat_cost - self.inner_stats.remat_cost

    @property
    def charged_overhead_time(self) -> float:
        """The eviction work the wall-clock guard charges: ``stats_.overhead_time`` but
        what inner runtimes spent (``inner_stats``)."""
        return self.stats_.overhead_time - self.inner_stats.overhead_time

    def check_slowdown(self) -> None:
        """Raise ``ThrashError`` when the run's slowdown so far passes ``max_slowdown``:
        checked at each ``mark_step`` and when the runtime exits without an error, which
        catches a step that recomputed against an expected compute it did not reach."""
        limit = self.max_slowdown
        compute = self.stats_.compute_cost
        slowdown = (compute + self.charged_remat_cost) / compute if compute > 0 else 1.0
        if limit is not None and slowdown > limit:
            raise ThrashError("step", slowdown, limit, self._budget, step_end=True)

    def header(self, **extra: Any) -> dict[str, Any]:
        """The ``runtime`` event that opens an event log: the budget, the heuristic and its
        score formula, the deallocation policy and the cost model (the clock's unit), and
        any ``extra`` fields (``minidtr train`` adds the model and its size). The view ops
        run since the last event, which no event carries, are its ``end_view_cost``, so
        that a log written now adds up to ``stats()["compute_cost"]``."""
        cost = self.cost if isinstance(self.cost, str) else getattr(self.cost, "__name__", "?")
        return {
            "event": "runtime",
            "budget": self._budget,
            "heuristic": self.heuristic.name,
            "score": getattr(self.heuristic, "formula", "?"),
            "dealloc": self.dealloc,
            "cost": cost,
            **({"fit": self.fit, "placement": self.placement} if self.fit != "bytes" else {}),
            **({"end_view_cost": self.unlogged_view_cost} if self.unlogged_view_cost else {}),
            **extra,
        }

    def export_events(self, path: str, **extra: Any) -> None:
        """Write the event log as JSON lines: the ``header`` (with ``extra``), then one
        event per line; what ``minidtr explain`` reads."""
        if self.events is None:
            raise ValueError("this runtime was created without record_events=True")
        with open(path, "w") as f:
            f.write(json.dumps(self.header(**extra)) + "\n")
            for event in self.events:
                f.write(json.dumps(event) + "\n")

    def __repr__(self) -> str:
        return (
            f"Runtime(budget={self._budget}, heuristic={self.heuristic.name!r}, "
            f"dealloc={self.dealloc!r}, cost={self.cost!r})"
        )


def now_ns() -> int:
    return time.perf_counter_ns()


def _other_thread(runtime: Runtime, innermost: Runtime, allocator: Any) -> str:
    """Why ``runtime`` cannot enter ``allocator`` now: a runtime of another thread is
    active on it. A device has one allocator per process, and its runtimes are a stack:
    two threads entering and leaving theirs in turn would each leave the other's."""
    device = allocator.device or "a replay's"
    return (
        f"{runtime!r}: {innermost!r} is active on the {device} allocator in another thread, "
        "and a device's runtimes serve one thread at a time: run the other program in a "
        "process of its own (minidtr.sim's replays have an allocator each, any thread)"
    )
