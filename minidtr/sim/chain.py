"""Static checkpointing schedules for a chain: Chen et al.'s sqrt(N) and Griewank's revolve.

The model (Griewank & Walther, "Algorithm 799: revolve", 2000): states
``x_0 .. x_l``, step ``i`` maps ``x_{i-1}`` to ``x_i``. Reversing the chain
means running the adjoint of steps ``l, l-1, .., 1`` in that order; the
adjoint of step ``i`` needs ``x_{i-1}``. There are ``s`` checkpoint slots and
``x_0`` starts in one of them. The cost of a schedule is the number of forward
steps it advances (the adjoint steps are the same for every schedule).

With ``s`` slots and at most ``r`` advances of any step, the longest chain
that can be reversed is ``beta(s, r) = C(s + r, s)``; the least number of
forward steps to reverse ``l`` steps is ``r*l - beta(s + 1, r - 1)`` where
``r`` is the least with ``beta(s, r) >= l`` (Griewank 1992). ``revolve_schedule``
builds a schedule that attains it by binomial splitting; ``run_schedule``
executes any schedule, checking it and counting its forward steps and slots.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

Action = tuple[str, int]  # ("advance", steps) | ("store", i) | ("restore", i) | ("drop", i)
# | ("reverse", i): the adjoint of step i


def _check_counts(function: str, **counts: object) -> None:
    """Each of ``counts`` an integer >= 1, or one ValueError line naming ``function``."""
    if not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1
        for v in counts.values()
    ):
        need = " and ".join(f"{name} >= 1" for name in counts)
        got = " and ".join(repr(v) for v in counts.values())
        raise ValueError(f"{function}: need integers {need}, got {got}")


def beta(s: int, r: int) -> int:
    """The longest chain reversible with ``s`` slots and ``r`` repetitions."""
    return math.comb(s + r, s)


def repetitions(length: int, slots: int) -> int:
    """The least ``r`` with ``beta(slots, r) >= length``."""
    _check_counts("repetitions", length=length, slots=slots)
    r = 0
    while beta(slots, r) < length:
        r += 1
    return r


def revolve_forward_steps(length: int, slots: int) -> int:
    """The optimal number of forward steps to reverse ``length`` steps (closed form)."""
    _check_counts("revolve_forward_steps", length=length, slots=slots)
    r = repetitions(length, slots)
    return r * length - beta(slots + 1, r - 1) if r > 0 else 0


def optimal_forward_steps(length: int, slots: int) -> int:
    """The same optimum by dynamic programming over the first checkpoint's position:
    advance ``j`` steps, store, reverse the right part with one slot less, then the left
    part with all slots. Quadratic; a check of the closed form on small chains."""
    _check_counts("optimal_forward_steps", length=length, slots=slots)
    return _dynamic_forward_steps(int(length), int(slots))


@functools.cache
def _dynamic_forward_steps(length: int, slots: int) -> int:
    if length == 1:
        return 0
    if slots == 1:
        return length * (length - 1) // 2
    return min(
        j + _dynamic_forward_steps(length - j, slots - 1) + _dynamic_forward_steps(j, slots)
        for j in range(1, length)
    )


def best_split(length: int, slots: int) -> int:
    """Where to put the first checkpoint: the ``j`` minimizing
    ``j + t(length - j, slots - 1) + t(j, slots)``. That sum is convex in ``j`` (``t`` is
    piecewise linear with slope ``repetitions``), and one step right changes it by
    ``1 + repetitions(j + 1, slots) - repetitions(length - j, slots - 1)``, so the
    optimum is the first ``j`` where that is not negative (binary search)."""
    lo, hi = 1, length - 1
    while lo < hi:
        j = (lo + hi) // 2
        if 1 + repetitions(j + 1, slots) >= repetitions(length - j, slots - 1):
            hi = j
        else:
            lo = j + 1
    return lo


def revolve_schedule(length: int, slots: int) -> list[Action]:
    """A binomial (revolve) schedule reversing ``length`` steps with ``slots`` slots.

    Reversing lo+1..hi with x_lo stored: advance to the best split ``mid``, store it,
    reverse mid+1..hi with one slot less, drop x_mid, restore x_lo and reverse lo+1..mid
    with every slot. With one slot, every step restarts from x_lo. (An explicit stack,
    so long chains with many slots do not hit the recursion limit.)"""
    _check_counts("revolve_schedule", length=length, slots=slots)
    out: list[Action] = []
    todo: list = [(0, length, slots)]  # ranges to reverse, or actions to emit
    while todo:
        task = todo.pop()
        if isinstance(task[0], str):
            out.append(task)
            continue
        lo, hi, free = task
        if hi - lo == 1:
            out.append(("reverse", hi))
        elif free == 1:
            for i in range(hi, lo, -1):
                if i != hi:
                    out.append(("restore", lo))
                if i - 1 > lo:
                    out.append(("advance", i - 1 - lo))
                out.append(("reverse", i))
        else:
            mid = lo + best_split(hi - lo, free)
            out.append(("advance", mid - lo))
            out.append(("store", mid))
            todo.extend([(lo, mid, free), ("restore", lo), ("drop", mid), (mid, hi, free - 1)])
    return out


def chen_schedule(length: int, segment: int | None = None) -> list[Action]:
    """Chen et al.'s sqrt(N) checkpointing: one sweep storing every ``segment``-th state,
    then each segment, last first, is recomputed from its checkpoint with all its
    states stored and reversed. ``segment`` defaults to ceil(sqrt(length))."""
    given = {} if segment is None else {"segment": segment}
    _check_counts("chen_schedule", length=length, **given)
    k = math.ceil(math.sqrt(length)) if segment is None else segment
    out: list[Action] = []
    position = 0
    for start in range(k, length, k):
        out.append(("advance", start - position))
        out.append(("store", start))
        position = start
    starts = list(range(0, length, k))
    for a in reversed(starts):
        b = min(a + k, length)
        if a != position:
            out.append(("restore", a))
        position = a
        for i in range(a + 1, b):
            out.append(("advance", 1))
            out.append(("store", i))
        position = b - 1
        for i in range(b, a, -1):
            if i - 1 != position:
                out.append(("restore", i - 1))
            out.append(("reverse", i))
            if i - 1 > a:
                out.append(("drop", i - 1))
            position = i - 1
        if a > 0:
            out.append(("drop", a))
    return out


@dataclass
class ChainRun:
    forward_steps: int
    max_slots: int  # the most states held in slots at once (x_0 included)
    reversed_steps: int


def run_schedule(length: int, actions: list[Action], slots: int | None = None) -> ChainRun:
    """Execute a schedule, checking that every adjoint runs in order on the right state
    and that at most ``slots`` states are stored; count the forward steps."""
    _check_counts("run_schedule", length=length, **({} if slots is None else {"slots": slots}))
    stored = {0}
    current = 0
    forward = 0
    next_reverse = length
    peak = 1
    for kind, i in actions:
        if kind == "advance":
            if i < 1 or current + i > length - 1:
                raise ValueError(f"advance {i} from x_{current} leaves the chain")
            current += i
            forward += i
        elif kind == "store":
            if i != current:
                raise ValueError(f"store x_{i} while the current state is x_{current}")
            stored.add(i)
            peak = max(peak, len(stored))
            if slots is not None and len(stored) > slots:
                raise ValueError(f"storing x_{i} needs {len(stored)} slots, only {slots}")
        elif kind == "restore":
            if i not in stored:
                raise ValueError(f"restore x_{i}, which is not stored")
            current = i
        elif kind == "drop":
            stored.discard(i)
        elif kind == "reverse":
            if i != next_reverse or current != i - 1:
                raise ValueError(
                    f"reverse step {i} with current state x_{current}; expected step "
                    f"{next_reverse} on x_{next_reverse - 1}"
                )
            next_reverse -= 1
        else:
            raise ValueError(f"unknown action {kind!r}")
    if next_reverse != 0:
        raise ValueError(f"the schedule stops with steps 1..{next_reverse} not reversed")
    return ChainRun(forward, peak, length)
