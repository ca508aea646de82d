"""Helpers for testing rematerialization, public for users who property-test their own models.

- ``recompute(t)``: evict ``t``'s storage and recompute it from its recipe.
- ``assert_remat_equivalent(fn, budgets=..., heuristics=..., dealloc=...)``: run
  ``fn`` unbounded and under each budget; outputs and gradients must be
  bit-identical and the counted peak within budget.
- ``minidtr.testing.strategies``: hypothesis strategies (random programs,
  budgets) used by minidtr's own property tests.
"""

from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from .equivalence import RematMismatch, assert_remat_equivalent, run_under


def recompute(t: Tensor) -> np.ndarray:
    """Drop ``t``'s buffer and recompute it from its recipe; returns the recomputed value.

    Raises ValueError for constants (they have no recipe) and locked or pinned storages.
    """
    storage = t.cell.storage
    storage.allocator.evict(storage, reason="test")
    return t.numpy()


__all__ = ["RematMismatch", "assert_remat_equivalent", "recompute", "run_under"]
