"""Shape ops. Views (reshape, transpose, broadcast_to, basic indexing, split) share
their input's storage and allocate nothing; concat, copy and integer-array
indexing (gather) make new storages.

Reshape views only a C-contiguous input (as NumPy can without copying); a
non-contiguous one is copied first, so the copy is counted like any buffer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor, shape_of, tensor
from .op import (
    DTypeError,
    Op,
    ShapeError,
    apply,
    axis_in_range,
    axis_or_dim,
    expect_tensor,
    host_values,
    normalize_axis,
    same_dtype,
)

ZERO_SIZE = np.dtype([])  # indexing an array of this dtype checks a key without any memory


class View(Op):
    is_view = True

    def cost(self, in_metas, out_metas):
        return 0.0, 0.0


class Reshape(View):
    name = "reshape"

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def infer(self, x: Cell):
        return [(self.shape, x.dtype)]

    def forward(self, xp, x):
        return x.reshape(self.shape)

    def backward(self, ctx, g):
        return reshape(g, ctx.in_shapes[0])


class Transpose(View):
    name = "transpose"

    def __init__(self, axes: tuple[int, ...] | None):
        self.axes = axes

    def infer(self, x: Cell):
        ndim = len(x.shape)
        if self.axes is None:
            self.axes = tuple(reversed(range(ndim)))
        axes = tuple(normalize_axis(self, a, ndim, x) for a in self.axes)
        if sorted(axes) != list(range(ndim)):
            raise self.error(f"axes {self.axes} are not a permutation of {ndim} axes", x)
        self.axes = axes
        return [(tuple(x.shape[a] for a in axes), x.dtype)]

    def forward(self, xp, x):
        return x.transpose(self.axes)

    def backward(self, ctx, g):
        inverse = [0] * len(self.axes)  # (np.argsort of a few axes costs 1.7 us)
        for position, axis in enumerate(self.axes):
            inverse[axis] = position
        return transpose(g, tuple(inverse))


class BroadcastTo(View):
    name = "broadcast_to"

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def infer(self, x: Cell):
        try:
            if tuple(np.broadcast_shapes(x.shape, self.shape)) != self.shape:
                raise ValueError
        except (ValueError, TypeError):
            raise self.error(f"cannot broadcast to {self.shape}", x) from None
        return [(self.shape, x.dtype)]

    def forward(self, xp, x):
        return xp.broadcast_to(x, self.shape)

    def backward(self, ctx, g):
        from .reduce import sum_to

        return sum_to(g, ctx.in_shapes[0])


class Split(View):
    """Split along ``axis`` into parts of the given sizes; every part is a view."""

    name = "split"

    def __init__(self, sizes: tuple[int, ...], axis: int):
        self.sizes = sizes
        self.axis = axis
        self.n_outputs = len(sizes)
        self.starts = tuple(itertools.accumulate(sizes, initial=0))  # where each part begins

    def infer(self, x: Cell):
        self.axis = normalize_axis(self, self.axis, len(x.shape), x)
        if sum(self.sizes) != x.shape[self.axis] or any(s < 0 for s in self.sizes):
            raise self.error(
                f"sizes {list(self.sizes)} do not add up to axis {self.axis}'s length "
                f"{x.shape[self.axis]}",
                x,
            )
        metas = []
        for size in self.sizes:
            shape = list(x.shape)
            shape[self.axis] = size
            metas.append((tuple(shape), x.dtype))
        return metas

    def forward(self, xp, x):
        parts = tuple(self.output(xp, x, i) for i in range(self.n_outputs))
        return parts if len(parts) > 1 else parts[0]

    def output(self, xp, x, index: int):
        key = [slice(None)] * x.ndim
        key[self.axis] = slice(self.starts[index], self.starts[index + 1])
        return x[tuple(key)]

    def backward(self, ctx, grads):
        grads = grads if isinstance(grads, tuple) else (grads,)
        like = next(g for g in grads if g is not None)
        parts = []
        for g, size in zip(grads, self.sizes, strict=True):
            if g is None:
                shape = list(ctx.in_shapes[0])
                shape[self.axis] = size
                g = zeros_for(tuple(shape), like.dtype, like.device)
            parts.append(g)
        return concat(parts, self.axis)


def zeros_for(shape, dtype, device) -> Tensor:
    from ..tensor import full

    return full(shape, 0, dtype, device=device)


class Copy(Op):
    """A C-contiguous copy (before reshaping a non-contiguous view)."""

    name = "copy"

    def infer(self, x: Cell):
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return xp.array(x, copy=True, order="C")

    def backward(self, ctx, g):
        return g


class Concat(Op):
    name = "concat"

    def __init__(self, axis: int):
        self.axis = axis

    def infer(self, *xs: Cell):
        if not xs:
            raise self.error("needs at least one tensor")
        dtype = same_dtype(self, *xs)
        ndim = len(xs[0].shape)
        self.axis = normalize_axis(self, self.axis, ndim, *xs)
        for x in xs:
            if len(x.shape) != ndim or any(
                a != b
                for i, (a, b) in enumerate(zip(x.shape, xs[0].shape, strict=True))
                if i != self.axis
            ):
                raise self.error(f"shapes differ outside axis {self.axis}", *xs)
        shape = list(xs[0].shape)
        shape[self.axis] = sum(x.shape[self.axis] for x in xs)
        return [(tuple(shape), dtype)]

    def forward(self, xp, *xs):
        # laid out as the first input (a batch-last image stays batch-last, and the window
        # kernels and batch norm after it read it without a copy)
        shape = list(xs[0].shape)
        shape[self.axis] = sum(x.shape[self.axis] for x in xs)
        return xp.concatenate(xs, axis=self.axis, out=xp.empty_like(xs[0], shape=tuple(shape)))

    def backward(self, ctx, g):
        return split(g, [s[self.axis] for s in ctx.in_shapes], self.axis)


# ---- indexing ---------------------------------------------------------------------------------


class IndexSlot:
    """Stands in a key for the k-th integer-array index (an input tensor of the op)."""

    __slots__ = ("k",)

    def __init__(self, k: int):
        self.k = k

    def __repr__(self) -> str:
        return f"<index {self.k}>"

    def __eq__(self, other):
        return isinstance(other, IndexSlot) and other.k == self.k

    def __hash__(self):
        return hash(("IndexSlot", self.k))


def resolve(key: tuple, indices: Sequence) -> tuple:
    return tuple(indices[k.k] if isinstance(k, IndexSlot) else k for k in key)


def indexed_shape(op: Op, x: Cell, key: tuple, index_cells: Sequence[Cell]) -> tuple[int, ...]:
    """The shape of ``x[key]``, from metadata only: the index arrays stand in as zeros of
    their shapes (broadcast, no memory), which is all the result's shape depends on."""
    stand_ins = [np.broadcast_to(np.intp(0), c.shape) for c in index_cells]
    return probe(op, x, key, stand_ins).shape


def probe(op: Op, x, key: tuple, indices: Sequence) -> np.ndarray:
    """``x[key]`` on a stand-in of ``x`` of zero-size elements: checks the key (and the
    values of host ``indices``) without touching memory; an IndexError names the op."""
    try:
        return np.empty(x.shape, dtype=ZERO_SIZE)[resolve(key, indices)]
    except IndexError as error:
        raise op.error(f"index {key!r} is out of range: {error}", x, kind=IndexError) from None
    except TypeError as error:  # a slice of non-integers, say
        raise op.error(f"index {key!r} is not valid: {error}", x, kind=TypeError) from None
    except ValueError as error:  # a slice step of 0
        raise op.error(f"index {key!r} is not valid: {error}", x, kind=ValueError) from None


class GetItem(View):
    """Basic indexing (ints, slices, None, Ellipsis): a view."""

    name = "getitem"

    def __init__(self, key: tuple):
        self.key = key

    def infer(self, x: Cell):
        return [(indexed_shape(self, x, self.key, ()), x.dtype)]

    def forward(self, xp, x):
        return x[self.key]

    def backward(self, ctx, g):
        return apply(IndexGrad(self.key, ctx.in_shapes[0]), g)


class Gather(Op):
    """Indexing with integer arrays (advanced indexing): a copy; indices are inputs."""

    name = "getitem"

    def __init__(self, key: tuple, n_indices: int):
        self.key = key
        self.retain_inputs = tuple(range(1, 1 + n_indices))
        self.shape: tuple[int, ...] | None = None  # the result's, once ``getitem`` probed

    def infer(self, x: Cell, *indices: Cell):
        for c in indices:
            if c.dtype.kind not in "iu":
                raise self.error(
                    f"index arrays must be integers, got {c.dtype}", x, *indices, kind=DTypeError
                )
        shape = self.shape if self.shape is not None else indexed_shape(self, x, self.key, indices)
        return [(shape, x.dtype)]

    def forward(self, xp, x, *indices):
        return x[resolve(self.key, indices)]

    def backward(self, ctx, g):
        indices = ctx.inputs[1:]
        return (
            apply(IndexGrad(self.key, ctx.in_shapes[0]), g, *indices),
            *([None] * len(indices)),
        )


class IndexGrad(Op):
    """The gradient of indexing: zeros of the input's shape with ``g`` added at ``key``."""

    name = "index_grad"
    differentiable = False

    def __init__(self, key: tuple, shape: tuple[int, ...]):
        self.key = key
        self.shape = shape

    def infer(self, g: Cell, *indices: Cell):
        return [(self.shape, g.dtype)]

    def forward(self, xp, g, *indices):
        out = xp.zeros(self.shape, dtype=g.dtype)
        key = resolve(self.key, indices)
        if indices:
            backend.scatter_add(xp, out, key, g)
        else:
            out[key] = g
        return out


def index_array(k) -> np.ndarray:
    """An index as an array. An empty list selects nothing, so it holds integers: NumPy and
    PyTorch read ``x[[]]`` and ``x[mask, []]`` so, where ``np.asarray([])`` is float."""
    try:
        array = np.asarray(k)
    except ValueError as error:  # a ragged list
        raise IndexError(f"getitem: index {k!r} is not valid: {error}") from None
    return array.astype(np.int64) if isinstance(k, list) and array.size == 0 else array


def check_masks(x: Tensor, key: tuple) -> None:
    """A boolean mask must match the shape of the axes it indexes (NumPy's rule), checked on
    a zero-size stand-in before the masks become integer indices."""
    probe = tuple(
        k.numpy() if isinstance(k, Tensor) else (index_array(k) if isinstance(k, list) else k)
        for k in key
    )
    try:
        np.empty(x.shape, dtype=ZERO_SIZE)[probe]
    except IndexError as error:
        raise IndexError(f"getitem: {error} (tensor shape {x.shape})") from None


def normalize_key(x: Tensor, key) -> tuple[tuple, list[Tensor]]:
    """Split a NumPy-style key into a template and integer index tensors."""
    key = key if isinstance(key, tuple) else (key,)
    if any(
        (isinstance(k, Tensor) and k.dtype == np.bool_)
        or (isinstance(k, np.ndarray) and k.dtype == np.bool_)
        or (isinstance(k, list) and index_array(k).dtype == np.bool_)
        for k in key
    ):
        check_masks(x, key)
    template: list = []
    indices: list[Tensor] = []
    for k in key:
        if k is None or k is Ellipsis or isinstance(k, slice):
            template.append(k)
        elif isinstance(k, int | np.integer) and not isinstance(k, bool):
            template.append(int(k))
        else:
            if isinstance(k, Tensor):
                k = k if k.dtype != np.bool_ else k.numpy()
            if not isinstance(k, Tensor):
                array = index_array(k)
                if array.dtype == np.bool_ and array.ndim == 0:
                    raise IndexError(
                        "getitem: a scalar bool index is not supported; use None for a new axis"
                    )
                if array.dtype == np.bool_:
                    for part in np.nonzero(array):
                        template.append(IndexSlot(len(indices)))
                        indices.append(tensor(part, dtype=np.int64, device=x.device))
                    continue
                if array.dtype.kind not in "iu":
                    raise IndexError(f"getitem: unsupported index {k!r} of dtype {array.dtype}")
                k = tensor(array, dtype=np.int64, device=x.device)
            template.append(IndexSlot(len(indices)))
            indices.append(k)
    return tuple(template), indices


# ---- functional API -------------------------------------------------------------------------


def reshape(x: Tensor, shape) -> Tensor:
    expect_tensor("reshape", x)
    shape = target_shape(x, (shape,) if isinstance(shape, int | np.integer) else tuple(shape))
    if shape == x.shape:
        return x
    if not x.cell.contiguous:  # (this frame holds the only reference: a trace's order)
        x = apply(Copy(), x)
    return apply(Reshape(shape), x)


def target_shape(x: Tensor, shape: tuple, op_name: str = "reshape") -> tuple[int, ...]:
    """``shape`` (dims, or one tuple or list of them, as ``x.reshape`` takes) checked
    against ``x``'s size, a -1 filled in; its errors name ``op_name`` (``x.view`` is a
    reshape too)."""
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    if not all(isinstance(d, int | np.integer) and not isinstance(d, bool) for d in shape):
        raise TypeError(f"{op_name}: the shape must be ints, got {shape!r}")
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"{op_name}: at most one -1 in {shape}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or x.size % known:
            raise ValueError(f"{op_name}: cannot reshape {x.shape} into {shape}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if math.prod(shape) != x.size or any(d < 0 for d in shape):
        raise ValueError(f"{op_name}: cannot reshape {x.shape} ({x.size} elements) into {shape}")
    return shape


def flatten(x: Tensor, start_axis: int = 0, *, start_dim: int | None = None) -> Tensor:
    """Merge the axes from ``start_axis`` (PyTorch's ``start_dim``) on into one (a 0-d
    tensor becomes shape (1,))."""
    expect_tensor("flatten", x)
    start_axis = axis_or_dim("flatten", start_axis, start_dim, 0, "start_axis or start_dim")
    start = axis_in_range("flatten", start_axis, max(x.ndim, 1), x.shape)
    return reshape(x, (*x.shape[:start], math.prod(x.shape[start:])))


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    expect_tensor("transpose", x)
    return apply(Transpose(None if axes is None else tuple(axes)), x)


def permute(x: Tensor, *dims) -> Tensor:
    """The dimensions in the order ``dims``, a permutation of all of them, as
    ``torch.permute``: ``md.permute(x, (2, 0, 1))``, ``x.permute(2, 0, 1)`` (a view)."""
    expect_tensor("permute", x)
    if len(dims) == 1 and isinstance(dims[0], tuple | list):
        dims = tuple(dims[0])
    axes = [axis_in_range("permute", d, x.ndim, x.shape) for d in dims] if x.ndim else list(dims)
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"permute: dims {dims} are not a permutation of the {x.ndim} of {x.shape}")
    return apply(Transpose(tuple(axes)), x)


def squeeze(x: Tensor, dim=None) -> Tensor:
    """``x`` without its dimensions of size 1 (``dim``: only those of these, an int or a
    tuple; one of another size stays), as ``torch.squeeze``. A reshape: a view of a
    contiguous tensor."""
    expect_tensor("squeeze", x)
    if dim is None:
        axes = set(range(x.ndim))
    else:
        dims = dim if isinstance(dim, tuple | list) else (dim,)
        axes = {axis_in_range("squeeze", d, x.ndim, x.shape) for d in dims}
        if len(axes) != len(dims):
            raise ValueError(f"squeeze: dim {dim} repeats a dimension (shape {x.shape})")
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if n != 1 or i not in axes))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """``x`` with a dimension of size 1 inserted at ``dim`` (``-ndim - 1 <= dim <= ndim``),
    as ``torch.unsqueeze``. A reshape: a view of a contiguous tensor."""
    expect_tensor("unsqueeze", x)
    axis = axis_in_range("unsqueeze", dim, x.ndim + 1, x.shape)
    return reshape(x, (*x.shape[:axis], 1, *x.shape[axis:]))


def broadcast_to(x: Tensor, shape) -> Tensor:
    expect_tensor("broadcast_to", x)
    if type(shape) is not tuple:  # a tuple is checked by infer (gradients pass tuples)
        shape = shape_of(shape, "broadcast_to")
    return x if shape == x.shape else apply(BroadcastTo(shape), x)


def getitem(x: Tensor, key) -> Tensor:
    expect_tensor("getitem", x)
    template, indices = normalize_key(x, key)
    if not indices:
        return apply(GetItem(template), x)
    op = Gather(template, len(indices))
    if all(k.dtype.kind in "iu" for k in indices):  # in range (NumPy raises, CuPy wraps)
        op.shape = probe(op, x.cell, template, [host_values(k) for k in indices]).shape
    return apply(op, x, *indices)


def tensor_list(name: str, tensors) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence):
        raise TypeError(f"{name}: expects a list or tuple of Tensors, got {type(tensors).__name__}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: item {i} must be a Tensor, got {type(t).__name__}")
    return list(tensors)


def concat(tensors: Sequence[Tensor], axis: int = 0, *, dim: int | None = None) -> Tensor:
    """Join tensors along an existing ``axis`` (PyTorch's ``dim``; ``torch.cat``)."""
    return apply(Concat(axis_or_dim("concat", axis, dim, 0)), *tensor_list("concat", tensors))


def stack(tensors: Sequence[Tensor], axis: int = 0, *, dim: int | None = None) -> Tensor:
    """Join same-shaped tensors along a new axis (``-ndim - 1 <= axis <= ndim``; PyTorch's
    ``dim``)."""
    axis = axis_or_dim("stack", axis, dim, 0)
    tensors = tensor_list("stack", tensors)
    if not tensors:
        raise ValueError("stack: needs at least one tensor")
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            listed = ", ".join(f"{u.shape} {u.dtype}" for u in tensors)
            kind = ShapeError if t.shape != first.shape else DTypeError
            raise kind(f"stack: every tensor needs the same shape and dtype, got [{listed}]")
    axis = axis_in_range("stack", axis, first.ndim + 1, first.shape)
    return concat([reshape(t, (*t.shape[:axis], 1, *t.shape[axis:])) for t in tensors], axis)


def split(x: Tensor, sections, axis: int = 0, *, dim: int | None = None) -> tuple[Tensor, ...]:
    """Split into ``sections`` equal parts (an int) or parts of the given sizes (a list),
    along ``axis`` (PyTorch's ``dim``; note that ``torch.split``'s int is a part's size)."""
    expect_tensor("split", x)
    axis = axis_or_dim("split", axis, dim, 0)
    if x.ndim == 0:
        raise ShapeError("split: cannot split a 0-d tensor")
    axis = axis_in_range("split", axis, x.ndim, x.shape)
    length = x.shape[axis]
    if not isinstance(sections, int | np.integer | Sequence) or isinstance(sections, bool):
        raise TypeError(
            f"split: sections must be an int or a list of ints, got {type(sections).__name__}"
        )
    if isinstance(sections, int | np.integer):
        if sections <= 0 or length % sections:
            raise ValueError(
                f"split: axis {axis} of {x.shape} does not split into {sections} equal parts"
            )
        sizes = (length // int(sections),) * int(sections)
    else:
        if not sections or not all(
            isinstance(s, int | np.integer) and not isinstance(s, bool) for s in sections
        ):
            raise TypeError(f"split: sections must be a non-empty list of ints, got {sections!r}")
        sizes = tuple(int(s) for s in sections)
    out = apply(Split(sizes, axis), x)
    return out if isinstance(out, tuple) else (out,)


def copy(x: Tensor) -> Tensor:
    return apply(Copy(), expect_tensor("copy", x))
