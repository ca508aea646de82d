"""Rows gathered from several tensors, and rows summed into groups: the Tree-LSTM's
gathers, each one op.

``gather_rows([s0, s1, ...], [r0, r1, ...])`` is ``concat([s0[r0], s1[r1], ...])``: the
children of one level of trees come from several lower levels. ``sum_children(rows,
slots)`` sums each parent's children, ``slots`` being a (parents, most children) table
of 1 + a child's row, 0 where a parent has fewer children: ``sum(concat([zeros,
rows])[slots], axis=1)``, the same floats. Written so, the first is one indexing op per
source and a concatenation, the second three ops, and each as many again in backward: a
few microseconds of kernel inside several of Python bookkeeping each, so a Tree-LSTM step
spent more time on its gathers than on its cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import DTypeError, Op, apply, check_in_range, expect_tensor, same_dtype


def _integers(op: Op, index: Cell, ndim: int, what: str, *cells: Cell) -> None:
    if index.dtype.kind not in "iu":
        raise op.error(f"{what} must be integers, got {index.dtype}", *cells, kind=DTypeError)
    if len(index.shape) != ndim:
        raise op.error(f"{what} must have {ndim} dimension(s), got {index.shape}", *cells)


def _row_bytes(cell: Cell) -> int:
    return math.prod(cell.shape[1:]) * cell.dtype.itemsize


class GatherRows(Op):
    """Inputs: ``n`` sources (rows along axis 0, the same trailing shape and dtype), then
    ``n`` 1-d integer row indices, one per source."""

    name = "gather_rows"

    def __init__(self, n: int):
        self.n = n
        self.retain_inputs = tuple(range(n, 2 * n))

    def infer(self, *cells: Cell):
        sources, rows = cells[: self.n], cells[self.n :]
        dtype = same_dtype(self, *sources)
        trailing = sources[0].shape[1:]
        for s, r in zip(sources, rows, strict=True):
            if not s.shape or s.shape[1:] != trailing:
                raise self.error("sources must share their shape after axis 0", *cells)
            _integers(self, r, 1, "row indices", *cells)
        return [((sum(r.shape[0] for r in rows), *trailing), dtype)]

    def forward(self, xp, *arrays):
        sources, rows = arrays[: self.n], arrays[self.n :]
        count = sum(r.shape[0] for r in rows)
        out = xp.empty((count, *sources[0].shape[1:]), dtype=sources[0].dtype)
        start = 0
        for s, r in zip(sources, rows, strict=True):
            end = start + r.shape[0]
            out[start:end] = s[r]
            start = end
        return out

    def workspace(self, *cells: Cell) -> int:
        """The largest source's gathered rows, before they are copied into the output."""
        rows = cells[self.n :]
        return max(r.shape[0] for r in rows) * _row_bytes(cells[0])

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 0.0, nbytes

    def backward(self, ctx, g):
        shapes = ctx.in_shapes[: self.n]
        grads = apply(GatherRowsGrad(shapes), g, *ctx.inputs[self.n :])
        return (*(grads if self.n > 1 else (grads,)), *([None] * self.n))


class GatherRowsGrad(Op):
    """For each source, zeros of its shape with g's rows added at its indices."""

    name = "gather_rows_grad"
    differentiable = False

    def __init__(self, shapes: Sequence[tuple[int, ...]]):
        self.shapes = tuple(shapes)
        self.n_outputs = len(self.shapes)

    def infer(self, g: Cell, *rows: Cell):
        return [(shape, g.dtype) for shape in self.shapes]

    def forward(self, xp, g, *rows):
        grads = []
        start = 0
        for shape, r in zip(self.shapes, rows, strict=True):
            end = start + r.shape[0]
            grad = xp.zeros(shape, dtype=g.dtype)
            backend.scatter_add(xp, grad, r, g[start:end])
            grads.append(grad)
            start = end
        return tuple(grads) if len(grads) > 1 else grads[0]

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float(math.prod(in_metas[0][0])), nbytes


class SumChildren(Op):
    """(rows (C, ...), slots (P, K) of 1 + a row or 0) -> (P, ...): each parent's rows
    summed, in slot order."""

    name = "sum_children"
    retain_inputs = (1,)

    def infer(self, rows: Cell, slots: Cell):
        if not rows.shape:
            raise self.error("rows must have at least one dimension", rows, slots)
        _integers(self, slots, 2, "slots", rows, slots)
        return [((slots.shape[0], *rows.shape[1:]), rows.dtype)]

    def forward(self, xp, rows, slots):
        padded = xp.concatenate([xp.zeros((1, *rows.shape[1:]), dtype=rows.dtype), rows])
        return padded[slots].sum(axis=1)

    def workspace(self, rows: Cell, slots: Cell) -> int:
        """The padded copy of the rows and the gathered (P, K, ...) array."""
        return (rows.shape[0] + 1 + math.prod(slots.shape)) * _row_bytes(rows)

    def cost(self, in_metas, out_metas):
        (slots_shape, _), row = in_metas[1], math.prod(in_metas[0][0][1:])
        _, nbytes = super().cost(in_metas, out_metas)
        return float(math.prod(slots_shape) * row), nbytes

    def backward(self, ctx, g):
        return apply(SumChildrenGrad(ctx.in_shapes[0]), g, ctx.inputs[1]), None


class SumChildrenGrad(Op):
    """Each row's gradient: its parent's, added once for each slot that holds it."""

    name = "sum_children_grad"
    differentiable = False

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def infer(self, g: Cell, slots: Cell):
        return [(self.shape, g.dtype)]

    def forward(self, xp, g, slots):
        grad = xp.zeros(self.shape, dtype=g.dtype)
        parents, ks = xp.nonzero(slots)
        backend.scatter_add(xp, grad, slots[parents, ks] - 1, g[parents])
        return grad

    def workspace(self, g: Cell, slots: Cell) -> int:
        """The filled slots' indices (three arrays of int64) and their parents' rows."""
        filled = math.prod(slots.shape)
        return filled * (24 + _row_bytes(g))


def gather_rows(sources: Sequence[Tensor], rows: Sequence[Tensor]) -> Tensor:
    """``concat([sources[k][rows[k]] for k])`` along axis 0, as one op."""
    if not isinstance(sources, list | tuple) or not isinstance(rows, list | tuple):
        raise TypeError("gather_rows: sources and rows must be lists of Tensors")
    if not sources or len(sources) != len(rows):
        raise ValueError(
            f"gather_rows: one row index per source, got {len(sources)} sources and "
            f"{len(rows)} indices"
        )
    op = GatherRows(len(sources))
    for k, (s, r) in enumerate(zip(sources, rows, strict=True)):
        expect_tensor("gather_rows", s, f"sources[{k}]")
        expect_tensor("gather_rows", r, f"rows[{k}]")
        if s.ndim and r.dtype.kind in "iu":
            check_in_range(op, r, s.shape[0], "row", "rows", s.cell, r.cell)
    return apply(op, *sources, *rows)


def sum_children(rows: Tensor, slots: Tensor) -> Tensor:
    """(C, ...) rows -> (P, ...): row p is the sum of ``rows[slots[p, k] - 1]`` over the
    slots k of p that are not 0 (a zero row where none is)."""
    expect_tensor("sum_children", rows, "rows")
    expect_tensor("sum_children", slots, "slots")
    op = SumChildren()
    if rows.ndim and slots.dtype.kind in "iu":
        check_in_range(op, slots, rows.shape[0] + 1, "slot", "rows + 1", rows.cell, slots.cell)
    return apply(op, rows, slots)
