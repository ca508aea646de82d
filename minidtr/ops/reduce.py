"""Reductions: sum, mean, max, min over axes and argmax, argmin along one (NumPy's
``axis``, ``keepdims`` or PyTorch's ``dim``, ``keepdim``)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor, tensor
from .op import (
    FLOAT32,
    HALF,
    DTypeError,
    Op,
    ShapeError,
    apply,
    axis_in_range,
    axis_or_dim,
    expect_tensor,
    float_dtype,
    normalize_axes,
    normalize_axis,
    numel,
)

INT64 = np.dtype(np.int64)


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


def float32_result(op: Reduce, x: Cell) -> int:
    """The bytes of the float32 result a float16 sum or mean is rounded from (0 for the
    other dtypes, which reduce in their own)."""
    if x.dtype is not HALF:
        return 0
    return 4 * math.prod(x.shape[i] for i in range(len(x.shape)) if i not in op.axes)


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

    def workspace(self, x: Cell) -> int:
        return float32_result(self, x)

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

    def workspace(self, x: Cell) -> int:
        return float32_result(self, x)

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


class ArgMax(Op):
    """The index of the largest value along ``axis`` (None: in the flattened tensor),
    int64: the first on ties, a NaN's where there is one (as ``torch.argmax``)."""

    name = "argmax"
    differentiable = False

    def __init__(self, axis: int | None = None, keepdims: bool = False):
        self.axis = axis
        self.keepdims = keepdims

    def infer(self, x: Cell):
        if not isinstance(self.keepdims, bool | np.bool_):
            raise self.error(
                f"keepdim must be True or False, got {self.keepdims!r}", x, kind=TypeError
            )
        self.keepdims = bool(self.keepdims)
        if self.axis is None:
            if not math.prod(x.shape):
                raise self.error("the tensor is empty", x)
            return [((1,) * len(x.shape) if self.keepdims else (), INT64)]
        self.axis = normalize_axis(self, self.axis, len(x.shape), x)
        if not x.shape[self.axis]:
            raise self.error(f"axis {self.axis} is empty", x)
        return [(reduced_shape(x.shape, (self.axis,), self.keepdims), INT64)]

    def forward(self, xp, x):
        return xp.argmax(x, axis=self.axis, keepdims=self.keepdims).astype(INT64, copy=False)

    def workspace(self, x: Cell) -> int:
        """NumPy's copy of ``x`` with the axis last and contiguous, unless it is already so."""
        last = self.axis is None or self.axis == len(x.shape) - 1
        return 0 if x.contiguous and last else math.prod(x.shape) * x.dtype.itemsize


class ArgMin(ArgMax):
    """The index of the smallest value, as ``ArgMax`` (``torch.argmin``)."""

    name = "argmin"

    def forward(self, xp, x):
        return xp.argmin(x, axis=self.axis, keepdims=self.keepdims).astype(INT64, copy=False)


class ValuesIndices(NamedTuple):
    """What PyTorch's ``max(x, dim)`` and ``min(x, dim)`` return (``torch.return_types``)."""

    values: Tensor
    indices: Tensor


def torch_names(where: str, axis, keepdims, dim, keepdim) -> tuple:
    """(axis, keepdims) of a reduction given by NumPy's names or by PyTorch's, ``dim`` and
    ``keepdim`` (an empty ``dim`` is every axis, as PyTorch reads it); not both of a pair."""
    axis = axis_or_dim(where, axis, dim, None)
    if isinstance(dim, tuple | list) and not dim:
        axis = None
    return axis, axis_or_dim(where, keepdims, keepdim, False, "keepdims or keepdim")


def sum(x: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """The sum over ``axis`` (an int, a tuple, None: every axis), or PyTorch's ``dim``."""
    if dim is not None or keepdim is not None:
        axis, keepdims = torch_names("sum", axis, keepdims, dim, keepdim)
    return apply(Sum(axis, keepdims), expect_tensor("sum", x))


def mean(x: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """The mean over ``axis`` (an int, a tuple, None: every axis), or PyTorch's ``dim``."""
    if dim is not None or keepdim is not None:
        axis, keepdims = torch_names("mean", axis, keepdims, dim, keepdim)
    return apply(Mean(axis, keepdims), expect_tensor("mean", x))


def max(x: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
    """The largest values over ``axis`` (an int, a tuple, None: every axis), as NumPy's max
    and ``torch.amax``: the gradient is shared among tied maxima. Given PyTorch's ``dim``
    (an int), PyTorch's ``max(x, dim)``: (values, indices), the gradient to the index."""
    if dim is not None:
        return select_along("max", x, axis, keepdims, dim, keepdim)
    if keepdim is not None:
        axis, keepdims = torch_names("max", axis, keepdims, dim, keepdim)
    return apply(Max(axis, keepdims), expect_tensor("max", x))


def min(x: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None):
    """The smallest values, as ``max`` (``torch.amin``; with ``dim``, ``torch.min(x, dim)``)."""
    if dim is not None:
        return select_along("min", x, axis, keepdims, dim, keepdim)
    if keepdim is not None:
        axis, keepdims = torch_names("min", axis, keepdims, dim, keepdim)
    return apply(Min(axis, keepdims), expect_tensor("min", x))


def argmax(x: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """The index of the largest value along ``axis`` (an int; None: in the flattened
    tensor), int64, the first on ties (``torch.argmax(x, dim, keepdim)``)."""
    if dim is not None or keepdim is not None:
        axis, keepdims = torch_names("argmax", axis, keepdims, dim, keepdim)
    return apply(ArgMax(axis, keepdims), not_bool("argmax", x))


def argmin(x: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """The index of the smallest value, as ``argmax`` (``torch.argmin``)."""
    if dim is not None or keepdim is not None:
        axis, keepdims = torch_names("argmin", axis, keepdims, dim, keepdim)
    return apply(ArgMin(axis, keepdims), not_bool("argmin", x))


def not_bool(where: str, x: Tensor) -> Tensor:
    """``x``, if it is a tensor of numbers: PyTorch's argmax and argmin refuse bool ones."""
    if expect_tensor(where, x).dtype.kind == "b":
        raise DTypeError(f"{where}: bool inputs are not supported; convert with astype")
    return x


def select_along(name: str, x: Tensor, axis, keepdims, dim, keepdim) -> ValuesIndices:
    """PyTorch's ``max(x, dim)``/``min(x, dim)``: the index along ``dim`` (argmax/argmin)
    and the value there, gathered by indexing, so that the gradient goes to that one
    position as in PyTorch (not shared among ties, as ``max(x, axis)``'s)."""
    from .shape import getitem, reshape

    axis, keepdims = torch_names(name, axis, keepdims, dim, keepdim)
    expect_tensor(name, x)
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool):
        raise TypeError(
            f"{name}: dim must be an int ({name}(x, dim) gives the values and their indices "
            f"along one dimension), got {axis!r}"
        )
    if not isinstance(keepdims, bool | np.bool_):
        raise TypeError(f"{name}: keepdim must be True or False, got {keepdims!r}")
    axis = axis_in_range(name, axis, x.ndim, x.shape)
    if not x.shape[axis]:
        raise ShapeError(f"{name}: dim {axis} of shape {x.shape} is empty")
    op = ArgMax(axis, True) if name == "max" else ArgMin(axis, True)
    indices = apply(op, x)
    key = tuple(
        indices
        if i == axis
        else tensor(
            np.arange(n).reshape([n if j == i else 1 for j in range(x.ndim)]), device=x.device
        )
        for i, n in enumerate(x.shape)
    )
    values = getitem(x, key)
    if not keepdims:
        shape = reduced_shape(x.shape, (axis,), False)
        values, indices = reshape(values, shape), reshape(indices, shape)
    return ValuesIndices(values, indices)


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
