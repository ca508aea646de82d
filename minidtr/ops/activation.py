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
from .arithmetic import div, mul
from .op import FLOAT32, HALF, DTypeError, Op, apply, expect_tensor, float_dtype, in_float32
from .promotion import as_float

SMALL_WHERE = 1024  # elements up to which ``zero_where`` uses ``where``
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
        return xp.maximum(x, backend.zero(xp, x.dtype))

    def backward(self, ctx, g):
        return apply(ACTIVATION_GRADS["relu"], ctx.outputs[0], g)


class Sigmoid(Unary):
    name = "sigmoid"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        if x.dtype is HALF:  # rounded once, as PyTorch's
            return in_float32(self.forward, xp, x)
        return xp.tanh(x * 0.5) * 0.5 + 0.5

    def backward(self, ctx, g):
        return apply(ACTIVATION_GRADS["sigmoid"], ctx.outputs[0], g)


class Tanh(Unary):
    name = "tanh"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.tanh(x)

    def backward(self, ctx, g):
        return apply(ACTIVATION_GRADS["tanh"], ctx.outputs[0], g)


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


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
        if self.approximate == "tanh":
            return 0.5 * x * (1.0 + xp.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
        return 0.5 * x * (1.0 + backend.erf(xp, x * INV_SQRT_2))

    def backward(self, ctx, g):
        return apply(ACTIVATION_GRADS["gelu_" + self.approximate], ctx.inputs[0], g)


class ActivationGrad(Op):
    """dL/dx of an activation, from the saved output (relu, sigmoid, tanh, sqrt) or input
    (gelu): one op per backward node, where the chain rule in ops would take two to four
    (and a scalar constant). Each computes what that chain computed, in the same order,
    so the gradients are the same floats (for float16: that chain's floats in float32,
    rounded once, see ``in_float32``)."""

    name = "activation_grad"
    differentiable = False

    def __init__(self, kind: str):
        self.kind = kind

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
            return zero_where(xp, y <= backend.zero(xp, y.dtype), g)
        if kind == "sqrt":
            return g / (y + y)  # y * 2.0, the same float
        if y.dtype is HALF:  # the chains below rounded once, as PyTorch's
            return in_float32(self.forward, xp, y, g)
        if kind == "sigmoid":
            return g * y * (backend.one(xp, y.dtype) - y)
        if kind == "tanh":
            return g * (backend.one(xp, y.dtype) - y * y)
        x = y
        if kind == "gelu_tanh":
            inner = SQRT_2_OVER_PI * (x + 0.044715 * x**3)
            t = xp.tanh(inner)
            slope = SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * slope)
        cdf = 0.5 * (1.0 + backend.erf(xp, x * INV_SQRT_2))
        pdf = INV_SQRT_2PI * xp.exp(-0.5 * x * x)
        return g * (cdf + x * pdf)


# one instance per kind serves every application (an op holds only static attributes)
ACTIVATION_GRADS = {
    kind: ActivationGrad(kind)
    for kind in ("relu", "sigmoid", "tanh", "sqrt", "gelu_none", "gelu_tanh")
}


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
