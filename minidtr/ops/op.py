"""The op protocol and ``apply``, the single path every op takes.

An op is a class with static attributes set in ``__init__`` (axis, stride,
seed, ...) and four methods:

- ``infer(*cells)``: check the inputs and return each output's (shape, dtype),
  before anything runs, so the allocator can make room first and a bad input
  fails with a message naming the op, the shapes and the dtypes. It reads the
  cells' metadata only, never their values (an evicted input would be rebuilt
  inside it, before room is made). A value the op needs valid (an index in range,
  no negative integer exponent) is checked by the op's function before ``apply``,
  through ``host_values``;
- ``forward(xp, *arrays)``: the kernel, pure, on NumPy or CuPy arrays;
- ``backward(ctx, grad)``: the vector-Jacobian product written in minidtr ops.
  ``ctx`` is the application's backward node: ``ctx.inputs``/``ctx.outputs``
  hold Tensors at the indices the op declared in ``retain_inputs``/
  ``retain_outputs`` and None elsewhere (so backward can only see what the
  allocator knows is kept), ``ctx.in_shapes``/``ctx.in_dtypes`` describe the
  inputs and ``ctx.needs_grad`` says which inputs want a gradient;
- ``cost(in_metas, out_metas)``: (flops, bytes moved), the deterministic cost
  estimate used by ``Runtime(cost="flops")``;
- ``workspace(*cells)``, optionally: the bytes of scratch memory the kernel needs besides
  its outputs (im2col columns, a reduction's intermediate), from the inputs' metadata
  only, as ``infer``. The allocator reserves them under the budget before the kernel runs
  (evicting if needed, as for an output) and releases them after; a class that defines
  it gets ``has_workspace`` set, the flag the allocator reads (docs/memory.md).

The op object holds only static attributes; nothing about one application is
stored on it. View ops (``is_view``) return views of their single input and
allocate nothing.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from .. import autograd, backend
from ..modes import as_constants, constant_mode, grad_mode  # noqa: F401 (ops.op.as_constants)
from ..runtime.audit import check_metas
from ..runtime.registry import ALLOCATORS, allocator_for
from ..runtime.storage import Cell
from ..tensor import Tensor

Meta = tuple[tuple[int, ...], np.dtype]


def numel(meta: Meta) -> int:
    """The number of elements of a (shape, dtype) pair."""
    shape, _ = meta
    return math.prod(shape)


class ShapeError(ValueError):
    """An op was given shapes it cannot work with."""


class DTypeError(TypeError):
    """An op was given dtypes it cannot work with."""


def describe(cells: tuple[Cell, ...] | list[Cell]) -> str:
    shapes = ", ".join(str(c.shape) for c in cells)
    dtypes = ", ".join(str(c.dtype) for c in cells)
    return f"input shapes [{shapes}], dtypes [{dtypes}]"


# The class attributes every application reads (``apply``, the allocator, autograd). Each
# op instance gets its own copy when it is made: CPython 3.11 specializes reads of an
# instance's attributes, not reads of its class's through it.
FLAGS = (
    "name",
    "n_outputs",
    "is_view",
    "differentiable",
    "retain_inputs",
    "retain_outputs",
    "has_workspace",
    "check_results",
)


class Op:
    name = "op"
    n_outputs = 1
    is_view = False
    differentiable = True
    retain_inputs: tuple[int, ...] = ()
    retain_outputs: tuple[int, ...] = ()
    has_workspace = False  # set for every class that defines ``workspace`` (__init_subclass__)
    default_cost = True  # False for every class that defines ``cost`` (fast/hotpath.py)
    # An op defined outside minidtr has its outputs checked against ``infer`` and its
    # gradients against its inputs on every application (minidtr's own ops only in the test
    # suite, ``CHECK_OPS``): a mismatch there would otherwise be recorded as it claims.
    check_results = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.check_results = not cls.__module__.startswith("minidtr.")
        if "workspace" in vars(cls):
            cls.has_workspace = True
        if "cost" in vars(cls):
            cls.default_cost = False

    def __new__(cls, *args, **kwargs):
        op = super().__new__(cls)
        op.name = cls.name  # FLAGS (an ``__init__`` may set its own)
        op.n_outputs = cls.n_outputs
        op.is_view = cls.is_view
        op.differentiable = cls.differentiable
        op.retain_inputs = cls.retain_inputs
        op.retain_outputs = cls.retain_outputs
        op.has_workspace = cls.has_workspace
        op.check_results = cls.check_results
        return op

    def infer(self, *inputs: Cell) -> list[Meta]:
        raise NotImplementedError(f"{self.name}: an op defines infer(self, *inputs)")

    def forward(self, xp, *arrays):
        raise NotImplementedError(f"{self.name}: an op defines forward(self, xp, *arrays)")

    def output(self, xp, x, index: int):
        """Output ``index`` of a view op with several, alone (``views.array_of``, for a
        read of one of them); a view op that can make one part without the others (split)
        says how, so that reading each of n parts is not O(n^2)."""
        return self.forward(xp, x)[index]

    def backward(self, ctx, grad):
        raise RuntimeError(f"{self.name} has no gradient")

    def cost(self, in_metas: list[Meta], out_metas: list[Meta]) -> tuple[float, float]:
        """Default estimate: one flop per output element; every byte read and written once
        (``fast.hotpath.estimated_cost`` computes the same from the cells, without these lists)."""
        flops = nbytes = 0
        for shape, dtype in out_metas:
            n = math.prod(shape)
            flops += n
            nbytes += n * dtype.itemsize
        for shape, dtype in in_metas:
            nbytes += math.prod(shape) * dtype.itemsize
        return float(flops), float(nbytes)

    def workspace(self, *inputs: Cell) -> int:
        """The bytes of scratch memory ``forward`` allocates besides its outputs, at its
        worst, for inputs of these shapes and dtypes (metadata only: an evicted input is not
        rebuilt for it). At least what the kernel really allocates: the op-test harness
        (tests/op_harness.py) and tests/test_real_memory.py measure the kernels with
        tracemalloc against it. The default, 0, is for
        kernels that allocate nothing but their outputs."""
        return 0

    def error(self, message: str, *inputs: Cell, kind: type[Exception] = ShapeError) -> Exception:
        where = f" ({describe(inputs)})" if inputs else ""
        return kind(f"{self.name}: {message}{where}")

    def attributes(self) -> dict[str, Any]:
        """The static attributes (the ``FLAGS`` only where this op's differ from its class's)."""
        cls = type(self)
        return {k: v for k, v in vars(self).items() if k not in FLAGS or v != getattr(cls, k)}

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attributes().items())
        return f"{self.name}({attrs})"


def different_devices(op: Op, cells: tuple[Cell, ...]) -> Exception:
    devices = sorted({str(c.device) for c in cells})
    return op.error(
        f"inputs are on different devices ({' and '.join(devices)})", *cells, kind=ValueError
    )


def apply(op: Op, *inputs: Tensor, device: str | None = None) -> Any:
    """Run ``op`` on tensors under the active runtime and hook it into autograd.

    Every op takes this path, so it is written for speed (plain loops, no generator
    expressions); what it costs is what an op costs on a tiny tensor."""
    try:
        n = len(inputs)
        if n == 1:
            cells: tuple[Cell, ...] = (inputs[0].cell,)
        elif n == 2:
            cells = (inputs[0].cell, inputs[1].cell)
        else:
            cells = tuple([t.cell for t in inputs])
    except AttributeError:
        bad = next(i for i, t in enumerate(inputs) if not isinstance(t, Tensor))
        raise TypeError(
            f"{op.name}: input {bad} must be a Tensor, got {type(inputs[bad]).__name__}"
        ) from None
    # op.infer(*cells), spelled out for one and two inputs: CPython 3.11 specializes a
    # method call, but not the attribute read that a call with *args compiles to
    if n == 1:
        device = cells[0].device
        metas = op.infer(cells[0])
    elif n == 2:
        a, b = cells
        device = a.device
        if b.device != device:
            raise different_devices(op, cells)
        metas = op.infer(a, b)
    else:
        if cells:
            device = cells[0].device
            for c in cells:
                if c.device != device:
                    raise different_devices(op, cells)
        elif device is None:
            device = "cpu"
        metas = op.infer(*cells)
    try:
        allocator = ALLOCATORS[device]  # allocator_for, inlined
    except KeyError:
        allocator = allocator_for(device)
    constant = constant_mode()
    try:
        out_cells = allocator.compute(op, cells, metas, device, constant)
    except (TypeError, ValueError, AttributeError):
        check_metas(op, metas)  # an op of one's own whose infer returned something else
        raise
    single = op.n_outputs == 1
    output = Tensor(out_cells[0]) if single else tuple([Tensor(c) for c in out_cells])
    if op.differentiable and not constant:
        for t in inputs:
            if t._requires_grad:
                if grad_mode():
                    autograd.attach(op, inputs, (output,) if single else output)
                break
    return output


# ---- helpers shared by infer methods ---------------------------------------------------

FLOAT32 = np.dtype(np.float32)
HALF = np.dtype(np.float16)
FLOATS = (FLOAT32, np.dtype(np.float64), HALF)


def in_float32(forward: Callable, xp, *arrays):
    """``forward(xp, *arrays)`` with its float16 arrays widened to float32, and its float32
    results rounded back to float16 once at the end.

    PyTorch's CPU kernels compute float16 in float32 (their "opmath" type), so a sum, a
    mean, a variance or a chain of steps inside one kernel collects no float16 rounding
    error on the way. The ops whose kernels reduce (normalization, softmax, losses,
    pooling) or chain several roundings (sigmoid, gelu and their gradients) run their
    float16 inputs through this."""
    wide = [a.astype(FLOAT32) if a.dtype is HALF else a for a in arrays]
    out = forward(xp, *wide)
    if type(out) is tuple:
        return tuple([o.astype(HALF) if o.dtype == FLOAT32 else o for o in out])
    return out.astype(HALF)


def float32_copies(*cells: Cell) -> int:
    """The bytes ``in_float32`` allocates for ``cells``, a kernel's inputs, the first the
    size of its result: a float32 copy of each float16 one and the float32 result before
    it is rounded; 0 when none is float16 (part of the ``workspace`` of an op that runs
    float16 through ``in_float32``)."""
    for cell in cells:  # (a loop: a generator's ``any`` costs more than the rest)
        if cell.dtype is HALF:
            break
    else:
        return 0
    widened = sum(math.prod(c.shape) for c in cells if c.dtype is HALF)
    return 4 * (widened + math.prod(cells[0].shape))


def same_dtype(op: Op, *cells: Cell) -> np.dtype:
    dtype = cells[0].dtype
    for c in cells:
        if c.dtype is not dtype and c.dtype != dtype:
            raise op.error("dtypes differ; convert one input with astype", *cells, kind=DTypeError)
    return dtype


def float_dtype(op: Op, *cells: Cell) -> np.dtype:
    if len(cells) == 1:
        dtype = cells[0].dtype
        if dtype is FLOATS[0]:
            return dtype
    dtype = same_dtype(op, *cells)
    if dtype is not FLOATS[0] and dtype not in FLOATS:
        raise op.error(
            f"needs floating-point inputs, got {dtype}; convert with astype(md.float32)",
            *cells,
            kind=DTypeError,
        )
    return dtype


def expect_tensor(op_name: str, value, what: str = "x") -> Tensor:
    """``value`` itself if it is a Tensor; else a TypeError naming the op and the argument."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{op_name}: {what} must be a Tensor, got {type(value).__name__}")
    return value


def host_values(t: Tensor) -> np.ndarray:
    """``t``'s values on the host, read through its allocator (rebuilt first if it was
    evicted; a ``read`` in a recorded trace). An op's function checks the values the op
    needs valid with these before it calls ``apply``: ``infer`` sees metadata only."""
    cell = t.cell
    return backend.to_host(cell.storage.allocator.read(cell))


def check_in_range(op: Op, indices: Any, count: int, what: str, unit: str, *cells: Cell) -> None:
    """Raise an IndexError naming ``op`` and ``cells`` if an integer of the tensor
    ``indices`` (read through the allocator) is outside [0, count): a ``what`` (index,
    target) out of range for ``count`` ``unit`` (rows, classes)."""
    values = host_values(indices)
    outside = (values < 0) | (values >= count)
    if outside.any():
        bad = int(values[outside].reshape(-1)[0])
        raise op.error(
            f"{what} {bad} is out of range for {count} {unit} (valid: 0..{count - 1})",
            *cells,
            kind=IndexError,
        )


def expect_number(op_name: str, value, what: str) -> float:
    """``value`` as a float if it is a real number (not a bool); else a TypeError naming the
    op and the argument."""
    if type(value) is float:  # the usual case, without the ABC check (slow)
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{op_name}: {what} must be a number, got {type(value).__name__} {value!r}")
    return float(value)


def axis_or_dim(op_name: str, axis, dim, default, names: str = "axis or dim"):
    """The axis given by NumPy's name or by PyTorch's (``dim``, ``start_dim``), not both."""
    if dim is None:
        return axis
    if axis is not default and not (type(axis) is type(default) and axis == default):
        raise TypeError(f"{op_name}: give {names} (PyTorch's name for it), not both")
    return dim


def axis_in_range(op_name: str, axis, ndim: int, shape: tuple[int, ...]) -> int:
    """``axis`` as a non-negative int below ``ndim`` (NumPy's range: -ndim <= axis < ndim)."""
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool):
        raise TypeError(f"{op_name}: axis must be an int, got {type(axis).__name__}")
    if not ndim:
        raise ShapeError(f"{op_name}: axis {axis} is out of range for 0 dimensions (shape ())")
    if not -ndim <= axis < ndim:
        raise ShapeError(
            f"{op_name}: axis {axis} is out of range for shape {shape} (valid: {-ndim}..{ndim - 1})"
        )
    return int(axis) % ndim


def broadcast_shape(op: Op, *cells: Cell) -> tuple[int, ...]:
    shape = cells[0].shape
    for c in cells:
        if c.shape != shape:
            break
    else:
        return shape
    try:
        return tuple(np.broadcast_shapes(*(c.shape for c in cells)))
    except ValueError:
        raise op.error("shapes cannot be broadcast together", *cells) from None


def normalize_axis(op: Op, axis: int, ndim: int, *cells: Cell) -> int:
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool):
        raise op.error(f"axis must be an int, got {axis!r}", *cells, kind=TypeError)
    if not -ndim <= axis < ndim:
        raise op.error(f"axis {axis} is out of range for {ndim} dimensions", *cells)
    return axis % ndim


def normalize_axes(op: Op, axis, ndim: int, *cells: Cell) -> tuple[int, ...]:
    """None -> all axes; an int or a sequence -> sorted, non-negative, unique axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int | np.integer) and not isinstance(axis, bool):
        axes: tuple = (axis,)
    elif isinstance(axis, tuple | list) and all(
        isinstance(a, int | np.integer) and not isinstance(a, bool) for a in axis
    ):
        axes = tuple(axis)
    else:
        raise op.error(
            f"axis must be None, an int or a tuple of ints, got {axis!r}", *cells, kind=TypeError
        )
    out = sorted({normalize_axis(op, int(a), ndim, *cells) for a in axes})
    if len(out) != len(axes):
        raise op.error(f"axis {axis} repeats an axis", *cells)
    return tuple(out)


@functools.lru_cache(maxsize=256, typed=True)
def shared_op(cls: type[Op], *args: Hashable) -> Op:
    """One op object per class and arguments: ops hold static attributes only, so a
    layer's every call can share one (and skip checking its arguments again), and so
    can the gradient op it makes. Bounded (LRU): a network uses a few configurations.
    Arguments equal in value but not in type are different ops (``typed``): a float16
    scalar's gradient computes in float16, a float64 one's in float64, and
    ``np.float16(3) == np.float64(3)``."""
    return cls(*args)
