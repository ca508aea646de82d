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
    """Recomputation passed the runtime's ``max_slowdown``: the budget is too small to make
    progress at an acceptable cost (the paper stops such runs at 2x)."""

    def __init__(self, op: str, slowdown: float, limit: float, budget: int | None):
        self.op, self.slowdown, self.limit, self.budget = op, slowdown, limit, budget
        MemoryError.__init__(
            self,
            f"{op}: recomputation has made this run {slowdown:.1f}x slower than without "
            f"eviction, past max_slowdown={limit} (budget {budget:,} bytes); raise the budget",
        )


@dataclass
class Stats:
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

    def add(self, other: Stats, since: Stats) -> None:
        """Add what ``other`` counted after the snapshot ``since`` (for nested runtimes)."""
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
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name) - getattr(since, name))
        self.peak_memory = max(self.peak_memory, other.peak_memory)


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
        max_slowdown: float | None = None,
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
        max_slowdown: raise ``ThrashError`` once (compute + remat) / compute passes this
            (after at least 100 rematerializations) instead of thrashing on.
        rebuild_orphans: under ``eager`` deallocation, before evicting a dead storage,
            rematerialize its evicted children that are still referenced, so their
            rebuild does not come to need it (``minidtr.runtime.lifetime``). False is the
            paper's plain eager eviction.
        keep_dead_remats: storages that nobody references, rematerialized only to rebuild
            others, stay resident as ordinary candidates after the access that needed them
            (the paper's simulator) instead of being freed when it ends (the default).
        """
        if budget is not None and budget < 0:
            raise ValueError(f"budget must be >= 0 bytes or None, got {budget}")
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
        self.rebuild_orphans = rebuild_orphans
        self.keep_dead_remats = keep_dead_remats
        self.stats_ = Stats()
        self.events: list[dict[str, Any]] | None = [] if record_events else None
        self._steps_marked = 0
        self.allocator = None
        self._entered_at: Stats | None = None

    @property
    def budget(self) -> int | None:
        return self._budget

    @budget.setter
    def budget(self, value: int | None) -> None:
        """Change the budget; when active, evicts at once to meet a lower one."""
        if value is not None and value < 0:
            raise ValueError(f"budget must be >= 0 bytes or None, got {value}")
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
        total = out["compute_cost"]
        out["slowdown"] = (total + out["remat_cost"]) / total if total > 0 else 1.0
        return out

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
