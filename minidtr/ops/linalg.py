"""Matrix products: ``matmul`` with NumPy semantics (1-D operands, batched, broadcast batches)."""

from __future__ import annotations

import math

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import Op, apply, float_dtype


class Matmul(Op):
    """``a @ b`` for operands of at least two dimensions; batch dimensions broadcast."""

    name = "matmul"
    retain_inputs = (0, 1)

    def infer(self, a: Cell, b: Cell):
        dtype = float_dtype(self, a, b)
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise self.error("operands need at least 2 dimensions here", a, b)
        if a.shape[-1] != b.shape[-2]:
            raise self.error(f"inner dimensions differ ({a.shape[-1]} vs {b.shape[-2]})", a, b)
        try:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise self.error("batch dimensions cannot be broadcast", a, b) from None
        return [((*batch, a.shape[-2], b.shape[-1]), dtype)]

    def forward(self, xp, a, b):
        return xp.matmul(a, b)

    def cost(self, in_metas, out_metas):
        (a_shape, dtype), _ = in_metas
        out_shape = out_metas[0][0]
        flops = 2.0 * math.prod(out_shape) * a_shape[-1]
        nbytes = sum(math.prod(s) for s, _ in (*in_metas, *out_metas)) * dtype.itemsize
        return flops, float(nbytes)

    def backward(self, inputs, outputs, g):
        from .elementwise import sum_to

        a, b = inputs
        ga = gb = None
        if self.needs_grad[0]:
            ga = sum_to(matmul(g, swap_last(b)), self.in_shapes[0])
        if self.needs_grad[1]:
            gb = sum_to(matmul(swap_last(a), g), self.in_shapes[1])
        return ga, gb


def swap_last(x: Tensor) -> Tensor:
    from .shape import transpose

    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy's matmul: a 1-D operand is a row (left) or column (right) vector."""
    from .shape import reshape

    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"matmul: expected Tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: scalar operands are not allowed, got shapes {a.shape} and {b.shape}; use mul"
        )
    squeeze = []
    if a.ndim == 1:
        a = reshape(a, (1, a.shape[0]))
        squeeze.append(-2)
    if b.ndim == 1:
        b = reshape(b, (b.shape[0], 1))
        squeeze.append(-1)
    out = apply(Matmul(), a, b)
    if squeeze:
        shape = list(out.shape)
        for axis in sorted(squeeze):
            del shape[axis]
        out = reshape(out, tuple(shape))
    return out
