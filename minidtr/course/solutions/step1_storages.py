"""Step 1: storages and recipes (a reference solution).

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
    reading any buffer but the constants'."""
    if not cell.is_view and cell.op is None:
        return cell.buffer  # a constant: the only buffer that is never recomputed
    recipe = cell.recipe  # the storage itself, a Recipe shared by several outputs, or a view's
    arrays = [recompute(input_cell) for input_cell in recipe.inputs]
    out = recipe.op.forward(np, *arrays)
    return out if recipe.op.n_outputs == 1 else out[cell.index]


def is_candidate(storage: Storage) -> bool:
    """Whether the budget may evict ``storage`` (now or once its locks are released):
    resident, made by an op (not a constant), not pinned."""
    return storage.buffer is not None and storage.op is not None and not storage.pinned


def resident_bytes(cells: Iterable[Cell]) -> int:
    """The bytes the budget counts for ``cells``: each resident storage once, a view's
    bytes being its storage's."""
    storages = {cell.storage for cell in cells}
    return sum(s.nbytes for s in storages if s.buffer is not None)
