"""The checks of a tensor-making function's arguments (a dtype, a device, a shape, a
fill value): each error names the function it was given to (``where``), never NumPy
later."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from . import backend

DEFAULT_DTYPE = np.dtype(np.float32)  # what a tensor of Python floats holds


def checked_dtype(dtype, where: str) -> np.dtype:
    """``dtype`` as a NumPy dtype, if tensors can hold it: bool, integers or floats."""
    if dtype is None:  # NumPy reads None as float64
        raise TypeError(f"{where}: dtype must be a dtype such as md.float32, got None")
    try:
        dtype = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"{where}: {dtype!r} is not a dtype ({error})") from None
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{where}: tensors hold bool, integer or floating-point values, not {dtype}"
        )
    return dtype


def checked_device(device, where: str) -> str:
    """``device`` if its array module imports (``backend.xp_for``), an unknown device named
    as ``where``'s argument; None is "cpu", PyTorch's default device (a layer made with
    ``device=None`` by the ``factory_kwargs`` idiom)."""
    device = "cpu" if device is None else device
    try:
        backend.xp_for(device)
    except ValueError:
        raise ValueError(
            f"{where}: device must be one of {backend.DEVICES} (None: cpu), got {device!r}"
        ) from None
    return device


def shape_of(shape, where: str) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints) as a tuple of non-negative ints."""
    if type(shape) is tuple and all([type(d) is int and d >= 0 for d in shape]):
        return shape  # the usual case, without the ABC checks below (slow)
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = None if isinstance(shape, str) else tuple(shape)
    except TypeError:  # not iterable
        dims = None
    if dims is None or not all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims
    ):
        raise TypeError(f"{where}: shape must be non-negative ints, got {shape!r}")
    shape = dims
    if any(d < 0 for d in shape):
        raise ValueError(f"{where}: shape must be non-negative ints, got {shape}")
    return tuple(int(d) for d in shape)


def size_of(size: tuple, where: str) -> tuple[int, ...]:
    """The shape of a maker that takes PyTorch's ``*size``: ints, ``zeros(2, 3)``, or one
    sequence of them, ``zeros((2, 3))`` (``zeros(())``: a 0-d tensor)."""
    if not size:
        raise TypeError(f"{where}: missing the size, as {where}(2, 3) or {where}((2, 3))")
    if len(size) == 1 and not isinstance(size[0], numbers.Integral):
        return shape_of(size[0], where)
    for d in size:
        if not isinstance(d, numbers.Integral) or isinstance(d, bool):
            raise TypeError(
                f"{where}: size must be ints, {where}(2, 3) or {where}((2, 3)), and dtype, "
                f"requires_grad and device keyword arguments; got {size!r}"
            )
    return shape_of(size, where)


def check_integer_fill(where: str, value, dtype: np.dtype) -> None:
    """A fill value for an integer ``dtype`` is finite (NaN became the lowest int64) and its
    whole part fits (as PyTorch's ``full``; a fraction is cut, as there)."""
    if not math.isfinite(value):
        raise ValueError(f"{where}: value {value} cannot fill an integer tensor ({dtype})")
    info = np.iinfo(dtype)
    if not info.min <= int(value) <= info.max:
        raise OverflowError(f"{where}: value {value} does not fit {dtype} ({info.min}..{info.max})")


def python_data(data: Any, dtype) -> np.ndarray:
    """Python data (nested lists, scalars) as an array, converted once up front so that bad
    data fails here with a clear message and not later inside the allocator."""
    try:
        array = np.asarray(data)
        dtype = default_dtype(array) if dtype is None else checked_dtype(dtype, "tensor()")
        return np.asarray(data, dtype=dtype)
    except (ValueError, OverflowError) as error:
        raise TypeError(
            f"tensor(): cannot make a tensor from this {type(data).__name__}: {error}"
        ) from None


def default_dtype(array: np.ndarray) -> np.dtype:
    if array.dtype.kind == "f":
        return DEFAULT_DTYPE
    if array.dtype.kind in "iu":
        return np.dtype(np.int64)
    return checked_dtype(array.dtype, "tensor()")
