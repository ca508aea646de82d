"""Helpers for testing rematerialization, public for users who property-test their own models.

- ``recompute(t)``: evict ``t``'s storage and recompute it from its recipe.
- ``isolated_allocator()``: a fresh allocator for a block, so that storages left
  over from earlier work do not count against its budgets.
- ``assert_remat_equivalent(fn, budgets=..., heuristics=..., dealloc=...)``: run
  ``fn`` unbounded and under each budget; outputs and gradients must be
  bit-identical and the counted peak within budget.
- ``minidtr.testing.strategies``: hypothesis strategies (random programs,
  budgets) used by minidtr's own property tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from ..runtime import allocator as allocator_module
from ..tensor import Tensor
from .equivalence import RematMismatch, assert_remat_equivalent, run_under


def recompute(t: Tensor) -> np.ndarray:
    """Drop ``t``'s buffer and recompute it from its recipe; returns the recomputed value.

    Raises ValueError for constants (they have no recipe) and locked or pinned storages.
    """
    storage = t.cell.storage
    storage.allocator.evict(storage, reason="test")
    return t.numpy()


@contextlib.contextmanager
def isolated_allocator(device: str = "cpu") -> Iterator[allocator_module.Allocator]:
    """Run with a fresh allocator for ``device``: nothing left over from earlier work (nor
    garbage kept alive by a stored traceback) counts against budgets inside. Create every
    tensor the block uses inside it; tensors made before keep their own allocator."""
    fresh = allocator_module.Allocator(device)
    previous = allocator_module._ALLOCATORS.get(device)
    allocator_module._ALLOCATORS[device] = fresh
    try:
        yield fresh
    finally:
        if previous is None:
            del allocator_module._ALLOCATORS[device]
        else:
            allocator_module._ALLOCATORS[device] = previous


__all__ = [
    "RematMismatch",
    "assert_remat_equivalent",
    "isolated_allocator",
    "recompute",
    "run_under",
]
