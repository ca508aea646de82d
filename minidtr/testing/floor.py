"""How small a budget can a function run under? The floors of a program, measured.

``budget_floor(fn)`` runs ``fn`` once unbounded on memory of its own while
recording its trace (``minidtr.sim.record``), then reads off the trace:

- ``constants``: the most bytes of constants (inputs, parameters, optimizer
  state, finished gradients) alive at once. No budget below it can work under
  ``eager`` or ``ignore`` deallocation.
- ``largest_op``: the most bytes one op needs at once: the constants alive then,
  plus its inputs and outputs. No budget below it can work under ``eager`` or
  ``ignore`` either.

Both count the constants alive in the recorded (eager) run, and a constant stays
alive there as long as a recipe reads it: an input whose handle is gone but
from which a live value could still be recomputed. ``banish`` drops the recipes
of a dead storage's children, so such constants go sooner, and a run under
``banish`` can fit below ``largest_op`` and ``constants``: for ``banish`` the
search for ``minimal`` starts from zero, not from ``largest_op``.
- ``minimal``: the smallest budget under which the simulator replays the trace
  with the given heuristic and deallocation policy without getting slower than
  ``max_slowdown`` (20x by default), found by bisection (to 0.5% of the peak).
  The simulator drives the same allocator and heuristics as a live run, and with
  ``cost="flops"`` it makes the same decisions, so this is the live run's floor
  too (up to the bisection's tolerance, and the thrash limit, which the live run
  checks as it goes and the replay against the whole trace's compute). Between
  ``largest_op`` and ``minimal`` it is the heuristic, not the program, that runs out.
  Feasibility need not be monotonic in the budget: a heuristic's choices under a larger
  budget can lead to a point where an op's inputs and outputs no longer fit, so a budget
  above ``minimal`` can still fail (a six-op random program under ``random`` replays at
  1,357 bytes, not from 1,445 to 1,477, and again from 1,485). The bisection finds a
  budget that replays with one within its tolerance below that does not.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..runtime import Runtime
from ..sim.simulator import baseline

# A budget under which a run gets slower than this (compute and recompute over compute)
# counts as infeasible: it is thrashing (the paper stops at 2x). The default of
# ``assert_remat_equivalent``'s ``max_slowdown`` too.
THRASH_LIMIT = 20.0

# Floors already found, by (the trace's fingerprint, heuristic, dealloc, rebuild_orphans,
# max_slowdown): hypothesis replays a failing example many times while it shrinks it.
_FLOORS: OrderedDict[tuple, Floor] = OrderedDict()
_FLOORS_KEPT = 256


@dataclass(frozen=True)
class Floor:
    """The floors of one program (bytes). ``minimal`` is for ``heuristic``/``dealloc``;
    None when no budget up to the peak replays (it thrashes past ``max_slowdown``).
    ``constants`` and ``largest_op`` are floors under eager and ignore deallocation, not
    under banish (see the module docstring)."""

    peak: int
    constants: int
    largest_op: int
    minimal: int | None
    heuristic: str
    dealloc: str
    max_slowdown: float | None = THRASH_LIMIT

    @property
    def limit_text(self) -> str:
        if self.max_slowdown is None:
            return ""  # (without a limit, a budget fails by running out of memory alone)
        return f" within a {self.max_slowdown:g}x slowdown"

    def describe(self) -> str:
        minimal = (
            f"the smallest feasible budget is {self.minimal:,} bytes "
            f"({self.minimal / max(self.peak, 1):.3f} of peak) with heuristic={self.heuristic}, "
            f"dealloc={self.dealloc}"
            if self.minimal is not None
            else f"no budget below the peak runs{self.limit_text} "
            f"with heuristic={self.heuristic}, dealloc={self.dealloc}"
        )
        return (
            f"unbounded peak {self.peak:,} bytes; constants alone {self.constants:,} "
            f"({self.constants / max(self.peak, 1):.3f} of peak); the largest single op needs "
            f"{self.largest_op:,} ({self.largest_op / max(self.peak, 1):.3f}) with the "
            f"constants {'an eager run keeps ' if self.dealloc == 'banish' else ''}alive then; "
            f"{minimal}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "peak": self.peak,
            "constants": self.constants,
            "largest_op": self.largest_op,
            "minimal": self.minimal,
            "heuristic": self.heuristic,
            "dealloc": self.dealloc,
            "max_slowdown": self.max_slowdown,
        }


def record_reference(
    fn: Callable[[], Any], cost: Any = "flops", device: str = "cpu", grads_of: Sequence[Any] = ()
) -> tuple[Any, int]:
    """Run ``fn`` unbounded on a fresh allocator while recording it; returns its trace and
    the live run's peak. The ``.grad`` of ``grads_of`` is cleared for the run and restored
    after it (``run_under``), as in every other run of ``fn``."""
    from .. import sim
    from .equivalence import run_under
    from .isolation import isolated_allocator

    runtime = Runtime(cost=cost, device=device)
    with isolated_allocator(device), sim.record(device=device, name="fn") as recorder:
        run_under(fn, runtime, grads_of, fresh=False)
    return recorder.trace(), runtime.stats_.peak_memory


def fingerprint(trace: Any) -> str:
    """Equal for equal traces: the same program gives the same one with ``cost="flops"``."""
    digest = hashlib.sha1()
    for instruction in trace.instructions:
        digest.update(repr(instruction).encode())
    return digest.hexdigest()


def minimal_replay_budget(
    trace: Any,
    heuristic: str = "dtr",
    dealloc: str = "eager",
    rebuild_orphans: bool = True,
    low: int = 0,
    high: int | None = None,
    max_slowdown: float | None = THRASH_LIMIT,
) -> int | None:
    """The smallest budget (to 0.5% of the peak) under which ``trace`` replays without
    running out of memory or getting slower than ``max_slowdown`` (None: no limit), by
    bisection between ``low`` (known infeasible) and ``high`` (default: the peak)."""
    from ..sim import simulate

    def fits(budget: int) -> bool:
        result = simulate(
            trace,
            budget=budget,
            heuristic=heuristic,
            dealloc=dealloc,
            thrash=max_slowdown,
            outputs=False,
            rebuild_orphans=rebuild_orphans,
        )
        return result.status == "ok"

    peak = baseline(trace).peak_memory
    high = peak if high is None else high
    if not fits(high):
        return None
    low = min(low, high)
    tolerance = max(1, math.ceil(peak / 200))
    while high - low > tolerance:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle
    return high


def budget_floor(
    fn: Callable[[], Any],
    heuristic: str = "dtr",
    dealloc: str = "eager",
    *,
    cost: Any = "flops",
    device: str = "cpu",
    rebuild_orphans: bool = True,
    trace: Any = None,
    peak: int | None = None,
    max_slowdown: float | None = THRASH_LIMIT,
) -> Floor:
    """The floors of ``fn`` (see the module docstring). ``trace`` and ``peak`` reuse a
    recording of ``fn`` (``record_reference``) and its live unbounded peak."""
    if max_slowdown is not None and not max_slowdown > 1:  # (NaN too)
        raise ValueError(f"budget_floor: max_slowdown must be > 1 or None, got {max_slowdown!r}")
    if trace is None:
        trace, peak = record_reference(fn, cost, device)
    elif peak is None:
        peak = baseline(trace).peak_memory
    key = (fingerprint(trace), peak, heuristic, dealloc, rebuild_orphans, max_slowdown)
    if key in _FLOORS:
        _FLOORS.move_to_end(key)
        return _FLOORS[key]
    unbounded = baseline(trace)
    largest_op = max(unbounded.bottleneck, unbounded.constant_floor)
    high = max(peak, unbounded.peak_memory, 1)
    infeasible = 0 if dealloc == "banish" else largest_op - 1  # see the module docstring
    minimal = minimal_replay_budget(
        trace, heuristic, dealloc, rebuild_orphans, infeasible, high, max_slowdown
    )
    floor = Floor(
        peak, unbounded.constant_floor, largest_op, minimal, heuristic, dealloc, max_slowdown
    )
    _FLOORS[key] = floor
    if len(_FLOORS) > _FLOORS_KEPT:
        _FLOORS.popitem(last=False)
    return floor
