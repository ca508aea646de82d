"""Type promotion and conversion: how operands that are not tensors of one dtype
become tensors for an elementwise op, and ``astype``.

The rules (docs/ops.md): tensor operands must share one dtype (convert with
``astype``); a Python (or NumPy) scalar is "weak", as in PyTorch and NumPy 2: it
takes the tensor's dtype unless it is of a higher kind (bool < int < float), in
which case the result is int64 (an int with a bool tensor) or float32, the default
float (a float with an int or bool tensor). Ops whose result is a float (``/``,
exp, log, ...) first convert int and bool tensors to float32, as PyTorch does.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..runtime.storage import Cell
from ..tensor import DEFAULT_DTYPE, Tensor, int64, tensor
from .op import Op, apply, expect_tensor

Scalar = int | float | bool | np.number | np.bool_


KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2}


def scalar_kind(value) -> str:
    """'b', 'i' or 'f' for a Python or NumPy real scalar."""
    if isinstance(value, bool | np.bool_):
        return "b"
    if isinstance(value, numbers.Integral):
        return "i"
    if isinstance(value, numbers.Real):
        return "f"
    raise TypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")


def is_scalar(value) -> bool:
    return isinstance(value, Scalar) and not isinstance(value, np.complexfloating)


def scalar_dtype(kinds) -> np.dtype:
    """The dtype of an op whose operands are all scalars: bool, int64 or float32."""
    top = max(kinds, key=KIND_RANK.__getitem__)
    return {"b": np.dtype(np.bool_), "i": int64, "f": DEFAULT_DTYPE}[top]


def promoted(dtype: np.dtype, kind: str) -> np.dtype:
    """A tensor dtype after meeting a scalar of ``kind``: unchanged unless the scalar's kind
    ranks higher (then int64 for an int, float32 for a float)."""
    if KIND_RANK[kind] <= KIND_RANK[dtype.kind]:
        return dtype
    return int64 if kind == "i" else DEFAULT_DTYPE


def held_scalar(value, dtype: np.dtype) -> np.generic:
    """A multiplier or divisor as an op keeps it for a tensor of ``dtype``: of that dtype,
    but float32 for float16 (the op computes in float32 and rounds once, as PyTorch's CPU
    kernels do; a float16 scalar rounds first, and ``x / 70000`` or ``x * 1e-8`` gave 0)."""
    return (np.float32 if dtype == np.float16 else dtype.type)(value)


def check_fits(name: str, value, dtype: np.dtype) -> None:
    """Refuse an int scalar that does not fit an integer ``dtype``."""
    if dtype.kind in "iu" and not isinstance(value, bool | np.bool_):
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise OverflowError(
                f"{name}: the scalar {value} does not fit the tensor's dtype {dtype} "
                f"({info.min}..{info.max}); convert the tensor with astype first"
            )


def scalar_tensor(name: str, value, dtype: np.dtype, device: str) -> Tensor:
    """A 0-d constant of ``dtype`` holding a scalar, refusing an int that does not fit."""
    check_fits(name, value, dtype)
    return tensor(value, dtype=dtype, device=device)


def operands(name: str, *values, device: str | None = None) -> list[Tensor]:
    """Tensors for an elementwise op's operands, following the promotion rules above.

    Arrays and lists become tensors of their own dtype (as ``md.tensor`` makes them);
    scalars become 0-d constants; an int/bool tensor meeting a float scalar (or a bool
    tensor meeting an int scalar) is converted first. Tensors of differing dtypes are
    left for the op to reject.
    """
    for v in values:
        if not isinstance(v, Tensor):
            break
    else:
        return list(values)
    out: list = []
    for v in values:
        if isinstance(v, Tensor) or is_scalar(v):
            out.append(v)
        elif isinstance(v, np.ndarray | list | tuple):
            out.append(None)
        else:
            raise TypeError(
                f"{name}: expected a Tensor, a scalar or an array, got {type(v).__name__}"
            )
    tensors = [v for v in out if isinstance(v, Tensor)]
    if not tensors and None not in out:
        dtype = scalar_dtype([scalar_kind(v) for v in values])
        return [scalar_tensor(name, v, dtype, device or "cpu") for v in values]
    device = tensors[0].device if tensors else (device or "cpu")
    for i, v in enumerate(values):
        if out[i] is None:
            out[i] = tensor(v, device=device)
    tensors = [v for v in out if isinstance(v, Tensor)]
    dtype = tensors[0].dtype
    if any(t.dtype != dtype for t in tensors):
        return [v if isinstance(v, Tensor) else scalar_tensor(name, v, dtype, device) for v in out]
    for v in out:
        if not isinstance(v, Tensor):
            dtype = promoted(dtype, scalar_kind(v))
    return [
        (v if v.dtype == dtype else astype(v, dtype))
        if isinstance(v, Tensor)
        else scalar_tensor(name, v, dtype, device)
        for v in out
    ]


def as_float(name: str, x) -> Tensor:
    """``x`` for an op with a float result: int and bool tensors become float32."""
    if isinstance(x, Tensor) and x.cell.dtype.kind == "f":
        return x
    return astype(expect_tensor(name, x), DEFAULT_DTYPE)


class Astype(Op):
    """A dtype conversion. Only a float result carries a gradient (back to the input's
    float dtype): integer and bool values are not differentiable."""

    name = "astype"

    def __init__(self, dtype):
        from ..tensor import checked_dtype

        self.dtype = checked_dtype(dtype, "astype")

    def infer(self, x: Cell):
        return [(x.shape, self.dtype)]

    def forward(self, xp, x):
        return x.astype(self.dtype)

    def backward(self, ctx, g):
        return astype(g, ctx.in_dtypes[0])


def astype(x: Tensor, dtype) -> Tensor:
    return apply(Astype(dtype), expect_tensor("astype", x))
