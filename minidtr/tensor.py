"""``Tensor``: the user's handle on a value.

A Tensor is a thin handle: the value lives in a cell (its ``Storage``, or a
``ViewCell`` of another value's storage), and a Tensor adds the autograd fields.
Each live Tensor object is one *external reference* to its storage: when the
last one is garbage collected the runtime's deallocation policy runs
(by default the buffer is evicted at once, and its recipe kept while an
evicted child may still need it). Ops, recipes and the event log never hold
Tensors, only cells, so user code decides what is alive.
"""

from __future__ import annotations

import math
import numbers
import warnings
import weakref
from typing import Any

import numpy as np

from . import backend
from .arguments import (
    DEFAULT_DTYPE,
    check_integer_fill,
    checked_device,
    checked_dtype,
    python_data,
    shape_of,
    size_of,
)
from .runtime.registry import allocator_for
from .runtime.storage import Cell

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
float16 = np.dtype(np.float16)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)
uint8 = np.dtype(np.uint8)


class Tensor:
    __slots__ = ("cell", "_grad", "_requires_grad", "grad_fn", "__weakref__")
    __array_priority__ = 1000  # cupy_array * tensor -> Tensor.__rmul__ (NumPy: __array_ufunc__)
    __hash__ = object.__hash__

    def __init__(self, cell: Cell, requires_grad: bool = False):
        self.cell = cell
        self._grad: Tensor | None = None
        self.grad_fn = None
        self._requires_grad = False
        if requires_grad:
            self.requires_grad = True
        storage = cell.storage if cell.is_view else cell
        storage.external_refs += 1  # Allocator.add_ref, inlined: this runs for every op
        allocator = storage.allocator
        if storage.buffer is None:
            with allocator.lock:
                allocator.lifetimes.referenced_evicted(storage)
        if allocator.observer is not None:
            allocator.observer.on_add_ref(cell)

    def __del__(self):
        try:
            cell = self.cell
            storage = cell.storage if cell.is_view else cell
            allocator = storage.allocator
            if storage.external_refs > 1 and allocator.observer is None:
                storage.external_refs -= 1  # another handle lives on: Allocator.release, inlined
            else:
                lock = allocator.lock  # (a death in another thread waits for the op under way)
                lock.acquire()
                try:
                    allocator.release(cell)
                finally:
                    lock.release()
        except Exception:  # interpreter shutdown, or a half-built tensor
            pass

    # ---- metadata ----------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.cell.shape

    @property
    def dtype(self) -> np.dtype:
        return self.cell.dtype

    @property
    def device(self) -> str:
        return self.cell.device

    @property
    def ndim(self) -> int:
        return len(self.cell.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.cell.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.cell.nbytes

    @property
    def storage(self):
        """The Storage holding this value (shared with every view of it)."""
        return self.cell.storage

    @property
    def is_resident(self) -> bool:
        return self.cell.storage.buffer is not None

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self.grad_fn is not None and not flag:
            raise RuntimeError("requires_grad: use detach() on a non-leaf tensor")
        if flag and self.cell.dtype.kind != "f":
            raise TypeError(
                f"only floating-point tensors can require grad, not {self.cell.dtype} "
                "(convert with astype(md.float32) first)"
            )
        self._requires_grad = bool(flag)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad(self) -> Tensor | None:
        """The gradient ``backward()`` accumulated: for a leaf that requires grad, or a
        tensor that called ``retain_grad()``. Read on any other non-leaf, it is None and
        warns (a UserWarning, once per line under Python's default filter), as PyTorch."""
        fn = self.grad_fn
        if fn is not None and self._grad is None and not self.retains_grad:
            warnings.warn(
                f"the .grad of a tensor that is not a leaf (made by {fn.op.name}) is not "
                "filled by backward(): call .retain_grad() on it before backward() to keep "
                "its gradient, or read the .grad of the leaf tensors it was computed from",
                UserWarning,
                stacklevel=2,
            )
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f".grad must be a Tensor or None, got {type(value).__name__}")
            if (value.shape, value.dtype, value.device) != (self.shape, self.dtype, self.device):
                raise ValueError(
                    f".grad must match its tensor: shape {self.shape} {self.dtype} on "
                    f"{self.device!r}, got {value.shape} {value.dtype} on {value.device!r}"
                )
        self._grad = value

    def retain_grad(self) -> None:
        """Have ``backward()`` fill this non-leaf's ``.grad`` too (a leaf's is filled anyway).
        The gradient is kept as a constant, counted in memory, until ``.grad`` is dropped."""
        if not self._requires_grad:
            raise RuntimeError("retain_grad: this tensor does not require grad")
        fn = self.grad_fn
        if fn is None or self.retains_grad:
            return
        if fn.retained is None:
            fn.retained = []
        fn.retained.append(weakref.ref(self))

    @property
    def retains_grad(self) -> bool:
        """Whether this non-leaf called ``retain_grad()``."""
        fn = self.grad_fn
        if fn is None or fn.retained is None:
            return False
        return any(ref() is self for ref in fn.retained)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    # ---- values ----------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """A host copy of the value (rematerialized first if it was evicted)."""
        array = self.cell.storage.allocator.read(self.cell)
        if self.device == "cpu":
            return np.array(array, copy=True)
        return backend.to_host(array)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """A NumPy ufunc given a Tensor. ``array (op) tensor`` calls the ufunc (NumPy's
        operators do): it is the tensor's reflected operator, a Tensor. Any other ufunc
        (``np.tanh(x)``) on a tensor that requires grad is refused, as PyTorch refuses it:
        its result would be an array, and the gradient through it silently lost. On other
        tensors it computes on their values, an array."""
        if method == "__call__" and not kwargs and len(inputs) == 2 and inputs[1] is self:
            reflected = REFLECTED.get(ufunc)
            if reflected is not None:
                return getattr(self, reflected)(inputs[0])
        if any(isinstance(x, Tensor) and x.requires_grad for x in inputs):
            raise TypeError(
                f"np.{ufunc.__name__} on a Tensor that requires grad would drop its gradient "
                "(the result is an array): use minidtr's op, or .detach() the tensor first"
            )
        values = [x.numpy() if isinstance(x, Tensor) else x for x in inputs]
        return getattr(ufunc, method)(*values, **kwargs)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """``np.asarray(x)``: a host copy of the value, as ``numpy()``. A value on a GPU is
        not copied implicitly (as CuPy refuses to): call ``numpy()``."""
        if copy is False:
            raise ValueError("np.asarray(tensor, copy=False): a tensor's value is always copied")
        if self.device != "cpu":
            raise TypeError(
                f"np.asarray: the tensor is on {self.device!r}; copy it to the host with .numpy()"
            )
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __reduce_ex__(self, protocol):
        """``pickle``, ``copy.copy`` and ``copy.deepcopy`` of a leaf: a new tensor with the
        same value, dtype, device, ``requires_grad`` and gradient. A computed tensor has a
        recipe that reads other storages, which a copy cannot carry: detach it first."""
        if self.grad_fn is not None:
            raise TypeError(
                f"cannot copy or pickle a tensor computed by {self.grad_fn.op.name!r} (shape "
                f"{self.shape}); copy its value with .detach(), or keep the tensor itself: "
                "values are never changed in place"
            )
        grad = None if self._grad is None else self._grad.numpy()
        return _rebuild_leaf, (self.numpy(), self.device, self.requires_grad, grad)

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"`` formats a single-element tensor's value."""
        if not spec:
            return str(self)
        if self.size != 1:
            raise ValueError(
                f"format spec {spec!r} needs a single-element tensor, got shape {self.shape}"
            )
        return format(self.item(), spec)

    def item(self) -> float | int | bool:
        if self.size != 1:
            raise ValueError(f"item() needs a single-element tensor, got shape {self.shape}")
        return self.numpy().item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def detach(self) -> Tensor:
        """The same value (shared storage) without a backward graph."""
        return Tensor(self.cell)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        self.requires_grad = flag
        return self

    def backward(self, grad: Tensor | None = None, retain_graph: bool = False) -> None:
        from .autograd import backward

        backward(self, grad, retain_graph)

    def pin(self) -> Tensor:
        """Never evict this value's storage (rematerializing it now) until ``unpin``."""
        self.cell.storage.allocator.pin(self.cell.storage)
        return self

    def unpin(self) -> Tensor:  # undoes one pin: pins are counted per storage
        self.cell.storage.allocator.unpin(self.cell.storage)
        return self

    def assign(self, value: Tensor) -> None:
        """Point this handle at ``value``'s storage (copy-on-write update of a leaf).

        The old storage is untouched, so every recipe that read the old value still
        recomputes it exactly. Used by optimizers and running statistics. When the old
        value dies, the resident values whose recipes still read it become constants
        instead, if together no larger (``Lifetimes.free_dead_constant``): a state
        carried across training steps does not keep every step's old parameters.
        """
        if self.grad_fn is not None:
            raise RuntimeError("assign() is for leaf tensors (parameters, buffers)")
        if not isinstance(value, Tensor):
            raise TypeError(f"assign: value must be a Tensor, got {type(value).__name__}")
        old, new = self.cell, value.cell
        if new.shape != old.shape or new.dtype != old.dtype:
            raise ValueError(
                f"assign: value has shape {new.shape} {new.dtype}, the tensor "
                f"{old.shape} {old.dtype}"
            )
        self.cell = new
        (new.storage if new.is_view else new).allocator.add_ref(new)
        storage = old.storage if old.is_view else old
        with storage.allocator.lock:
            storage.allocator.lifetimes.supersede(storage)  # recipes that read it may go with it
            storage.allocator.release(old)

    def __repr__(self) -> str:
        if not self.is_resident:
            body = f"<evicted, shape={self.shape}>"
        else:
            body = np.array2string(self.numpy(), precision=4, threshold=20, prefix="tensor(")
        extras = f", dtype={self.dtype}" if self.dtype != DEFAULT_DTYPE else ""
        if self.device != "cpu":
            extras += f", device={self.device!r}"
        if self.grad_fn is not None:
            extras += f", grad_fn={self.grad_fn.op.name}"
        elif self.requires_grad:
            extras += ", requires_grad=True"
        return f"tensor({body}{extras})"

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    # ---- operators (functional ops in minidtr.ops) -------------------------------------------

    # ``+ - * / ** @``, unary ``-`` and ``[]`` are the functional ops themselves, bound in
    # ops/__init__.py (a method that only called one cost each ``a + b`` a Python frame);
    # the reflected ones swap the operands.

    def __radd__(self, other):
        return F.add(other, self)

    def __rsub__(self, other):
        return F.sub(other, self)

    def __rmul__(self, other):
        return F.mul(other, self)

    def __rtruediv__(self, other):
        return F.div(other, self)

    def __rpow__(self, other):
        return F.pow(other, self)

    def __rmatmul__(self, other):
        return F.matmul(other, self)

    def __lt__(self, other):
        return F.less(self, other)

    def __le__(self, other):
        return F.less_equal(self, other)

    def __gt__(self, other):
        return F.greater(self, other)

    def __ge__(self, other):
        return F.greater_equal(self, other)

    def __eq__(self, other):  # type: ignore[override]
        if other is None or isinstance(other, str):  # not equal, as in PyTorch (and `in`)
            return NotImplemented
        return F.equal(self, other)

    def __ne__(self, other):  # type: ignore[override]
        if other is None or isinstance(other, str):
            return NotImplemented
        return F.not_equal(self, other)

    def __contains__(self, value) -> bool:
        """``value in x``: whether any element equals it (PyTorch's rule; iterating the
        rows of a 2-d tensor asked each row for a truth value)."""
        return bool((self == value).numpy().any())

    # ---- methods ----------------------------------------------------------------------

    # a method that is a functional op with the tensor first (``x.sum(axis)``, ``x.abs()``)
    # is the op itself, bound in ops/__init__.py, as the operators are

    def reshape(self, *shape) -> Tensor:
        return F.reshape(self, F.shape.target_shape(self, shape))

    def view(self, *shape) -> Tensor:
        """PyTorch's view: a reshape here, as values never change in place."""
        return F.reshape(self, F.shape.target_shape(self, shape, "view"))

    def transpose(self, *axes) -> Tensor:
        """NumPy's: ``axes`` a permutation of all the axes (none: reversed). Two axes that
        leave a 2-d tensor as it is (``transpose(0, 1)``, PyTorch's swap) are refused."""
        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        identity = ((0, 1), (-2, -1), (0, -1), (-2, 1))  # of a matrix's two axes
        if self.ndim == 2 and axes in identity:
            raise ValueError(
                f"transpose{axes}: axes are a permutation of all the axes, as in NumPy, so "
                "this one leaves the tensor as it is (PyTorch's transpose(0, 1) swaps the "
                "two); for the swap write x.T or x.transpose(1, 0)"
            )
        return F.transpose(self, axes or None)

    @property
    def T(self) -> Tensor:
        return F.transpose(self)

    def astype(self, dtype) -> Tensor:
        return F.astype(self, dtype)

    def exp(self) -> Tensor:
        return F.exp(self)

    def log(self) -> Tensor:
        return F.log(self)

    def sqrt(self) -> Tensor:
        return F.sqrt(self)

    def relu(self) -> Tensor:
        return F.relu(self)

    def sigmoid(self) -> Tensor:
        return F.sigmoid(self)

    def tanh(self) -> Tensor:
        return F.tanh(self)


# ---- creation ------------------------------------------------------------------------------


def _rebuild_leaf(
    value: np.ndarray, device: str, requires_grad: bool, grad: np.ndarray | None
) -> Tensor:
    """A copied or unpickled leaf tensor (``Tensor.__reduce_ex__``), in the current runtime."""
    copied = tensor(value, requires_grad=requires_grad, device=device)
    if grad is not None:
        copied.grad = tensor(grad, device=device)
    return copied


def constant(
    make_array,
    shape: tuple[int, ...],
    dtype,
    device: str,
    requires_grad: bool = False,
    name: str = "constant",
) -> Tensor:
    """A tensor over a new constant storage whose buffer ``make_array()`` creates
    (after the allocator has made room for it)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(map(int, shape)) * dtype.itemsize
    storage = allocator_for(device).add_constant(make_array, nbytes, name, tuple(shape), dtype)
    return Tensor(storage, requires_grad)


def tensor(data: Any, dtype=None, requires_grad: bool = False, device: str = "cpu") -> Tensor:
    """A new tensor holding a copy of ``data`` (array, nested lists, scalar).

    Without ``dtype``, NumPy arrays keep theirs and Python data becomes float32,
    int64 or bool.
    """
    if isinstance(data, Tensor):
        raise TypeError("tensor(): data is already a Tensor; use .detach() to share it")
    try:
        xp = backend.xp_for(device)  # (array_module's call costs each scalar operand a frame)
    except ValueError:
        device = checked_device(device, "tensor()")
        xp = backend.xp_for(device)
    source = backend.to_host(data) if device == "cpu" and backend.is_device_array(data) else data
    array_like = type(source) is not np.ndarray and hasattr(source, "__array__")
    if array_like and not backend.is_device_array(source):  # a PyTorch tensor, say
        source = np.asarray(source)
    if not hasattr(source, "dtype") or not hasattr(source, "shape"):
        source = python_data(source, dtype)
    dtype = checked_dtype(source.dtype if dtype is None else dtype, "tensor()")
    if requires_grad and dtype.kind != "f":
        raise TypeError(f"tensor(): only floating-point tensors can require grad, not {dtype}")
    shape = tuple(np.shape(source))
    return constant(
        lambda: xp.array(source, dtype=dtype, copy=True, order="C"),
        shape,
        dtype,
        device,
        requires_grad,
    )


def full(
    shape, value: float, dtype=DEFAULT_DTYPE, requires_grad: bool = False, device: str = "cpu"
) -> Tensor:
    """A tensor of ``shape`` filled with ``value``; ``dtype=None`` is the default float32."""
    return _filled(shape, value, dtype, requires_grad, device, "full")


def _filled(shape, value, dtype, requires_grad: bool, device: str, where: str) -> Tensor:
    shape = shape_of(shape, where)
    dtype = checked_dtype(DEFAULT_DTYPE if dtype is None else dtype, where)
    if not isinstance(value, numbers.Real | np.bool_):
        raise TypeError(f"{where}: value must be a number, got {type(value).__name__} {value!r}")
    if requires_grad and dtype.kind != "f":
        raise TypeError(f"{where}: only floating-point tensors can require grad, not {dtype}")
    if dtype.kind in "iu" and not isinstance(value, bool | np.bool_):
        check_integer_fill(where, value, dtype)
    device = checked_device(device, where)
    xp = backend.xp_for(device)
    return constant(lambda: xp.full(shape, value, dtype=dtype), shape, dtype, device, requires_grad)


def zeros(*size, dtype=DEFAULT_DTYPE, requires_grad: bool = False, device: str = "cpu") -> Tensor:
    """Zeros of ``size``: ``zeros(2, 3)`` or ``zeros((2, 3))``, as PyTorch's."""
    return _filled(size_of(size, "zeros"), 0, dtype, requires_grad, device, "zeros")


def ones(*size, dtype=DEFAULT_DTYPE, requires_grad: bool = False, device: str = "cpu") -> Tensor:
    """Ones of ``size``: ``ones(2, 3)`` or ``ones((2, 3))``, as PyTorch's."""
    return _filled(size_of(size, "ones"), 1, dtype, requires_grad, device, "ones")


def zeros_like(x: Tensor) -> Tensor:
    return full(x.shape, 0, x.dtype, device=x.device)


def ones_like(x: Tensor) -> Tensor:
    return full(x.shape, 1, x.dtype, device=x.device)


def arange(start, stop=None, step=1, dtype=None, device: str = "cpu") -> Tensor:
    """Evenly spaced values in [start, stop), as PyTorch's ``arange``: int64 when start,
    stop and step are all ints, otherwise float32 (the default float) unless ``dtype``
    says otherwise. A step of the wrong sign gives an empty tensor (as NumPy)."""
    if stop is None:
        start, stop = 0, start
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"arange: {name} must be a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"arange: {name} must be finite, got {value}")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    integral = all(isinstance(v, numbers.Integral) for v in (start, stop, step))
    if dtype is None:
        dtype = int64 if integral else DEFAULT_DTYPE
    dtype = checked_dtype(dtype, "arange")
    steps = -(-(stop - start) // step) if integral else math.ceil((stop - start) / step)
    n = max(0, int(steps))  # (a Python int: NumPy integers gave a shape of np.int64)
    device = checked_device(device, "arange")
    xp = backend.xp_for(device)
    if integral and dtype.kind in "iu":
        return constant(lambda: xp.arange(start, stop, step, dtype=dtype), (n,), dtype, device)
    return constant(
        lambda: (xp.arange(n, dtype=np.float64) * step + start).astype(dtype),
        (n,),
        dtype,
        device,
    )


# ``array (ufunc) tensor``: the tensor's reflected operator (``Tensor.__array_ufunc__``)
REFLECTED = {
    np.add: "__radd__",
    np.subtract: "__rsub__",
    np.multiply: "__rmul__",
    np.true_divide: "__rtruediv__",
    np.power: "__rpow__",
    np.matmul: "__rmatmul__",
    np.equal: "__eq__",
    np.not_equal: "__ne__",
    np.less: "__gt__",
    np.less_equal: "__ge__",
    np.greater: "__lt__",
    np.greater_equal: "__le__",
}

from . import ops as F  # noqa: E402  (ops import Tensor; bound after the class exists)
