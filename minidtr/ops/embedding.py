"""Embedding lookup: rows of a (V, D) weight picked by integer indices of any shape."""

from __future__ import annotations

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import (
    DTypeError,
    Op,
    apply,
    check_in_range,
    expect_tensor,
    float_dtype,
    numel,
)


class Embedding(Op):
    name = "embedding"
    retain_inputs = (1,)

    def infer(self, weight: Cell, indices: Cell):
        dtype = float_dtype(self, weight)
        if len(weight.shape) != 2:
            raise self.error(
                f"weight must be (V, D), got {len(weight.shape)} dimensions", weight, indices
            )
        if indices.dtype.kind not in "iu":
            raise self.error(
                f"indices must be integers, got {indices.dtype}", weight, indices, kind=DTypeError
            )
        return [((*indices.shape, weight.shape[1]), dtype)]

    def forward(self, xp, weight, indices):
        return xp.take(weight, indices, axis=0)

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 0.0, nbytes

    def backward(self, ctx, g):
        return apply(EmbeddingGrad(ctx.in_shapes[0]), ctx.inputs[1], g), None


class EmbeddingGrad(Op):
    """Zeros of the weight's shape with each row of g added at its index; repeated
    indices accumulate."""

    name = "embedding_grad"
    differentiable = False

    def __init__(self, weight_shape: tuple[int, ...]):
        self.weight_shape = weight_shape

    def infer(self, indices: Cell, g: Cell):
        return [(self.weight_shape, g.dtype)]

    def forward(self, xp, indices, g):
        out = xp.zeros(self.weight_shape, dtype=g.dtype)
        rows = indices.reshape(-1)
        backend.scatter_add(xp, out, rows, g.reshape(rows.size, self.weight_shape[1]))
        return out

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float(numel(in_metas[1])), nbytes


def embedding(weight: Tensor, indices) -> Tensor:
    """``weight[indices]``: (V, D) rows for integer indices of any shape -> (*indices.shape, D)."""
    expect_tensor("embedding", weight, "weight")
    if not isinstance(indices, Tensor):
        from ..tensor import tensor

        array = np.asarray(indices)
        if array.dtype.kind not in "iu":
            raise DTypeError(f"embedding: indices must be integers, got {array.dtype}")
        indices = tensor(array, device=weight.device)
    op = Embedding()
    if weight.ndim == 2 and isinstance(indices, Tensor) and indices.dtype.kind in "iu":
        rows = weight.shape[0]
        check_in_range(op, indices, rows, "index", "rows", weight.cell, indices.cell)
    return apply(op, weight, indices)
