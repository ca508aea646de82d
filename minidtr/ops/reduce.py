"""Reductions: sum, mean, max over axes (NumPy-style ``axis``, ``keepdims``)."""

from __future__ import annotations

import math

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import FLOAT32, HALF, Op, apply, expect_tensor, float_dtype, normalize_axes, numel


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class Reduce(Op):
    def __init__(self, axis=None, keepdims: bool = False):
        self.axis = axis
        self.keepdims = keepdims
        self.axes: tuple[int, ...] = ()

    def infer(self, x: Cell):
        if not isinstance(self.keepdims, bool | np.bool_):
            raise self.error(
                f"keepdims must be True or False, got {self.keepdims!r}", x, kind=TypeError
            )
        self.keepdims = bool(self.keepdims)
        self.axes = normalize_axes(self, self.axis, len(x.shape), x)
        return [(reduced_shape(x.shape, self.axes, self.keepdims), self.out_dtype(x))]

    def out_dtype(self, x: Cell):
        return x.dtype

    def cost(self, in_metas, out_metas):
        ((shape, dtype),) = in_metas
        n = math.prod(shape)
        return float(n), float(n * dtype.itemsize + numel(out_metas[0]) * dtype.itemsize)

    def expand(self, g: Tensor, in_shape: tuple[int, ...]) -> Tensor:
        """The output gradient with the reduced axes of ``in_shape`` put back (size 1),
        ready to broadcast."""
        from .shape import reshape

        return reshape(g, reduced_shape(in_shape, self.axes, True))


class Sum(Reduce):
    """Sum over axes. Bool and integer inputs sum in int64 (uint64 stays), as NumPy and
    PyTorch do; floats keep their dtype."""

    name = "sum"

    def out_dtype(self, x: Cell):
        if x.dtype.kind == "b" or (x.dtype.kind in "iu" and x.dtype.itemsize < 8):
            return np.dtype(np.int64)
        return x.dtype

    def forward(self, xp, x):
        if x.dtype is HALF:  # accumulated in float32, as PyTorch's (and NumPy's mean)
            out = xp.sum(x, axis=self.axes, keepdims=self.keepdims, dtype=FLOAT32)
            return out.astype(HALF)
        return xp.sum(x, axis=self.axes, keepdims=self.keepdims, dtype=self.out_dtype(x))

    def backward(self, ctx, g):
        from .shape import broadcast_to

        return broadcast_to(self.expand(g, ctx.in_shapes[0]), ctx.in_shapes[0])


class SumTo(Sum):
    """Sum over ``axes`` (kept) straight into ``shape``: a broadcast gradient summed back
    to its input's shape in one op, where a sum and a reshape view would take two (the
    same sum, so the same floats)."""

    name = "sum_to"

    def __init__(self, axes: tuple[int, ...], shape: tuple[int, ...]):
        super().__init__(axes, keepdims=True)
        self.axes = axes
        self.shape = shape

    def infer(self, x: Cell):
        return [(self.shape, self.out_dtype(x))]

    def forward(self, xp, x):
        return super().forward(xp, x).reshape(self.shape)

    def backward(self, ctx, g):
        from .shape import broadcast_to

        return broadcast_to(g, ctx.in_shapes[0])


class Mean(Reduce):
    """Mean over axes, of floating-point inputs only (as PyTorch; convert ints first)."""

    name = "mean"

    def out_dtype(self, x: Cell):
        return float_dtype(self, x)

    def forward(self, xp, x):
        if x.dtype is HALF:
            out = xp.mean(x, axis=self.axes, keepdims=self.keepdims, dtype=FLOAT32)
            return out.astype(HALF)
        return xp.mean(x, axis=self.axes, keepdims=self.keepdims)

    def backward(self, ctx, g):
        from .arithmetic import Scale
        from .shape import broadcast_to

        shape = ctx.in_shapes[0]
        count = math.prod(shape[a] for a in self.axes)
        scaled = apply(Scale(1.0 / (count or 1)), g)
        return broadcast_to(self.expand(scaled, shape), shape)


class Max(Reduce):
    """Max over axes. The gradient is shared evenly among tied maxima (as torch.amax)."""

    name = "max"
    retain_inputs = (0,)
    retain_outputs = (0,)

    def infer(self, x: Cell):
        metas = super().infer(x)
        empty = [a for a in self.axes if x.shape[a] == 0]
        if empty:
            raise self.error(f"cannot take the {self.name} over empty axis {empty[0]}", x)
        return metas

    def forward(self, xp, x):
        return xp.max(x, axis=self.axes, keepdims=self.keepdims)

    def backward(self, ctx, g):
        shape = ctx.in_shapes[0]
        x, y = ctx.inputs[0], ctx.outputs[0]
        return apply(MaxGrad(self.axes), x, self.expand(y, shape), self.expand(g, shape))


class Min(Max):
    """Min over axes. The gradient is shared evenly among tied minima (as torch.amin)."""

    name = "min"

    def forward(self, xp, x):
        return xp.min(x, axis=self.axes, keepdims=self.keepdims)


class MaxGrad(Op):
    """dL/dx of max: the output gradient spread over the positions equal to the max."""

    name = "max_grad"
    differentiable = False

    def __init__(self, axes: tuple[int, ...]):
        self.axes = axes

    def infer(self, x: Cell, y: Cell, g: Cell):
        return [(x.shape, x.dtype)]

    def forward(self, xp, x, y, g):
        mask = x == y
        count = mask.sum(axis=self.axes, keepdims=True).astype(x.dtype)
        return (mask * (g / count)).astype(x.dtype, copy=False)

    def workspace(self, x: Cell, y: Cell, g: Cell) -> int:
        """The mask of the positions equal to the max."""
        return math.prod(x.shape)


def sum(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return apply(Sum(axis, keepdims), expect_tensor("sum", x))


def mean(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return apply(Mean(axis, keepdims), expect_tensor("mean", x))


def max(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return apply(Max(axis, keepdims), expect_tensor("max", x))


def min(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return apply(Min(axis, keepdims), expect_tensor("min", x))


def sum_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``x`` down to ``shape``, which ``x``'s shape broadcasts from."""
    from .op import ShapeError
    from .shape import reshape

    expect_tensor("sum_to", x)
    shape = tuple(shape)
    try:
        fits = len(shape) <= x.ndim and np.broadcast_shapes(shape, x.shape) == x.shape
    except (ValueError, TypeError):
        fits = False
    if not fits:
        raise ShapeError(f"sum_to: shape {x.shape} does not broadcast from {shape}")
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1
    )
    return apply(SumTo(axes, shape), x) if axes else reshape(x, shape)
