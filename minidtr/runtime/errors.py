"""The runtime's errors: a budget that cannot hold an op, and a run that thrashes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


class BudgetError(MemoryError):
    """The budget cannot hold what an op needs, even after evicting everything evictable.

    It and its subclasses pickle with the arguments they were made with, so that one
    raised in a worker process (a sweep, a pool) reaches the parent whole."""

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
        self.made_with = ((op, needed, budget, memory, pinned, constant, locked), {})
        self.op, self.needed, self.budget, self.memory = op, needed, budget, memory
        self.pinned, self.constant, self.locked = pinned, constant, locked
        # needed is 0 when nothing new is asked for (entering a runtime, lowering a budget):
        # what is resident alone does not fit
        asks = f"needs {needed:,} bytes but the budget is" if needed else "the budget is"
        super().__init__(
            f"{op}: {asks} {budget:,} bytes and "
            f"{memory:,} are in use after evicting all it could: {constant:,} constant, "
            f"{pinned:,} pinned, {locked:,} locked by running ops. Raise the budget to at "
            f"least {memory + needed:,} bytes or free references."
        )

    def __reduce__(self):
        args, kwargs = self.made_with
        return _remake, (type(self), args, kwargs)

    def named(self, op: str) -> BudgetError:
        """This error naming ``op`` for what did not fit (the same numbers)."""
        args, kwargs = self.made_with
        return type(self)(op, *args[1:], **kwargs)


class PlacementError(BudgetError):
    """Under ``fit="contiguous"``: no free block of the arena can hold what an op needs,
    even after evicting everything evictable (or evicting cannot make one: what lies
    between the free blocks is constant, pinned or locked)."""

    def __init__(
        self,
        op: str,
        needed: int,
        block: int,
        budget: int | None,
        memory: int,
        pinned: int,
        constant: int,
        locked: int,
        largest_free: int,
        free: int,
    ):
        self.made_with = (
            (op, needed, block, budget, memory, pinned, constant, locked, largest_free, free),
            {},
        )
        self.op, self.needed, self.budget, self.memory = op, needed, budget, memory
        self.pinned, self.constant, self.locked = pinned, constant, locked
        self.block, self.largest_free, self.free = block, largest_free, free
        budget_text = "no budget" if budget is None else f"a budget of {budget:,} bytes"
        # needed is 0 when nothing new is asked for: a value resident already needs a block
        asks = (
            f"needs a free block of {block:,} bytes (of {needed:,} bytes asked for)"
            if needed
            else f"a resident value needs a free block of {block:,} bytes"
        )
        MemoryError.__init__(
            self,
            f"{op}: {asks} "
            f"but the largest free block is {largest_free:,} bytes ({free:,} free in all, "
            f"{budget_text}, contiguous fit) after evicting all it could: {memory:,} "
            f"bytes in use, {constant:,} constant, {pinned:,} pinned, {locked:,} locked by "
            "running ops. Raise the budget, free references, or use fit='bytes'.",
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
        expected: bool = False,
        step_end: bool = False,
    ):
        self.made_with = (
            (op, slowdown, limit, budget),
            {"wall": wall, "detail": detail, "expected": expected, "step_end": step_end},
        )
        self.op, self.slowdown, self.limit, self.budget = op, slowdown, limit, budget
        self.wall = wall
        budget_text = "no budget" if budget is None else f"budget {budget:,} bytes"
        if wall:
            what = (
                f"eviction work ({detail}) has made this run {slowdown:.1f}x slower in wall "
                f"time than without it, past max_wall_slowdown={limit:g}"
            )
        elif step_end:
            what = (
                f"recomputation has made this run {slowdown:.2f}x slower than without "
                f"eviction (cost model) at the end of a step that computed less than "
                f"expected, past max_slowdown={limit:g}"
            )
        else:
            against = ", counting the compute expected by the end of this step" if expected else ""
            what = (
                f"recomputing {op} would make this run {slowdown:.2f}x slower than without "
                f"eviction (cost model{against}), past max_slowdown={limit:g}"
            )
        if budget is None:
            advice = (
                "No budget is in force: what is recomputed was evicted earlier (under an "
                "inner runtime's budget, or on request); raise the limit (None disables "
                "the guard)."
            )
        else:
            advice = (
                "The budget is too small to train at an acceptable cost: raise it, or "
                "raise the limit (None disables the guard)."
            )
        self.finding = f"{what} ({budget_text})"  # the message without its advice
        MemoryError.__init__(self, f"{self.finding}. {advice}")


def allocation_error(
    error: BaseException, what: str, values: Sequence[tuple[Any, Any]], device: str
) -> MemoryError | None:
    """The backend's failure to allocate (a MemoryError, or NumPy's ValueError for a size
    past its index range) as a MemoryError naming ``what`` (an op, a constant), the
    ``values`` ((shape, dtype) pairs) it was making and their bytes; None for any other
    error, and for a BudgetError (minidtr's own already)."""
    if isinstance(error, BudgetError):
        return None
    too_big = isinstance(error, ValueError) and str(error).startswith("array is too big")
    if not isinstance(error, MemoryError) and not too_big:
        return None
    nbytes = sum(math.prod(map(int, shape)) * np.dtype(dtype).itemsize for shape, dtype in values)
    made = ", ".join(f"{tuple(shape)} {np.dtype(dtype)}" for shape, dtype in values)
    reason = str(error).split(";")[0] or type(error).__name__
    return MemoryError(
        f"{what}: could not allocate {made} ({nbytes:,} bytes) on {device}: {reason}. "
        "A budget below the free memory (md.Runtime(budget=...)) has values evicted "
        "instead, or a BudgetError that says what was needed."
    )


def _remake(cls: type, args: tuple, kwargs: dict) -> BudgetError:
    """Unpickle a BudgetError (or subclass) by calling its class with its arguments."""
    return cls(*args, **kwargs)


class RematMismatch(AssertionError):
    """A recomputed value differs from the value it stands for: a recomputation under the
    audit (``Runtime(audit=True)``) from the first computation, or a budgeted run of
    ``minidtr.testing.assert_remat_equivalent`` from the unbounded one (or past its budget)."""


class AuditError(AssertionError):
    """The audit (``Runtime(audit=True)``, on by default in ``minidtr.testing``'s checks)
    caught an op breaking the op contract. ``op`` is the op object, ``site`` where it was
    applied (``file:line in function``)."""

    def __init__(self, message: str, op: object = None, site: str = ""):
        super().__init__(message)
        self.op, self.site = op, site


class RecomputeMismatch(AuditError, RematMismatch):
    """Recomputing an op gave other bits than its first computation (an impure op)."""


class InputMutation(AuditError):
    """An op's kernel wrote into one of its inputs."""


class OpStateChanged(AuditError):
    """An op's kernel changed the op object's own attributes (state kept on a shared op)."""
