"""The physical floor of a trace: the least memory any policy needs to run it.

Whatever a policy evicts, two things must be resident at once: every constant
alive at that moment (inputs, parameters, optimizer state: never evicted) and,
while an op runs, its non-constant inputs and its outputs (its *working set*).
So no budget below

    floor = max over ops of (constants alive + that op's working set)

can run the trace, whatever the heuristic, and a budget just above it is where
rematerialization has the least room. ``floor(trace)`` measures it in one
unbounded replay (the same one that measures the peak budget ratios are
relative to), with its parts: the most constants alive at once and the largest
single working set, each with the op it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

from .simulator import baseline
from .trace import Trace


@dataclass(frozen=True)
class Floor:
    """The least memory a trace can run in (bytes), and what makes it up."""

    peak: int  # the unbounded peak: what budget ratios are relative to
    constants: int  # the most bytes of constants alive at once
    working_set: int  # the largest single op's non-constant inputs + outputs
    working_set_op: str  # the op with that working set
    bytes: int  # max over ops of constants alive + that op's working set (>= constants)
    op: str  # the op that sets the floor ("" when constants alone do)

    @property
    def ratio(self) -> float:
        """The floor as a fraction of the unbounded peak: no budget ratio below it runs."""
        return self.bytes / self.peak if self.peak else 0.0

    @property
    def constants_ratio(self) -> float:
        return self.constants / self.peak if self.peak else 0.0

    @property
    def working_set_ratio(self) -> float:
        return self.working_set / self.peak if self.peak else 0.0

    def describe(self) -> str:
        """One line for a user: the floor and its two parts."""
        by = f", at {self.op}" if self.op else ""
        return (
            f"floor {self.bytes:,} B ({self.ratio:.3f} of peak{by}): constants "
            f"{self.constants:,} B ({self.constants_ratio:.3f}), largest single-op working set "
            f"{self.working_set:,} B ({self.working_set_ratio:.3f}, {self.working_set_op or '-'})"
        )


def floor(trace: Trace) -> Floor:
    """The physical floor of ``trace`` (measured once per trace, with its peak)."""
    b = baseline(trace)
    op = b.bottleneck_op if b.bottleneck > b.constant_floor else ""
    return Floor(
        peak=b.peak_memory,
        constants=b.constant_floor,
        working_set=b.working_set,
        working_set_op=b.working_set_op,
        bytes=b.bottleneck,
        op=op,
    )


def below_floor_message(trace: Trace, budget: int, dealloc: str = "eager") -> str | None:
    """Why no policy can run ``trace`` in ``budget`` bytes, or None if the floor fits. The
    floor is measured with eager deallocation, and holds for ``ignore`` too; ``banish``
    drops the recipes of a dead value's children, so constants only those recipes read
    can go sooner and a run may fit below it: then the message says so, and no more."""
    f = floor(trace)
    if budget >= f.bytes:
        return None
    ratio = budget / f.peak if f.peak else 0.0
    below = f"the budget {budget:,} B ({ratio:.3f} of peak) is below the trace's {f.describe()}"
    if dealloc == "banish":
        return f"{below} under eager deallocation (banish can fit lower, not here)"
    return f"{below}; no eviction policy can run it"
