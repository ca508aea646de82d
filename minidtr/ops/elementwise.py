"""Elementwise ops: arithmetic with broadcasting, activations, comparisons, where, astype.

Binary ops broadcast NumPy-style; their gradients are summed back to each
input's shape (``sum_to``). A Python scalar operand takes the tensor's dtype.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor, tensor
from .op import DTypeError, Op, apply, broadcast_shape, float_dtype, same_dtype

Scalar = int | float | bool | np.number


def lift(value, like: Tensor) -> Tensor:
    """A tensor for an operand: Tensors pass through; scalars become 0-d constants of
    ``like``'s dtype and device; arrays become constants of their own dtype."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, Scalar):
        return tensor(value, dtype=like.dtype, device=like.device)
    if isinstance(value, np.ndarray | list):
        return tensor(value, device=like.device)
    raise TypeError(f"expected a Tensor, scalar or array, got {type(value).__name__}")


def pair(a, b) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, lift(b, a)
    if isinstance(b, Tensor):
        return lift(a, b), b
    raise TypeError(f"expected at least one Tensor, got {type(a).__name__} and {type(b).__name__}")


def elements(metas) -> int:
    return sum(math.prod(shape) for shape, _ in metas)


# ---- unary ------------------------------------------------------------------------------


class Unary(Op):
    """A float -> float elementwise function; ``flops`` per element for the cost model."""

    flops = 1

    def infer(self, x: Cell):
        return [(x.shape, float_dtype(self, x))]

    def cost(self, in_metas, out_metas):
        flops, nbytes = super().cost(in_metas, out_metas)
        return flops * self.flops, nbytes


class Neg(Unary):
    name = "neg"

    def infer(self, x: Cell):
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return -x

    def backward(self, inputs, outputs, g):
        return neg(g)


class Exp(Unary):
    name = "exp"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.exp(x)

    def backward(self, inputs, outputs, g):
        return mul(g, outputs[0])


class Log(Unary):
    name = "log"
    flops = 8
    retain_inputs = (0,)

    def forward(self, xp, x):
        return xp.log(x)

    def backward(self, inputs, outputs, g):
        return div(g, inputs[0])


class Sqrt(Unary):
    name = "sqrt"
    flops = 4
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.sqrt(x)

    def backward(self, inputs, outputs, g):
        return div(g, mul(outputs[0], 2.0))


class Relu(Unary):
    name = "relu"
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.maximum(x, 0)

    def backward(self, inputs, outputs, g):
        return apply(ActivationGrad("relu"), outputs[0], g)


class Sigmoid(Unary):
    name = "sigmoid"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.tanh(x * 0.5) * 0.5 + 0.5

    def backward(self, inputs, outputs, g):
        return apply(ActivationGrad("sigmoid"), outputs[0], g)


class Tanh(Unary):
    name = "tanh"
    flops = 8
    retain_outputs = (0,)

    def forward(self, xp, x):
        return xp.tanh(x)

    def backward(self, inputs, outputs, g):
        return apply(ActivationGrad("tanh"), outputs[0], g)


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
        if self.approximate == "tanh":
            return 0.5 * x * (1.0 + xp.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
        from ..backend import erf

        return 0.5 * x * (1.0 + erf(xp, x * INV_SQRT_2))

    def backward(self, inputs, outputs, g):
        return apply(ActivationGrad("gelu_" + self.approximate), inputs[0], g)


class ActivationGrad(Op):
    """dL/dx of an activation, from the saved output (relu, sigmoid, tanh) or input (gelu)."""

    name = "activation_grad"
    differentiable = False

    def __init__(self, kind: str):
        self.kind = kind

    def infer(self, y: Cell, g: Cell):
        if y.shape != g.shape:
            raise self.error("value and gradient shapes differ", y, g)
        return [(y.shape, float_dtype(self, y, g))]

    def forward(self, xp, y, g):
        kind = self.kind
        if kind == "relu":
            return xp.where(y > 0, g, xp.zeros((), dtype=g.dtype))
        if kind == "sigmoid":
            return g * y * (1.0 - y)
        if kind == "tanh":
            return g * (1.0 - y * y)
        x = y
        if kind == "gelu_tanh":
            inner = SQRT_2_OVER_PI * (x + 0.044715 * x**3)
            t = xp.tanh(inner)
            slope = SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * slope)
        from ..backend import erf

        cdf = 0.5 * (1.0 + erf(xp, x * INV_SQRT_2))
        pdf = INV_SQRT_2PI * xp.exp(-0.5 * x * x)
        return g * (cdf + x * pdf)


class Astype(Op):
    name = "astype"

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)

    def infer(self, x: Cell):
        return [(x.shape, self.dtype)]

    def forward(self, xp, x):
        return x.astype(self.dtype)

    def backward(self, inputs, outputs, g):
        return astype(g, self.in_dtypes[0])


# ---- binary ----------------------------------------------------------------------------------


class Binary(Op):
    def infer(self, a: Cell, b: Cell):
        return [(broadcast_shape(self, a, b), same_dtype(self, a, b))]


def sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a broadcast gradient back to ``shape`` (the inverse of broadcasting)."""
    if g.shape == shape:
        return g
    from .reduce import sum_to as reduce_sum_to

    return reduce_sum_to(g, shape)


class Add(Binary):
    name = "add"

    def forward(self, xp, a, b):
        return a + b

    def backward(self, inputs, outputs, g):
        return sum_to(g, self.in_shapes[0]), sum_to(g, self.in_shapes[1])


class Sub(Binary):
    name = "sub"

    def forward(self, xp, a, b):
        return a - b

    def backward(self, inputs, outputs, g):
        gb = sum_to(neg(g), self.in_shapes[1]) if self.needs_grad[1] else None
        return sum_to(g, self.in_shapes[0]), gb


class Mul(Binary):
    name = "mul"
    retain_inputs = (0, 1)

    def forward(self, xp, a, b):
        return a * b

    def backward(self, inputs, outputs, g):
        a, b = inputs
        ga = sum_to(mul(g, b), self.in_shapes[0]) if self.needs_grad[0] else None
        gb = sum_to(mul(g, a), self.in_shapes[1]) if self.needs_grad[1] else None
        return ga, gb


class Div(Binary):
    name = "div"
    retain_inputs = (0, 1)

    def infer(self, a: Cell, b: Cell):
        return [(broadcast_shape(self, a, b), float_dtype(self, a, b))]

    def forward(self, xp, a, b):
        return a / b

    def backward(self, inputs, outputs, g):
        a, b = inputs
        ga = sum_to(div(g, b), self.in_shapes[0]) if self.needs_grad[0] else None
        gb = None
        if self.needs_grad[1]:
            gb = sum_to(neg(div(mul(g, a), mul(b, b))), self.in_shapes[1])
        return ga, gb


class Pow(Binary):
    name = "pow"
    flops = 16
    retain_inputs = (0, 1)
    retain_outputs = (0,)

    def infer(self, a: Cell, b: Cell):
        return [(broadcast_shape(self, a, b), float_dtype(self, a, b))]

    def forward(self, xp, a, b):
        return a**b

    def backward(self, inputs, outputs, g):
        a, b = inputs
        ga = gb = None
        if self.needs_grad[0]:
            ga = sum_to(mul(g, mul(b, pow(a, sub(b, 1.0)))), self.in_shapes[0])
        if self.needs_grad[1]:
            gb = sum_to(mul(g, mul(outputs[0], log(a))), self.in_shapes[1])
        return ga, gb


class Maximum(Binary):
    """Elementwise max; where a == b the gradient goes to ``a`` (as in NumPy's choice)."""

    name = "maximum"
    retain_inputs = (0, 1)

    def infer(self, a: Cell, b: Cell):
        return [(broadcast_shape(self, a, b), float_dtype(self, a, b))]

    def forward(self, xp, a, b):
        return xp.maximum(a, b)

    def backward(self, inputs, outputs, g):
        a, b = inputs
        a_wins = greater_equal(a, b)
        zero = 0.0
        ga = sum_to(where(a_wins, g, zero), self.in_shapes[0]) if self.needs_grad[0] else None
        gb = sum_to(where(a_wins, zero, g), self.in_shapes[1]) if self.needs_grad[1] else None
        return ga, gb


class Compare(Binary):
    """A comparison: a bool result and no gradient."""

    differentiable = False

    def __init__(self, name: str):
        self.name = name

    def infer(self, a: Cell, b: Cell):
        return [(broadcast_shape(self, a, b), np.dtype(np.bool_))]

    def forward(self, xp, a, b):
        return getattr(xp, self.name)(a, b)


class Where(Op):
    name = "where"
    retain_inputs = (0,)

    def infer(self, cond: Cell, a: Cell, b: Cell):
        if cond.dtype != np.bool_:
            raise self.error(
                f"the condition must be bool, got {cond.dtype}", cond, a, b, kind=DTypeError
            )
        return [(broadcast_shape(self, cond, a, b), same_dtype(self, a, b))]

    def forward(self, xp, cond, a, b):
        return xp.where(cond, a, b)

    def backward(self, inputs, outputs, g):
        cond = inputs[0]
        ga = sum_to(where(cond, g, 0.0), self.in_shapes[1]) if self.needs_grad[1] else None
        gb = sum_to(where(cond, 0.0, g), self.in_shapes[2]) if self.needs_grad[2] else None
        return None, ga, gb


# ---- functional API ----------------------------------------------------------------------------


def add(a, b) -> Tensor:
    return apply(Add(), *pair(a, b))


def sub(a, b) -> Tensor:
    return apply(Sub(), *pair(a, b))


def mul(a, b) -> Tensor:
    return apply(Mul(), *pair(a, b))


def div(a, b) -> Tensor:
    return apply(Div(), *pair(a, b))


def pow(a, b) -> Tensor:
    return apply(Pow(), *pair(a, b))


def maximum(a, b) -> Tensor:
    return apply(Maximum(), *pair(a, b))


def neg(x: Tensor) -> Tensor:
    return apply(Neg(), x)


def exp(x: Tensor) -> Tensor:
    return apply(Exp(), x)


def log(x: Tensor) -> Tensor:
    return apply(Log(), x)


def sqrt(x: Tensor) -> Tensor:
    return apply(Sqrt(), x)


def relu(x: Tensor) -> Tensor:
    return apply(Relu(), x)


def sigmoid(x: Tensor) -> Tensor:
    return apply(Sigmoid(), x)


def tanh(x: Tensor) -> Tensor:
    return apply(Tanh(), x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return apply(Gelu(approximate), x)


def astype(x: Tensor, dtype) -> Tensor:
    return apply(Astype(dtype), x)


def less(a, b) -> Tensor:
    return apply(Compare("less"), *pair(a, b))


def less_equal(a, b) -> Tensor:
    return apply(Compare("less_equal"), *pair(a, b))


def greater(a, b) -> Tensor:
    return apply(Compare("greater"), *pair(a, b))


def greater_equal(a, b) -> Tensor:
    return apply(Compare("greater_equal"), *pair(a, b))


def equal(a, b) -> Tensor:
    return apply(Compare("equal"), *pair(a, b))


def not_equal(a, b) -> Tensor:
    return apply(Compare("not_equal"), *pair(a, b))


def where(cond: Tensor, a, b) -> Tensor:
    """``a`` where ``cond`` else ``b``; a scalar branch takes the other branch's dtype."""
    if not isinstance(cond, Tensor):
        raise TypeError(f"where: the condition must be a bool Tensor, got {type(cond).__name__}")
    a, b = pair(a, b)
    return apply(Where(), cond, a, b)
