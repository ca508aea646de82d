"""Helpers for testing rematerialization, public for users who property-test their own models.

- ``assert_remat_equivalent(fn, budgets=..., heuristics=..., dealloc=...)``: run
  ``fn`` unbounded (twice: it must be deterministic) and under each budget, each
  run on memory of its own; outputs and gradients must be bit-identical and the
  counted peak within budget. ``on_budget_error`` decides what a budget too small
  for ``fn`` does; ``run_under`` runs one configuration.
- ``check_gradients(fn, *inputs)``: every op's backward against central differences in
  float64 (random-direction vector-Jacobian products); names the first op that disagrees.
- the audit (``Runtime(audit=True)``, on in ``assert_remat_equivalent``): an op whose
  recomputation differs (``RecomputeMismatch``), that writes into its input
  (``InputMutation``) or changes its own attributes (``OpStateChanged``) is named at once.
- ``budget_floor(fn)``: the constants, the largest single op and the smallest
  feasible budget of a program.
- ``isolated_allocator()`` / ``isolated_allocators()``: fresh allocators for a
  block, so that storages left over from earlier work do not count against its
  budgets.
- ``recompute(t)``: evict ``t``'s storage and recompute it from its recipe.
- ``RematMachine``: a hypothesis state machine driving a budgeted runtime step by step
  next to an unbounded shadow (``minidtr.testing.machine``; needs hypothesis).
- ``minidtr.testing.strategies``: hypothesis strategies (budgets, heuristics,
  deallocation policies, random programs, training loops).
- ``minidtr.testing.plugin``: a pytest plugin giving each test fresh allocators.

See docs/testing.md.
"""

from __future__ import annotations

import numpy as np

from ..runtime.errors import AuditError, InputMutation, OpStateChanged, RecomputeMismatch
from ..tensor import Tensor
from .equivalence import (
    InfeasibleBudget,
    NondeterminismError,
    RematMismatch,
    assert_remat_equivalent,
    run_under,
)
from .floor import Floor, budget_floor
from .gradients import GradientMismatch, check_gradients
from .isolation import isolated_allocator, isolated_allocators


def recompute(t: Tensor) -> np.ndarray:
    """Drop ``t``'s buffer and recompute it from its recipe; returns the recomputed value.

    A ``t`` already evicted (by a budget) is recomputed as it is. Raises ValueError for
    constants (they have no recipe) and locked or pinned storages.
    The recomputation is asked for, not forced by a budget, so the runtime's thrash guard
    (``max_slowdown``) is off while it runs and never charges it afterwards (under
    ``cost="time"`` one replay of a tiny op can take longer than four times its first run
    on a loaded machine): it counts in ``stats()``'s ``remats``, ``remat_cost`` and
    ``slowdown``, not in the slowdown the guard limits (``Runtime.asked_remat_cost``).
    """
    storage = t.cell.storage
    allocator = storage.allocator
    runtime = allocator.runtime
    remat_cost = runtime.stats_.remat_cost
    limit, runtime.max_slowdown = runtime.max_slowdown, None
    try:
        if storage.buffer is not None:
            allocator.evict(storage, reason="test")
        return t.numpy()
    finally:
        runtime.max_slowdown = limit
        asked = runtime.stats_.remat_cost - remat_cost
        for active in {runtime, *allocator.runtimes}:  # an outer one adds the inner's stats
            active.asked_remat_cost += asked


def __getattr__(name: str):
    if name == "RematMachine":  # needs hypothesis, which minidtr itself does not
        from .machine import RematMachine

        return RematMachine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AuditError",
    "Floor",
    "GradientMismatch",
    "InputMutation",
    "OpStateChanged",
    "RecomputeMismatch",
    "RematMachine",
    "InfeasibleBudget",
    "NondeterminismError",
    "RematMismatch",
    "assert_remat_equivalent",
    "budget_floor",
    "check_gradients",
    "isolated_allocator",
    "isolated_allocators",
    "recompute",
    "run_under",
]
