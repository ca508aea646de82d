"""The budget frontier of a trace: the lowest budget ratio that replays within a slowdown.

``frontier`` scans the ratios down from 1 in steps of ``step`` until a replay fails
(out of memory, or slower than ``max_slowdown``), then bisects between the last
ratio that passed and the first that failed down to ``tolerance``. Ratios below the
trace's physical floor (``floors.floor``) are not replayed: no policy runs there.
The search assumes that a lower budget is never easier; a heuristic can break that
(a replay can pass at 0.3 and fail at 0.35), so every probe is kept and printed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .floors import Floor, floor
from .simulator import simulate
from .trace import Trace


@dataclass(frozen=True)
class Probe:
    """One budget tried: its ratio of the peak, bytes, outcome and cost."""

    ratio: float
    budget: int
    status: str  # "ok" | "thrash" (past max_slowdown) | "oom" | "below floor"
    slowdown: float  # nan unless replayed to the end or stopped at the limit
    remats: int

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Frontier:
    name: str
    heuristic: str
    max_slowdown: float
    floor: Floor
    probes: list[Probe] = field(default_factory=list)

    @property
    def lowest(self) -> Probe | None:
        """The lowest ratio that passed (None if none did)."""
        passed = [p for p in self.probes if p.ok]
        return min(passed, key=lambda p: p.ratio) if passed else None

    def table(self) -> str:
        return format_frontier(self)


def _cell(probe: Probe) -> str:
    return "-" if math.isnan(probe.slowdown) else f"{probe.slowdown:.3f}"


def format_frontier(f: Frontier) -> str:
    """The probes, highest ratio first, then the lowest ratio that passed."""
    lines = [
        f"{f.name}: heuristic {f.heuristic}, max slowdown {f.max_slowdown:g}; unbounded peak "
        f"{f.floor.peak:,} B, floor {f.floor.ratio:.3f} of peak",
        f"{'ratio':>7} {'budget (B)':>14} {'status':>12} {'slowdown':>9} {'remats':>8}",
    ]
    for p in sorted(f.probes, key=lambda p: -p.ratio):
        lines.append(f"{p.ratio:>7.3f} {p.budget:>14,} {p.status:>12} {_cell(p):>9} {p.remats:>8}")
    best = f.lowest
    if best is None:
        lines.append(f"no ratio tried replays within {f.max_slowdown:g}x")
    else:
        lines.append(
            f"lowest ratio within {f.max_slowdown:g}x: {best.ratio:.3f} "
            f"(slowdown {best.slowdown:.3f}; floor {f.floor.ratio:.3f})"
        )
    return "\n".join(lines)


def frontier(
    trace: Trace,
    max_slowdown: float = 2.0,
    heuristic: str = "dtr",
    *,
    step: float = 0.1,
    tolerance: float = 0.01,
    on_probe: Callable[[Probe], None] | None = None,
    **options,
) -> Frontier:
    """Search the lowest budget ratio at which ``trace`` replays with ``heuristic`` within
    ``max_slowdown`` (see the module docstring). ``options`` go to ``simulate``
    (dealloc, rebuild_orphans, ...); ``on_probe`` sees each probe as it finishes."""
    if not max_slowdown >= 1.0:
        raise ValueError(f"max_slowdown must be >= 1, got {max_slowdown}")
    if not 0.0 < step <= 1.0 or not 0.0 < tolerance <= step:
        raise ValueError(f"need 0 < tolerance <= step <= 1, got step {step}, tolerance {tolerance}")
    the_floor = floor(trace)
    result = Frontier(trace.name, heuristic, max_slowdown, the_floor)
    tried: dict[float, Probe] = {}

    def probe(ratio: float) -> Probe:
        ratio = round(ratio, 6)
        if ratio in tried:
            return tried[ratio]
        budget = int(ratio * the_floor.peak)
        if budget < the_floor.bytes:
            p = Probe(ratio, budget, "below floor", math.nan, 0)
        else:
            r = simulate(trace, budget=budget, heuristic=heuristic, thrash=max_slowdown, **options)
            p = Probe(ratio, budget, r.status, r.slowdown, r.remats)
        tried[ratio] = p
        result.probes.append(p)
        if on_probe is not None:
            on_probe(p)
        return p

    passed, failed = None, None
    n = 0
    while True:
        ratio = 1.0 - n * step
        if ratio < tolerance / 2:
            break
        p = probe(ratio)
        if not p.ok:
            failed = ratio
            break
        passed = ratio
        n += 1
    if passed is None:
        return result
    if failed is None:
        failed = 0.0
    failed = max(failed, math.floor(the_floor.ratio / tolerance) * tolerance)
    while passed - failed > tolerance * 1.0001:
        middle = (passed + failed) / 2
        middle = math.ceil(middle / tolerance - 1e-9) * tolerance
        if middle >= passed:
            middle = passed - tolerance
        if middle <= failed:
            break
        if probe(middle).ok:
            passed = middle
        else:
            failed = middle
    return result
