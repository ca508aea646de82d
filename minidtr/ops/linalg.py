"""Matrix products: ``matmul`` with NumPy semantics (1-D operands, batched, broadcast batches)
and ``linear`` (PyTorch's ``x @ weight.T + bias``, fused so that every gradient comes out in
its parameter's own layout)."""

from __future__ import annotations

import math

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import Op, apply, float_dtype, numel


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
        batch = a.shape[:-2]
        if batch != b.shape[:-2]:  # (np.broadcast_shapes costs a microsecond)
            try:
                batch = np.broadcast_shapes(batch, b.shape[:-2])
            except ValueError:
                raise self.error("batch dimensions cannot be broadcast", a, b) from None
        return [((*batch, a.shape[-2], b.shape[-1]), dtype)]

    def forward(self, xp, a, b):
        return xp.matmul(a, b)

    def cost(self, in_metas, out_metas):
        (a_shape, dtype), _ = in_metas
        flops = 2.0 * numel(out_metas[0]) * a_shape[-1]
        nbytes = sum(math.prod(s) for s, _ in (*in_metas, *out_metas)) * dtype.itemsize
        return flops, float(nbytes)

    def backward(self, ctx, g):
        from .arithmetic import sum_to

        a, b = ctx.inputs
        needs = ctx.needs_grad
        ga = sum_to(apply(MATMUL_GRADS[0], g, b), ctx.in_shapes[0]) if needs[0] else None
        gb = sum_to(apply(MATMUL_GRADS[1], a, g), ctx.in_shapes[1]) if needs[1] else None
        return ga, gb


class MatmulGrad(Op):
    """dL/da (``wrt=0``: ``g @ b^T``, inputs g and b) or dL/db (``wrt=1``: ``a^T @ g``,
    inputs a and g) of ``matmul``, before summing over broadcast batch axes: one op where
    a transpose view and a product would take two, and the same product, so the same
    floats."""

    name = "matmul_grad"
    differentiable = False

    def __init__(self, wrt: int):
        self.wrt = wrt

    def infer(self, left: Cell, right: Cell):
        ls, rs = left.shape, right.shape
        # wrt 0: g (..., n, p) @ b^T (..., p, m); wrt 1: a^T (..., m, n) @ g (..., n, p)
        inner = (ls[-2], rs[-2]) if self.wrt == 0 else (ls[-1], rs[-1])
        batch = ls[:-2]
        if batch != rs[:-2]:
            batch = np.broadcast_shapes(batch, rs[:-2])
        return [((*batch, *inner), left.dtype)]

    def forward(self, xp, left, right):
        if self.wrt == 0:
            return xp.matmul(left, xp.swapaxes(right, -1, -2))
        return xp.matmul(xp.swapaxes(left, -1, -2), right)

    def cost(self, in_metas, out_metas):
        (l_shape, dtype), _ = in_metas
        inner = l_shape[-1] if self.wrt == 0 else l_shape[-2]
        flops = 2.0 * numel(out_metas[0]) * inner
        nbytes = sum(math.prod(s) for s, _ in (*in_metas, *out_metas)) * dtype.itemsize
        return flops, float(nbytes)


MATMUL_GRADS = (MatmulGrad(0), MatmulGrad(1))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy's matmul: a 1-D operand is a row (left) or column (right) vector."""
    from .shape import reshape

    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"matmul: expected Tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: scalar operands are not allowed, got shapes {a.shape} and {b.shape}; use mul"
        )
    # checked before a 1-D operand becomes a row or a column, so the error names the
    # shapes the caller passed
    inner_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != inner_b:
        raise Matmul().error(
            f"inner dimensions differ ({a.shape[-1]} vs {inner_b})", a.cell, b.cell
        )
    squeeze = []
    if a.ndim == 1 or b.ndim == 1:
        float_dtype(Matmul(), a.cell, b.cell)  # before the reshapes too
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


class Linear(Op):
    """``x @ weight.T (+ bias)`` over the last axis of ``x``; weight (out, in), bias (out,)."""

    name = "linear"
    retain_inputs = (0, 1)

    def infer(self, x: Cell, weight: Cell, *bias: Cell):
        dtype = float_dtype(self, x, weight, *bias)
        if len(weight.shape) != 2 or not x.shape or x.shape[-1] != weight.shape[1]:
            raise self.error(
                "x's last axis must match weight (out_features, in_features)", x, weight, *bias
            )
        if bias and bias[0].shape != (weight.shape[0],):
            raise self.error(f"bias must have shape ({weight.shape[0]},)", x, weight, *bias)
        return [((*x.shape[:-1], weight.shape[0]), dtype)]

    def forward(self, xp, x, weight, *bias):
        y = xp.matmul(x, weight.T)
        if bias:
            y += bias[0]
        return y

    def cost(self, in_metas, out_metas):
        (x_shape, dtype), (w_shape, _), *_ = in_metas
        flops = 2.0 * math.prod(x_shape) * w_shape[0]
        nbytes = sum(math.prod(s) for s, _ in (*in_metas, *out_metas)) * dtype.itemsize
        return flops, float(nbytes)

    def backward(self, ctx, g):
        from .reduce import sum as reduce_sum

        x, weight = ctx.inputs[0], ctx.inputs[1]
        gx = matmul(g, weight) if ctx.needs_grad[0] else None
        gw = apply(LinearWeightGrad(), g, x) if ctx.needs_grad[1] else None
        grads = [gx, gw]
        if len(ctx.in_shapes) == 3:
            axes = tuple(range(g.ndim - 1))
            grads.append(
                reduce_sum(g, axis=axes)
                if ctx.needs_grad[2] and axes
                else (g if ctx.needs_grad[2] else None)
            )
        return tuple(grads)


class LinearWeightGrad(Op):
    """dL/dweight of ``linear``: ``g.T @ x`` over all leading axes, in weight's layout."""

    name = "linear_weight_grad"
    differentiable = False

    def infer(self, g: Cell, x: Cell):
        return [((g.shape[-1], x.shape[-1]), g.dtype)]

    def forward(self, xp, g, x):
        rows = math.prod(x.shape[:-1])  # not -1: a size-0 array cannot infer it
        return xp.matmul(g.reshape(rows, g.shape[-1]).T, x.reshape(rows, x.shape[-1]))

    def cost(self, in_metas, out_metas):
        (g_shape, dtype), (x_shape, _) = in_metas
        flops = 2.0 * math.prod(x_shape) * g_shape[-1]
        nbytes = sum(math.prod(s) for s, _ in (*in_metas, *out_metas)) * dtype.itemsize
        return flops, float(nbytes)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """PyTorch's ``linear``: ``x @ weight.T + bias`` with weight (out, in)."""
    return apply(Linear(), x, weight) if bias is None else apply(Linear(), x, weight, bias)
