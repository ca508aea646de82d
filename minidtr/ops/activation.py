"""Float functions of one tensor (exp, log, sqrt) and the activations (relu, sigmoid,
tanh, gelu), with ``activation_grad``, the one gradient op of most of them.

Each is a ``Unary``: float in, float out (int and bool tensors are converted to
float32 first, by the functions below), ``flops`` per element for the cost model.
"""

from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor
from . import normal
from .arithmetic import div, mul
from .normal import INV_SQRT_2PI
from .op import (
    FLOAT32,
    HALF,
    DTypeError,
    Op,
    apply,
    expect_tensor,
    float32_copies,
    float_dtype,
    in_float32,
)
from .promotion import as_float

# elements up to which ``zero_where`` uses ``where``, and the activations and their
# gradients compute as expressions rather than in their output's buffer
SMALL_WHERE = 1024
SAME_SIZE_INT = {2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}


def zero_where(xp, drop, values):
    """``where(drop, +0.0, values)`` for a float array, as bit operations: the bits of
    ``values`` ANDed with all zeros or all ones. Gradient masks (relu, max pooling) are
    unpredictable, and ``where`` branches per element: this is ~6x faster on NumPy, and
    exact (+0.0 where dropped, even next to an inf or NaN that a product would spread).
    Small arrays, where the call overhead outweighs the branches, take ``where`` itself
    (the same bits)."""
    if drop.shape == values.shape:
        if values.size <= SMALL_WHERE:
            return xp.where(drop, backend.zero(xp, values.dtype), values)
    else:
        drop = xp.broadcast_to(drop, np.broadcast_shapes(drop.shape, values.shape))
    bits = SAME_SIZE_INT[values.dtype.itemsize]
    mask = drop.astype(bits)
    mask -= 1  # dropped 1 -> 0, kept 0 -> -1 (every bit set)
    mask &= values.view(bits)
    return mask.view(values.dtype)


def keep_mask(xp, y, g):
    """``zero_where(y <= 0, g)`` for same-shaped float arrays without a bool temporary: the
    integer mask is made by the comparison itself and becomes the result (``zero_where``
    makes the bool mask, then the integer one). The result is laid out as y, the value
    whose gradient it is: a batch-last image's gradient stays batch-last even where g
    came in another layout (the broadcast of a global pooling's gradient), so the kernels
    after it read both alike and need no copy to their layout."""
    bits = SAME_SIZE_INT[g.dtype.itemsize]
    mask = xp.empty_like(y, dtype=bits)
    xp.less_equal(y, backend.zero(xp, y.dtype), out=mask, casting="unsafe")
    mask -= 1  # dropped 1 -> 0, kept 0 -> -1 (every bit set)
    mask &= g.view(bits)
    return mask.view(g.dtype)


class Unary(Op):
    """A float -> float elementwise function; ``flops`` per element for the cost model."""

    flops = 1

    def infer(self, x: Cell):
        dtype = x.dtype
        if dtype is not FLOAT32:
            dtype = float_dtype(self, x)
        return [(x.shape, dtype)]

    def cost(self, in_metas, out_metas):
        flops, nbytes = super().cost(in_metas, out_metas)
        return flops * self.flops, nbytes


class Exp(Unary):
    name = "exp"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.exp(x)

    def backward(self, ctx, g):
        return mul(g, ctx.outputs[0])


class Log(Unary):
    name = "log"
    flops = 8
    retain_inputs = (0,)

    def forward(self, xp, x):
        return xp.log(x)

    def backward(self, ctx, g):
        return div(g, ctx.inputs[0])


class Sqrt(Unary):
    name = "sqrt"
    flops = 4
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.sqrt(x)

    def backward(self, ctx, g):
        return apply(ACTIVATION_GRADS["sqrt"], ctx.outputs[0], g)


class Relu(Unary):
    name = "relu"
    retain_outputs = (0,)

    def infer(self, x: Cell):
        if x.dtype.kind not in "iuf":
            raise self.error(f"needs a numeric input, got {x.dtype}", x, kind=DTypeError)
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return backend.relu(xp, x)

    def backward(self, ctx, g):
        return apply(ACTIVATION_GRADS["relu"], ctx.outputs[0], g)


def sigmoid_values(xp, x, out=None):
    """1 / (1 + exp(-x)), PyTorch's formula, in a new array or in ``out`` (``x`` itself: in
    place). Where exp(-x) overflows (x below about -88 in float32) the value is 0, as
    PyTorch's, without NumPy's overflow warning. (tanh(x/2)/2 + 1/2, used before, rounds
    near 1/2 and so loses the small values: 0 at x = -20, where the sigmoid is 2.1e-9.)"""
    with np.errstate(over="ignore"):
        if out is None and x.size <= SMALL_WHERE:  # tiny temporaries, cheaper calls
            return 1.0 / (1.0 + xp.exp(-x))
        out = xp.negative(x, out=xp.empty_like(x) if out is None else out)
        xp.exp(out, out=out)
        out += 1.0
        return xp.divide(1.0, out, out=out)


class Sigmoid(Unary):
    name = "sigmoid"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        if x.dtype is HALF:  # rounded once, as PyTorch's
            return in_float32(self.forward, xp, x)
        return sigmoid_values(xp, x)

    def workspace(self, x: Cell) -> int:
        return float32_copies(x)

    def backward(self, ctx, g):
        y = ctx.outputs[0]
        return apply(activation_grad("sigmoid", y), y, g)


class Tanh(Unary):
    name = "tanh"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.tanh(x)

    def backward(self, ctx, g):
        y = ctx.outputs[0]
        return apply(activation_grad("tanh", y), y, g)


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)


class Gelu(Unary):
    """GELU: exact ``x * Phi(x)`` (``approximate="none"``, needs erf) or the tanh form."""

    name = "gelu"
    flops = 16
    retain_inputs = (0,)

    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, xp, x):
        if x.dtype is HALF:
            return in_float32(self.forward, xp, x)
        # 0.5 * x * (1 + tanh(c * (x + 0.044715 x^3))) or 0.5 * x * (1 + erf(x / sqrt 2)),
        # in the output's buffer: (1 + t) / 2 is exact, so times x last is PyTorch's float,
        # and (1 + t) x does not overflow for an x over half the largest float
        if self.approximate == "tanh":
            out = xp.power(x, 3, out=xp.empty_like(x))
            out *= 0.044715
            out += x
            out *= SQRT_2_OVER_PI
            xp.tanh(out, out=out)
        elif backend.erf_is_slow(xp, x.dtype) and x.flags.c_contiguous:
            return normal.gelu(xp, x, xp.empty_like(x))
        else:
            out = xp.multiply(x, INV_SQRT_2, out=xp.empty_like(x))
            backend.erf(xp, out, out=out)
        out += 1.0
        out *= 0.5
        out *= x
        return out

    def workspace(self, x: Cell) -> int:
        return float32_copies(x)

    def backward(self, ctx, g):
        x = ctx.inputs[0]
        return apply(activation_grad("gelu_" + self.approximate, x), x, g)


class ActivationGrad(Op):
    """dL/dx of an activation, from the saved output (relu, sigmoid, tanh, sqrt) or input
    (gelu): one op per backward node, where the chain rule in ops would take two to four
    (and a scalar constant). Each computes in its output's buffer, without temporaries
    of the gradient's size, but GELU's, which declares its scratch arrays as its
    workspace. Sigmoid's, tanh's and GELU's compute float16 values in float32 and round
    once (``in_float32``); their float16 instances (``half``, ``activation_grad``)
    declare those float32 copies, so the others call no ``workspace`` at every node."""

    name = "activation_grad"
    differentiable = False

    def __init__(self, kind: str, half: bool = False):
        self.kind = kind
        self.scratch = GELU_SCRATCH.get(kind, 0)  # arrays of the gradient's size
        self.has_workspace = bool(self.scratch) or half

    def workspace(self, y: Cell, g: Cell) -> int:
        widened = float32_copies(y, g)
        return widened + self.scratch * math.prod(y.shape) * (4 if widened else y.dtype.itemsize)

    def infer(self, y: Cell, g: Cell):
        if y.shape != g.shape:
            raise self.error("value and gradient shapes differ", y, g)
        dtype = y.dtype
        if g.dtype is not dtype or dtype.kind != "f":
            dtype = float_dtype(self, y, g)  # the full check, raising on a mismatch
        return [(y.shape, dtype)]

    def forward(self, xp, y, g):
        kind = self.kind
        if kind == "relu":  # 0 at x <= 0; a NaN passes the gradient on, as in PyTorch
            if g.size <= SMALL_WHERE or xp is not np:
                return zero_where(xp, y <= backend.zero(xp, y.dtype), g)
            return keep_mask(xp, y, g)
        small = g.size <= SMALL_WHERE  # the expressions: tiny temporaries, cheaper calls
        if kind == "sqrt":
            if small:
                return g / (y + y)
            out = xp.add(y, y, out=xp.empty_like(y))  # y * 2.0, the same float
            return xp.divide(g, out, out=out)
        if y.dtype is HALF:  # the chains below rounded once, as PyTorch's
            return in_float32(self.forward, xp, y, g)
        one = backend.one(xp, y.dtype)
        if kind == "sigmoid":  # (1 - y) * g * y (PyTorch's order), in the output's buffer
            if small:
                return (one - y) * g * y
            out = xp.subtract(one, y, out=xp.empty_like(y))
            out *= g
            out *= y
            return out
        if kind == "tanh":  # g * (1 - y * y), in the output's buffer
            if small:
                return g * (one - y * y)
            out = xp.multiply(y, y, out=xp.empty_like(y))
            xp.subtract(one, out, out=out)
            out *= g
            return out
        if kind == "gelu_tanh":
            return gelu_tanh_grad(xp, y, g)
        return gelu_grad(xp, y, g)


# the scratch arrays (of the gradient's size) of GELU's derivative
GELU_SCRATCH = {"gelu_none": 1, "gelu_tanh": 2}


def gelu_grad(xp, x, g):
    """g * (cdf + x * pdf) with cdf = (1 + erf(x / sqrt 2)) / 2, pdf = exp(-x^2 / 2) /
    sqrt(2 pi): one scratch array besides the output. Where erf is slow (float32 on the
    CPU), cdf without it (``normal.py``)."""
    if backend.erf_is_slow(xp, x.dtype) and g.dtype == x.dtype:
        return normal.gelu_grad(xp, x, g, xp.empty_like(x), xp.empty_like(x))
    out = xp.multiply(x, x, out=xp.empty_like(x))
    out *= -0.5
    xp.exp(out, out=out)
    out *= INV_SQRT_2PI
    out *= x
    cdf = xp.multiply(x, INV_SQRT_2, out=xp.empty_like(x))
    backend.erf(xp, cdf, out=cdf)
    cdf += 1.0
    cdf *= 0.5
    out += cdf
    del cdf
    out *= g
    return out


def gelu_tanh_grad(xp, x, g):
    """g * ((1 + t) / 2 + x / 2 * (1 - t^2) * slope) with t = tanh(c (x + 0.044715 x^3))
    and slope = c (1 + 3 * 0.044715 x^2): two scratch arrays besides the output."""
    t = xp.power(x, 3, out=xp.empty_like(x))
    t *= 0.044715
    t += x
    t *= SQRT_2_OVER_PI
    xp.tanh(t, out=t)
    out = xp.multiply(x, x, out=xp.empty_like(x))
    out *= 3 * 0.044715
    out += 1.0
    out *= SQRT_2_OVER_PI
    out *= x
    out *= 0.5
    square = xp.multiply(t, t, out=xp.empty_like(t))
    xp.subtract(1.0, square, out=square)
    out *= square
    del square
    t += 1.0
    t *= 0.5
    out += t
    del t
    out *= g
    return out


# one instance per kind serves every application (an op holds only static attributes),
# and for float16 one that declares its float32 copies (relu and sqrt make none)
ACTIVATION_GRADS = {
    kind: ActivationGrad(kind)
    for kind in ("relu", "sigmoid", "tanh", "sqrt", "gelu_none", "gelu_tanh")
}
HALF_ACTIVATION_GRADS = {
    kind: ActivationGrad(kind, half=True) for kind in ("sigmoid", "tanh", "gelu_none", "gelu_tanh")
}


def activation_grad(kind: str, value: Tensor) -> ActivationGrad:
    """The shared gradient op of ``kind`` for the dtype of ``value``."""
    return (HALF_ACTIVATION_GRADS if value.cell.dtype is HALF else ACTIVATION_GRADS)[kind]


# ---- functional API ----------------------------------------------------------------------------

# Ops without attributes hold no state of their own (an application's state lives in its
# recipe and its backward node), so one instance of each serves every application.
_EXP = Exp()
_LOG = Log()
_SQRT = Sqrt()
_RELU = Relu()
_SIGMOID = Sigmoid()
_TANH = Tanh()


def exp(x: Tensor) -> Tensor:
    return apply(_EXP, as_float("exp", x))


def log(x: Tensor) -> Tensor:
    return apply(_LOG, as_float("log", x))


def sqrt(x: Tensor) -> Tensor:
    return apply(_SQRT, as_float("sqrt", x))


def relu(x: Tensor) -> Tensor:
    return apply(_RELU, expect_tensor("relu", x))


def sigmoid(x: Tensor) -> Tensor:
    return apply(_SIGMOID, as_float("sigmoid", x))


def tanh(x: Tensor) -> Tensor:
    return apply(_TANH, as_float("tanh", x))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return apply(Gelu(approximate), as_float("gelu", x))
