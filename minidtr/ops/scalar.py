"""A tensor and a Python scalar: ``x * 0.5``, ``1 - p``, ``loss / n``, ``y + 1.0``, ``x ** 2``.

The scalar is an attribute of the op, as a dropout's seed is: no constant tensor is
made for it, so it costs no storage, no allocation and no handle, in a live run as in
a trace (whose CALL has one argument). It is kept as a NumPy scalar of the result's
dtype, so ``x * s`` computes what ``x * tensor(s)`` would (the same ufunc on the same
dtypes), and a recomputation the same bits; but a float16 tensor's multiplier or divisor
is a float32, and the op computes in float32 and rounds once to float16, as PyTorch's
CPU kernels do (``promotion.held_scalar``; its ``+``, ``-`` and ``**`` round the scalar
to float16 first, as here).

The promotion rules are ``promotion.py``'s (docs/ops.md): the scalar takes the tensor's
dtype unless it is of a higher kind; the tensor is converted first when the result's
dtype is not its own (an int tensor and a float scalar give float32), and true division
of integers gives float32.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime.storage import Cell
from ..tensor import DEFAULT_DTYPE, Tensor
from .op import DTypeError, Op, apply, shared_op
from .promotion import astype, check_fits, held_scalar, is_scalar, promoted, scalar_kind

KINDS = ("add", "sub", "rsub", "mul", "div", "rdiv", "pow")
WIDE_KINDS = ("mul", "div", "rdiv")  # a float16 tensor's scalar is a float32 (PyTorch's)


class ScalarArith(Op):
    """``x (kind) s``, or ``s - x`` (``rsub``) and ``s / x`` (``rdiv``), for a scalar
    ``s`` of ``dtype``, the dtype of ``x`` and of the result."""

    def __init__(self, kind: str, value, dtype: np.dtype):
        self.kind = kind
        self.name = f"{kind}_scalar"
        self.dtype = np.dtype(dtype)
        wide = kind in WIDE_KINDS
        self.scalar = held_scalar(value, self.dtype) if wide else self.dtype.type(value)
        self.rounds = wide and self.dtype == np.float16  # computes in float32: rounds at the end
        self.has_workspace = self.rounds  # the others call no ``workspace`` at every application
        if kind in ("rdiv", "pow"):
            self.retain_inputs = (0,)  # their gradients read x

    def infer(self, x: Cell):
        if x.dtype != self.dtype:  # the functions below convert first: a bug if not
            raise self.error(f"expects a {self.dtype} tensor", x, kind=DTypeError)
        return [(x.shape, self.dtype)]

    def workspace(self, x: Cell) -> int:
        """The float32 result a float16 product or quotient is rounded from."""
        return 4 * math.prod(x.shape)

    def forward(self, xp, x):
        s, kind = self.scalar, self.kind
        if kind == "add":
            return x + s
        if kind == "sub":
            return x - s
        if kind == "rsub":
            return s - x
        if self.rounds:  # float16 times or over a float32: computed in float32, rounded once
            return (x * s if kind == "mul" else x / s if kind == "div" else s / x).astype(x.dtype)
        if kind == "mul":
            return x * s
        if kind == "div":
            return x / s
        if kind == "rdiv":
            return s / x
        return x**s

    def cost(self, in_metas, out_metas):
        flops, nbytes = super().cost(in_metas, out_metas)
        return (16 * flops if self.kind == "pow" else flops), nbytes

    def backward(self, ctx, g):
        kind, value = self.kind, self.scalar
        if kind in ("add", "sub"):
            return g
        if kind == "rsub":
            from .arithmetic import neg

            return neg(g)
        if kind == "mul":
            return scalar_op("mul", g, value)
        if kind == "div":
            return scalar_op("div", g, value)
        x = ctx.inputs[0]
        if kind == "rdiv":
            return apply(shared_op(ScalarDivisorGrad, value), x, g)
        return apply(shared_op(ScalarPowGrad, value), x, g)


class ScalarDivisorGrad(Op):
    """dL/dx of ``s / x``: ``-(g * ((s / x) / x))``, as ``DivisorGrad`` computes it for a
    tensor numerator, in one buffer: the output's, or for a float16 ``x`` (whose ``s`` is
    a float32) a float32 one rounded once at the end, its workspace."""

    name = "rdiv_scalar_grad"
    differentiable = False

    def __init__(self, value):
        self.scalar = value

    def infer(self, x: Cell, g: Cell):
        return [(g.shape, g.dtype)]

    def workspace(self, x: Cell, g: Cell) -> int:
        """The float32 gradient a float16 one is rounded from."""
        return 4 * math.prod(g.shape) if g.dtype == np.float16 else 0

    def forward(self, xp, x, g):
        dtype = xp.result_type(self.scalar, x, g)
        out = xp.divide(self.scalar, x, out=xp.empty(g.shape, dtype=dtype))
        xp.divide(out, x, out=out)
        xp.multiply(g, out, out=out)
        xp.negative(out, out=out)
        return out.astype(g.dtype, copy=False)


class ScalarPowGrad(Op):
    """dL/dx of ``x ** s``: ``g * s * x ** (s - 1)``, 0 where s is 0 (as ``PowGrad``)."""

    name = "pow_scalar_grad"
    differentiable = False

    def __init__(self, value):
        self.scalar = value

    def infer(self, x: Cell, g: Cell):
        return [(g.shape, g.dtype)]

    def forward(self, xp, x, g):
        s = self.scalar
        if s == 0:
            return xp.zeros_like(g)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = x ** (s - 1)
            if not g.ndim or out.dtype != g.dtype:  # a 0-d power is a scalar, not a buffer
                return xp.asarray(g * (s * out), dtype=g.dtype)
            xp.multiply(s, out, out=out)  # in the power's buffer: the same products
            return xp.multiply(g, out, out=out)


def scalar_op(kind: str, x: Tensor, value) -> Tensor:
    """``x (kind) value`` for a scalar ``value``, after the promotion rules."""
    dtype = x.cell.dtype
    if type(value) is not float or dtype.kind != "f":  # a float on a float tensor: as it is
        dtype = result_dtype(kind, dtype, value)
        if x.cell.dtype != dtype:
            x = astype(x, dtype)
    if not value:  # a zero: its sign matters (x + -0.0 keeps a -0.0 that x + 0.0 does not)
        return apply(ScalarArith(kind, value, dtype), x)
    key = (kind, value, dtype)
    op = _OPS.get(key)
    if op is None:
        if len(_OPS) >= MAX_CACHED:
            _OPS.clear()
        op = _OPS[key] = ScalarArith(kind, value, dtype)
    return apply(op, x)


# One op per (kind, value, dtype), shared by every application (an op holds static
# attributes only): a loop's ``x * 0.5`` makes no op object per step.
_OPS: dict[tuple, ScalarArith] = {}
MAX_CACHED = 1024


def result_dtype(kind: str, dtype: np.dtype, value) -> np.dtype:
    """The dtype of ``x (kind) value`` for an ``x`` of ``dtype`` (promotion.py's rules),
    refusing what the tensor op would refuse."""
    if kind in ("sub", "rsub") and (dtype.kind == "b" or isinstance(value, bool | np.bool_)):
        what = f"a {dtype} tensor" if dtype.kind == "b" else f"the scalar {value!r}"
        raise DTypeError(f"sub: subtracting bool values is not supported, got {what}")
    dtype = promoted(dtype, scalar_kind(value))
    if kind in ("div", "rdiv") and dtype.kind != "f":
        dtype = DEFAULT_DTYPE
    check_fits(kind, value, dtype)
    if kind == "pow" and dtype.kind not in "iuf":
        raise DTypeError(
            f"pow: needs numeric inputs, got {dtype} (a tensor and the scalar {value!r})"
        )
    if kind == "pow" and dtype.kind in "iu" and value < 0:
        raise ValueError(
            f"pow: integers to negative integer powers are not allowed ({dtype} tensor to the "
            f"power {value}); convert to float"
        )
    return dtype


def tensor_and_scalar(a, b) -> tuple[Tensor, object, bool] | None:
    """(the tensor, the scalar, whether the scalar comes first) when one of ``a``, ``b``
    is a Tensor and the other a Python or NumPy real scalar; else None."""
    if type(a) is Tensor and (type(b) is float or type(b) is int or is_scalar(b)):
        return a, b, False
    if type(b) is Tensor and (type(a) is float or type(a) is int or is_scalar(a)):
        return b, a, True
    return None
