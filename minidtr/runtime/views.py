"""Views: values that share another value's storage, made and read without copying.

A view op (reshape, transpose, slice, broadcast) allocates nothing: its output is
a ``ViewCell`` over its input's storage, with its own shape and recipe. Its
array is recomputed from the storage's buffer whenever it is read, by applying
the view ops from the buffer up, or, past ``MAX_VIEW_DEPTH`` of them, in one step
from where its elements lie in the buffer (``StridedLayout``), so that a read
costs the same however long the chain of views.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import backend
from .storage import Cell, Recipe, ViewCell

if TYPE_CHECKING:
    from .allocator import Allocator


def is_c_contiguous(array: Any) -> bool:
    """Layout of a real array (a view's layout decides whether reshape can view it);
    the simulator's placeholders count as contiguous."""
    flags = getattr(array, "flags", None)
    return True if flags is None else bool(flags.c_contiguous)


def array_of(cell: Cell):
    """The array of a cell whose storage is resident: the buffer, or a view of it, made
    by applying the view ops from the buffer or from the nearest view with a layout."""
    if not cell.is_view:
        return cell.buffer
    chain = []
    while cell.is_view:
        if cell.layout is not None:
            array = cell.layout.view_of(cell.storage.buffer)
            if array is not None:
                break
        chain.append(cell)
        cell = cell.view_recipe.inputs[0]
    else:
        array = cell.buffer
    for view in reversed(chain):
        recipe = view.view_recipe
        xp = backend.xp_for(recipe.device) if recipe.device is not None else None
        op = recipe.op
        array = op.forward(xp, array) if op.n_outputs == 1 else op.output(xp, array, view.index)
    return array


def new_views(
    allocator: Allocator, recipe: Recipe, arrays: list, metas: Sequence[tuple]
) -> list[ViewCell]:
    """The cells of a view op: they share their input's storage and allocate nothing. The
    view's cost is added to its base's (which is locked meanwhile)."""
    results, recipe.run_cost = allocator.run(recipe.op, recipe.inputs, recipe.device, arrays, metas)
    if allocator.runtime.events is not None:  # no event of its own: the next one says its cost
        allocator.runtime.unlogged_view_cost += recipe.run_cost
    if recipe.op.n_outputs == 1:
        results = (results,)
    viewed = recipe.inputs[0]
    base = viewed.storage
    base.cost += recipe.run_cost
    base.last_access = allocator.clock
    device = recipe.device
    depth = viewed.depth + 1 if viewed.is_view else 1
    cells = []
    for i, (shape, dtype) in enumerate(metas):
        result = results[i]
        layout = None
        if depth > MAX_VIEW_DEPTH:  # read it in one step from the buffer (``array_of``)
            layout = StridedLayout.locate(result, base.buffer)
        contiguous = is_c_contiguous(result)
        steps = depth if layout is None else 1
        cells.append(ViewCell(base, recipe, i, shape, dtype, device, contiguous, steps, layout))
    allocator.remat.made_views(recipe, cells)
    if allocator.observer is not None:
        allocator.observer.on_compute(recipe, cells)
    return cells


MAX_VIEW_DEPTH = 16  # a view deeper than this is read in one step (``StridedLayout``)


class StridedLayout:
    """Where a view's elements lie in its storage's NumPy buffer: the byte offset of its
    first element from the buffer's and its strides. Rebuilding the view from them is
    one step (about 5 µs), against one view op per level of the chain it came through.
    Valid while the buffer has the strides it had when the view was made: a rebuilt
    buffer has them (the same op on the same inputs), and ``view_of`` checks."""

    __slots__ = ("shape", "strides", "offset", "typestr", "readonly", "base_strides")

    def __init__(self, view: Any, base: Any):
        self.shape = view.shape
        self.strides = view.strides
        self.offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        self.typestr = view.dtype.str
        self.readonly = not view.flags.writeable
        self.base_strides = base.strides

    @staticmethod
    def locate(view: Any, base: Any) -> StridedLayout | None:
        """The layout of ``view`` in ``base``, or None unless both are NumPy arrays and
        every byte of ``view`` lies in ``base``'s memory (a view op that had to copy, or
        an empty view, is read by walking its chain)."""
        if type(view) is not np.ndarray or type(base) is not np.ndarray or view.size == 0:
            return None
        layout = StridedLayout(view, base)
        low, high = byte_extent(view)
        base_low, base_high = byte_extent(base)
        if low + layout.offset < base_low or high + layout.offset > base_high:
            return None
        return layout

    def view_of(self, base: Any) -> Any:
        """The view in ``base`` (a NumPy array that keeps ``base`` alive), or None when
        ``base`` is laid out differently from the buffer the layout was taken in."""
        if base.strides != self.base_strides:
            return None
        data, readonly = base.__array_interface__["data"]
        interface = {
            "data": (data + self.offset, readonly or self.readonly),
            "shape": self.shape,
            "strides": self.strides,
            "typestr": self.typestr,
            "version": 3,
        }
        return np.asarray(_ArrayOf(interface, base))


def byte_extent(array: np.ndarray) -> tuple[int, int]:
    """The bytes ``array`` spans, as offsets from its first element: (lowest, one past
    the highest)."""
    low = high = 0
    for n, stride in zip(array.shape, array.strides, strict=True):
        if stride < 0:
            low += (n - 1) * stride
        else:
            high += (n - 1) * stride
    return low, high + array.itemsize


class _ArrayOf:
    """An array interface and the array whose memory it describes (kept alive)."""

    __slots__ = ("__array_interface__", "base")

    def __init__(self, interface: dict, base: Any):
        self.__array_interface__ = interface
        self.base = base
