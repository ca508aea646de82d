"""Step 1: storages and recipes (docs/course/step1_storages.md).

Fill in the three functions below, then check your work:

    python -m minidtr.course check 1

A value in minidtr is a *cell*: a ``Storage`` (one buffer, the unit of memory and
of eviction) or a ``ViewCell`` (a view of a storage's buffer, with no memory of its
own). A storage made by an op keeps its *recipe*: the op and its input cells. Its
buffer may be dropped (evicted) at any time, because the recipe can compute it again.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from minidtr.runtime.storage import Cell, Storage


def recompute(cell: Cell) -> np.ndarray:
    """The value of ``cell`` computed from the constants up, through the recipes, without
    reading any buffer but the constants'.

    - A constant (an input: ``not cell.is_view and cell.op is None``) is its ``buffer``.
    - Anything else has a recipe, ``cell.recipe``: a storage made by a one-output op is
      its own recipe, a view's recipe is the view op. A recipe has ``op`` and ``inputs``
      (cells); ``recipe.op.forward(np, *arrays)`` runs the op on the inputs' arrays and
      returns one array, or a tuple of them when ``recipe.op.n_outputs > 1`` (then the
      cell is output number ``cell.index``).
    """
    # TODO(step 1): recurse through the recipes down to the constants.
    raise NotImplementedError("recompute")


def is_candidate(storage: Storage) -> bool:
    """Whether the budget may evict ``storage`` (now, or once the op that has it locked is
    done): it is resident (``buffer`` is not None), made by an op (``op`` is not None: a
    constant is never evicted) and not pinned (``pinned``)."""
    # TODO(step 1)
    raise NotImplementedError("is_candidate")


def resident_bytes(cells: Iterable[Cell]) -> int:
    """The bytes the budget counts for ``cells``: ``nbytes`` of each resident storage,
    once, however many cells (views) share it. A cell's storage is ``cell.storage`` (a
    storage's is itself)."""
    # TODO(step 1)
    raise NotImplementedError("resident_bytes")
