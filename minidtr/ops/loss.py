"""Softmax, log-softmax and the losses: cross_entropy (integer targets) and mse_loss.

All are fused ops with fused gradient ops: softmax and log_softmax keep only
their output for backward, cross_entropy only its logits (which the layer
before keeps anyway), so no (N, C) intermediate stays alive.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import (
    HALF,
    DTypeError,
    Op,
    apply,
    axis_or_dim,
    check_in_range,
    expect_tensor,
    float32_copies,
    float_dtype,
    in_float32,
    normalize_axis,
    numel,
)
from .rows import max_last, sum_last
from .shift import CHUNK_FRACTION


def sum_along(xp, a, axis: int):
    """``a.sum(axis=axis, keepdims=True)``; along the last axis as a matrix-vector
    product (``rows.py``)."""
    return sum_last(xp, a) if axis == a.ndim - 1 else a.sum(axis=axis, keepdims=True)


def max_along(xp, a, axis: int, scratch):
    """``a.max(axis=axis, keepdims=True)``; along the last axis in ``scratch`` (``rows.py``)."""
    return max_last(xp, a, scratch) if axis == a.ndim - 1 else a.max(axis=axis, keepdims=True)


def stable_log_softmax(xp, x, axis: int):
    shifted = xp.empty_like(x)
    xp.subtract(x, max_along(xp, x, axis, shifted), out=shifted)
    shifted -= xp.log(sum_along(xp, xp.exp(shifted), axis))
    return shifted


class Softmax(Op):
    name = "softmax"
    retain_outputs = (0,)

    def __init__(self, axis: int):
        self.axis = axis

    def infer(self, x: Cell):
        dtype = float_dtype(self, x)
        self.axis = normalize_axis(self, self.axis, len(x.shape), x)
        return [(x.shape, dtype)]

    def forward(self, xp, x):
        if x.size == 0:  # an empty axis, or empty elsewhere: nothing to normalize
            return xp.empty_like(x)
        if x.dtype is HALF:  # sums in float32, as PyTorch's
            return in_float32(self.forward, xp, x)
        e = xp.empty_like(x)
        xp.subtract(x, max_along(xp, x, self.axis, e), out=e)
        xp.exp(e, out=e)  # in the output's buffer
        e /= sum_along(xp, e, self.axis)
        return e

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 12.0 * numel(in_metas[0]), nbytes

    def workspace(self, x: Cell) -> int:
        return float32_copies(x)

    def backward(self, ctx, g):
        return apply(SoftmaxGrad(self.name, self.axis), ctx.outputs[0], g)


class LogSoftmax(Softmax):
    name = "log_softmax"

    def workspace(self, x: Cell) -> int:
        """The exponentials of ``stable_log_softmax`` (in float32 for float16)."""
        widened = float32_copies(x)
        return widened + math.prod(x.shape) * (4 if widened else x.dtype.itemsize)

    def forward(self, xp, x):
        if x.size == 0:
            return xp.empty_like(x)
        if x.dtype is HALF:
            return in_float32(self.forward, xp, x)
        return stable_log_softmax(xp, x, self.axis)


class SoftmaxGrad(Op):
    """dL/dx from the output y: y * (g - sum(g * y)) for softmax, g - exp(y) * sum(g) for
    log_softmax."""

    differentiable = False

    def __init__(self, of: str, axis: int):
        self.name = of + "_grad"
        self.of = of
        self.axis = axis

    def infer(self, y: Cell, g: Cell):
        return [(y.shape, y.dtype)]

    def workspace(self, y: Cell, g: Cell) -> int:
        return float32_copies(y, g)

    def forward(self, xp, y, g):
        if y.dtype is HALF:
            return in_float32(self.forward, xp, y, g)
        dx = xp.empty_like(y)  # y * (g - sum(g * y)) or g - exp(y) sum(g), in its buffer
        if self.of == "softmax":
            xp.multiply(g, y, out=dx)
            total = sum_along(xp, dx, self.axis)
            xp.subtract(g, total, out=dx)
            dx *= y
            return dx
        xp.exp(y, out=dx)
        dx *= sum_along(xp, g, self.axis)
        return xp.subtract(g, dx, out=dx)


class CrossEntropy(Op):
    """The mean over the batch of -log_softmax(logits)[n, targets[n]]: a 0-d output."""

    name = "cross_entropy"
    retain_inputs = (0, 1)

    def infer(self, logits: Cell, targets: Cell):
        dtype = float_dtype(self, logits)
        if len(logits.shape) != 2:
            raise self.error(
                f"logits must be (N, C), got {len(logits.shape)} dimensions", logits, targets
            )
        if targets.dtype.kind not in "iu":
            raise self.error(
                f"targets must be integer class indices, got {targets.dtype}",
                logits,
                targets,
                kind=DTypeError,
            )
        n, classes = logits.shape
        if targets.shape != (n,):
            raise self.error(
                f"targets must have shape ({n},), one class index per row", logits, targets
            )
        if n == 0:
            raise self.error("needs at least one row to average over", logits, targets)
        return [((), dtype)]

    def forward(self, xp, logits, targets):
        if logits.dtype is HALF:
            return in_float32(self.forward, xp, logits, targets)
        # log_softmax at the targets only, by blocks of rows (``row_block``): the scratch
        # is a block's exponentials and its row maxima, sums, picks and row index
        n = logits.shape[0]
        block = row_block(n, logits.shape[1])
        total = 0.0
        for r0 in range(0, n, block):
            rows = logits[r0 : r0 + block]
            exps = xp.empty_like(rows)
            top = max_last(xp, rows, exps)[:, 0]
            xp.subtract(rows, top[:, None], out=exps)
            xp.exp(exps, out=exps)
            sums = sum_last(xp, exps)[:, 0]
            del exps
            picked = rows[xp.arange(len(rows)), targets[r0 : r0 + block]]
            picked -= top
            picked -= xp.log(sums)
            total += float(picked.sum())
        return xp.asarray(-total / n, dtype=logits.dtype)

    def workspace(self, logits: Cell, targets: Cell) -> int:
        n, classes = logits.shape
        block = row_block(n, logits.shape[1])
        if logits.dtype is HALF:  # a float32 copy of the logits too (``in_float32``)
            return 4 * n * classes + block * ((classes + 4) * 4 + 8)
        return block * ((classes + 4) * logits.dtype.itemsize + 8)

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 10.0 * numel(in_metas[0]), nbytes

    def backward(self, ctx, g):
        return apply(CrossEntropyGrad(), ctx.inputs[0], ctx.inputs[1], g), None


class CrossEntropyGrad(Op):
    """(softmax(logits) - onehot(targets)) * g / N."""

    name = "cross_entropy_grad"
    differentiable = False

    def infer(self, logits: Cell, targets: Cell, g: Cell):
        return [(logits.shape, logits.dtype)]

    def forward(self, xp, logits, targets, g):
        if logits.dtype is HALF:
            return in_float32(self.forward, xp, logits, targets, g)
        # softmax in the output's buffer, less 1 at the targets, times g / N; by blocks of
        # rows (``row_block``): the scratch is a block's row maxima, sums and row index
        n = logits.shape[0]
        p = xp.empty_like(logits)
        block = row_block(n, logits.shape[1])
        for r0 in range(0, n, block):
            rows, out = logits[r0 : r0 + block], p[r0 : r0 + block]
            xp.subtract(rows, max_last(xp, rows, out), out=out)
            xp.exp(out, out=out)
            out /= sum_last(xp, out)
            out[xp.arange(len(out)), targets[r0 : r0 + block]] -= 1.0
        p *= g
        p *= 1.0 / n
        return p

    def workspace(self, logits: Cell, targets: Cell, g: Cell) -> int:
        n, classes = logits.shape
        block = row_block(n, logits.shape[1])
        if logits.dtype is HALF:  # float32 copies (``in_float32``)
            return 8 * n * classes + block * (3 * 4 + 8)
        return block * (3 * logits.dtype.itemsize + 8)


# the fewest elements of a block of rows: smaller logits take one block (a block's Python
# calls would cost more than its scratch saves)
MIN_BLOCK = 16384


def row_block(rows: int, classes: int) -> int:
    """Rows per block of the cross-entropy kernels: a 1/CHUNK_FRACTION share of them, or
    enough for ``MIN_BLOCK`` elements."""
    return min(max(rows, 1), max(-(-rows // CHUNK_FRACTION), -(-MIN_BLOCK // max(classes, 1))))


class MSELoss(Op):
    """mean((a - b)**2) over every element: a 0-d output."""

    name = "mse_loss"
    retain_inputs = (0, 1)

    def infer(self, a: Cell, b: Cell):
        dtype = float_dtype(self, a, b)
        if a.shape != b.shape:
            raise self.error("shapes differ; mse_loss compares same-shaped tensors", a, b)
        return [((), dtype)]

    def forward(self, xp, a, b):
        d = a - b
        d *= d
        return xp.asarray(d.mean(), dtype=a.dtype)

    def workspace(self, a: Cell, b: Cell) -> int:
        return math.prod(a.shape) * a.dtype.itemsize  # the differences

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 3.0 * numel(in_metas[0]), nbytes

    def backward(self, ctx, g):
        from .arithmetic import neg

        da = apply(MSELossGrad(), ctx.inputs[0], ctx.inputs[1], g)
        return (da if ctx.needs_grad[0] else None), (neg(da) if ctx.needs_grad[1] else None)


class MSELossGrad(Op):
    """dL/da = 2 (a - b) g / n (and dL/db is its negation)."""

    name = "mse_loss_grad"
    differentiable = False

    def infer(self, a: Cell, b: Cell, g: Cell):
        return [(a.shape, a.dtype)]

    def forward(self, xp, a, b, g):
        d = a - b
        d *= g
        d *= 2.0 / max(d.size, 1)
        return d


def softmax(x: Tensor, axis: int = -1, *, dim: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis`` (PyTorch's ``dim``)."""
    return apply(Softmax(axis_or_dim("softmax", axis, dim, -1)), x)


def log_softmax(x: Tensor, axis: int = -1, *, dim: int | None = None) -> Tensor:
    """log(softmax(x)) along ``axis`` (PyTorch's ``dim``), computed stably."""
    return apply(LogSoftmax(axis_or_dim("log_softmax", axis, dim, -1)), x)


def cross_entropy(logits: Tensor, targets) -> Tensor:
    """Mean cross-entropy of (N, C) logits against integer class indices (N,)."""
    expect_tensor("cross_entropy", logits, "logits")
    if not isinstance(targets, Tensor):
        from ..tensor import tensor

        array = np.asarray(targets)
        if array.dtype.kind not in "iu":
            raise DTypeError(
                f"cross_entropy: targets must be integer class indices, got {array.dtype}"
            )
        targets = tensor(array, device=logits.device)
    op = CrossEntropy()
    if logits.ndim == 2 and isinstance(targets, Tensor) and targets.dtype.kind in "iu":
        classes = logits.shape[1]
        check_in_range(op, targets, classes, "target", "classes", logits.cell, targets.cell)
    return apply(op, logits, targets)


def mse_loss(a: Tensor, b: Tensor) -> Tensor:
    """Mean squared error over every element."""
    return apply(MSELoss(), a, b)
