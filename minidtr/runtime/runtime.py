"""``md.Runtime``: the memory policy (budget, heuristic, deallocation, cost) as a context manager.

All storages of a process live in one allocator per device; a Runtime is the
policy that allocator applies while the runtime is active. Everything
resident counts against the budget: activations, gradients, constants,
parameters and optimizer state, whether created inside the ``with`` or
before it. Runtimes nest: the effective budget is the tightest of all active
ones, and the innermost decides heuristic, deallocation and cost. A runtime
can be entered again after it exits (its statistics accumulate), but not
while it is already active.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .heuristics import make_heuristic

DEALLOC_POLICIES = ("eager", "banish", "ignore")
COST_MODELS = ("time", "flops")


class BudgetError(MemoryError):
    """The budget cannot hold what an op needs, even after evicting everything evictable."""

    def __init__(
        self,
        op: str,
        needed: int,
        budget: int,
        memory: int,
        pinned: int,
        constant: int,
        locked: int,
    ):
        self.op, self.needed, self.budget, self.memory = op, needed, budget, memory
        self.pinned, self.constant, self.locked = pinned, constant, locked
        super().__init__(
            f"{op}: needs {needed:,} bytes but the budget is {budget:,} bytes and "
            f"{memory:,} are in use after evicting all it could: {constant:,} constant, "
            f"{pinned:,} pinned, {locked:,} locked by running ops. Raise the budget to at "
            f"least {memory + needed:,} bytes or free references."
        )


class ThrashError(BudgetError):
    """The run passed the runtime's thrash guard: recomputation made it more than
    ``max_slowdown`` times slower in the cost model, or eviction work (searching for
    victims, evicting, recomputing) made its wall time more than ``max_wall_slowdown``
    times what it would be without it. The budget is too small to make progress at an
    acceptable cost (the paper stops such runs at 2x)."""

    def __init__(
        self,
        op: str,
        slowdown: float,
        limit: float,
        budget: int | None,
        *,
        wall: bool = False,
        detail: str = "",
    ):
        self.op, self.slowdown, self.limit, self.budget = op, slowdown, limit, budget
        self.wall = wall
        budget_text = "no budget" if budget is None else f"budget {budget:,} bytes"
        if wall:
            what = (
                f"eviction work ({detail}) has made this run {slowdown:.1f}x slower in wall "
                f"time than without it, past max_wall_slowdown={limit:g}"
            )
        else:
            what = (
                f"recomputing {op} would make this run {slowdown:.2f}x slower than without "
                f"eviction (cost model), past max_slowdown={limit:g}"
            )
        MemoryError.__init__(
            self,
            f"{what} ({budget_text}). The budget is too small to train at an acceptable "
            "cost: raise it, or raise the limit (None disables the guard).",
        )


@dataclass
class Stats:
    """A runtime's counters.

    ``remats`` counts rematerializations: one per recipe replayed, i.e. one recomputed
    op, however many outputs it refills (the event log has one ``remat`` event per
    output refilled; ``minidtr explain`` and the simulator count replays, as here).
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

    def add(self, other: Stats, since: Stats) -> None:
        """Add what ``other`` counted after the snapshot ``since`` (for nested runtimes;
        not ``wall_time``, which the outer runtime's own clock already covers)."""
        for name in (
            "ops",
            "evictions",
            "remats",
            "banished",
            "dead_evictions",
            "orphan_remats",
            "compute_cost",
            "remat_cost",
            "search_time",
            "searches",
            "scored",
            "overhead_time",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name) - getattr(since, name))
        self.peak_memory = max(self.peak_memory, other.peak_memory)

    @property
    def slowdown(self) -> float:
        """(compute + remat) / compute in the cost model; 1 before anything was computed."""
        total = self.compute_cost
        return (total + self.remat_cost) / total if total > 0 else 1.0


# The default thrash guard (see Runtime and docs/cli.md): above what the runs the docs call
# trainable cost (up to about 3.3x in the cost model, 3.6x in wall time), far below what
# thrashing runs reach.
DEFAULT_MAX_SLOWDOWN = 4.0
DEFAULT_MAX_WALL_SLOWDOWN = 10.0
# The wall-clock guard judges only runs that have been active this long (seconds): before
# that a ratio of wall times is noise, and nothing has ground for long yet.
WALL_GUARD_AFTER = 10.0
MAX_BUDGET = 2**63 - 1  # bytes: what an int64 holds


def check_budget(value: Any) -> int | None:
    """``value`` as a budget: None, or a number of bytes >= 0 that fits in int64 (rounded
    down to a whole byte)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"budget must be a number of bytes or None, got {type(value).__name__} {value!r}"
        )
    if not math.isfinite(value):
        raise ValueError(f"budget must be a finite number of bytes or None, got {value}")
    if value < 0:
        raise ValueError(f"budget must be >= 0 bytes or None, got {value}")
    if value > MAX_BUDGET:
        raise ValueError(f"budget must be at most {MAX_BUDGET:,} bytes (2**63 - 1), got {value:g}")
    return int(value)  # a fraction of a byte is rounded down: 0.3 * peak is a fine budget


def check_limit(name: str, value: Any) -> float | None:
    """A thrash limit: None (no limit) or a finite or infinite number > 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number > 1 or None, got {type(value).__name__}")
    if math.isnan(value) or value <= 1.0:
        raise ValueError(
            f"{name} must be > 1 (a slowdown: 2 means twice as slow) or None to disable "
            f"the guard, got {value}"
        )
    return float(value)


class Runtime:
    """A memory budget and eviction policy; see the module docstring."""

    def __init__(
        self,
        budget: int | None = None,
        heuristic: str | Any = "dtr",
        dealloc: str = "eager",
        cost: str | Callable[..., float] = "time",
        *,
        sample: bool = False,
        min_size: float = 0.0,
        record_events: bool = False,
        seed: int = 0,
        device: str = "cpu",
        max_slowdown: float | None = DEFAULT_MAX_SLOWDOWN,
        max_wall_slowdown: float | None = DEFAULT_MAX_WALL_SLOWDOWN,
        rebuild_orphans: bool = True,
        keep_dead_remats: bool = False,
    ):
        """
        budget: bytes, a hard limit on resident bytes; None = unbounded.
        heuristic: a name from ``minidtr.runtime.heuristics`` (dtr, dtr_eq, dtr_local,
            msps, lru, size, random, or an ablation-grid name), or an object with a
            ``name`` and ``score(storage, allocator)`` (lower = evicted first).
        dealloc: what happens when the last reference to a storage dies:
            ``eager`` evicts it (metadata kept while evicted children may need it),
            ``banish`` frees it for good and makes its children unevictable,
            ``ignore`` leaves it resident until the heuristic evicts it.
        cost: ``time`` (measured ns), ``flops`` (a deterministic estimate from
            each op's flop and byte counts) or ``f(op, in_metas, out_metas) -> float``.
        sample: score only about sqrt(n) candidates per eviction (random stride).
        min_size: skip candidates smaller than this fraction of the mean candidate size.
        record_events: keep a log of every alloc/evict/remat/free/banish (``events``);
            budget evictions carry the lowest-scoring candidates with their score terms,
            remats their cascade (``minidtr explain``), ``mark_step`` adds step marks.
        seed: seeds the random heuristic and candidate sampling.
        max_slowdown: the thrash guard in the cost model: raise ``ThrashError`` instead of
            running a rematerialization that would take the slowdown so far, (compute +
            remat) / compute, past this (checked before every one, so the slowdown a run
            reports never exceeds it). Default 4; None disables it. Must be > 1.
        max_wall_slowdown: the thrash guard in wall time: raise ``ThrashError`` once the
            runtime has been active for ``WALL_GUARD_AFTER`` seconds and eviction work
            (searching for victims, evicting, recomputing) has made its wall time more
            than this many times the rest (wall_time / (wall_time - overhead_time)). It
            catches runs whose time goes to the eviction search rather than to
            recomputation, which the cost model does not see. Default 10; None disables
            it. Must be > 1.
        rebuild_orphans: under ``eager`` deallocation, before evicting a dead storage,
            rematerialize its evicted children that are still referenced, so their
            rebuild does not come to need it (``minidtr.runtime.lifetime``). False is the
            paper's plain eager eviction.
        keep_dead_remats: storages that nobody references, rematerialized only to rebuild
            others, stay resident as ordinary candidates after the access that needed them
            (the paper's simulator) instead of being freed when it ends (the default).
        """
        budget = check_budget(budget)
        max_slowdown = check_limit("max_slowdown", max_slowdown)
        max_wall_slowdown = check_limit("max_wall_slowdown", max_wall_slowdown)
        if dealloc not in DEALLOC_POLICIES:
            raise ValueError(f"unknown dealloc {dealloc!r}; expected one of {DEALLOC_POLICIES}")
        if not callable(cost) and cost not in COST_MODELS:
            raise ValueError(f"unknown cost {cost!r}; expected one of {COST_MODELS} or a callable")
        if not 0.0 <= min_size < 1.0:
            raise ValueError(f"min_size is a fraction of the mean size in [0, 1), got {min_size}")
        self._budget = budget
        if hasattr(heuristic, "score"):
            self.heuristic = heuristic
        else:
            self.heuristic = make_heuristic(heuristic, seed)
        self.dealloc = dealloc
        self.cost = cost
        self.sample = sample
        self.min_size = min_size
        self.seed = seed
        self.device = device
        self.max_slowdown = max_slowdown
        self.max_wall_slowdown = max_wall_slowdown
        self.rebuild_orphans = rebuild_orphans
        self.keep_dead_remats = keep_dead_remats
        self.stats_ = Stats()
        self.events: list[dict[str, Any]] | None = [] if record_events else None
        self._steps_marked = 0
        self.allocator = None
        self._entered_at: Stats | None = None
        self._active_since = 0.0  # perf_counter() when last entered

    @property
    def budget(self) -> int | None:
        return self._budget

    @budget.setter
    def budget(self, value: int | None) -> None:
        """Change the budget; when active, evicts at once to meet a lower one."""
        value = check_budget(value)
        old, self._budget = self._budget, value
        if self.allocator is not None:
            try:
                self.allocator.apply_budget()
            except BudgetError:
                self._budget = old
                self.allocator.apply_budget()
                raise

    @property
    def active(self) -> bool:
        return self.allocator is not None

    def __enter__(self) -> Runtime:
        from .allocator import allocator_for

        allocator_for(self.device).push(self)
        return self

    def __exit__(self, *exc) -> None:
        allocator = self.allocator
        allocator.pop(self)
        if exc[0] is None:
            allocator.raise_pending()  # e.g. a ThrashError met while a tensor died
        else:
            allocator.pending_error = None  # the run already fails with its own error

    def stats(self) -> dict[str, Any]:
        """Counters since creation (all activations together), with current memory."""
        out = asdict(self.stats_)
        out["budget"] = self._budget
        out["heuristic"] = self.heuristic.name
        out["dealloc"] = self.dealloc
        from .allocator import allocator_for

        allocator = self.allocator or allocator_for(self.device)
        out["memory"] = allocator.memory
        out["slowdown"] = self.stats_.slowdown
        out["wall_time"] = self.wall_time()
        return out

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
        self.events.append({"event": kind, **fields})

    def mark_step(self, step: int | None = None) -> None:
        """Record the start of a training step in the event log (nothing when events are
        not recorded), so that ``minidtr explain`` and the plots can mark step boundaries.
        ``step`` defaults to the number of steps marked so far."""
        if self.events is None:
            return
        if step is None:
            step = self._steps_marked
        self._steps_marked = step + 1
        from .allocator import allocator_for

        allocator = self.allocator or allocator_for(self.device)
        self.record("step", step=step, clock=allocator.clock, memory=allocator.memory)

    def export_events(self, path: str) -> None:
        """Write the event log as JSON lines (one event per line)."""
        if self.events is None:
            raise ValueError("this runtime was created without record_events=True")
        with open(path, "w") as f:
            for event in self.events:
                f.write(json.dumps(event) + "\n")

    def __repr__(self) -> str:
        return (
            f"Runtime(budget={self._budget}, heuristic={self.heuristic.name!r}, "
            f"dealloc={self.dealloc!r}, cost={self.cost!r})"
        )


def now_ns() -> int:
    return time.perf_counter_ns()
