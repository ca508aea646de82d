"""Arithmetic: + - * / ** with NumPy-style broadcasting, maximum and minimum, negation,
absolute values, ``clip`` (to constant bounds), and ``scale`` (a product by a constant,
the gradient of a mean).

Binary ops broadcast NumPy-style; their gradients are summed back to each input's
shape (``sum_to``). Operands that are not tensors of one dtype go through the
promotion rules of ``promotion.py`` first.
"""

from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import DEFAULT_DTYPE, Tensor
from .op import (
    HALF,
    DTypeError,
    Op,
    apply,
    broadcast_shape,
    expect_tensor,
    float_dtype,
    host_values,
    same_dtype,
)
from .promotion import astype, held_scalar, operands
from .scalar import scalar_op, tensor_and_scalar


class Binary(Op):
    def infer(self, a: Cell, b: Cell):
        shape, dtype = a.shape, a.dtype
        if b.shape != shape:
            shape = broadcast_shape(self, a, b)
        if b.dtype is not dtype:
            dtype = same_dtype(self, a, b)
        return [(shape, dtype)]


def sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a broadcast gradient back to ``shape`` (the inverse of broadcasting)."""
    if g.cell.shape == shape:  # the cell's, without the property's call: most often equal
        return g
    from .reduce import sum_to as reduce_sum_to

    return reduce_sum_to(g, shape)


class Add(Binary):
    name = "add"

    def forward(self, xp, a, b):
        return a + b

    def backward(self, ctx, g):
        a_shape, b_shape = ctx.in_shapes
        return sum_to(g, a_shape), sum_to(g, b_shape)


class Sub(Binary):
    name = "sub"

    def infer(self, a: Cell, b: Cell):
        metas = super().infer(a, b)
        ((_, dtype),) = metas
        if dtype == np.bool_:
            raise self.error(
                "subtracting bool tensors is not supported (use not_equal for xor)",
                a,
                b,
                kind=DTypeError,
            )
        return metas

    def forward(self, xp, a, b):
        return a - b

    def backward(self, ctx, g):
        gb = sum_to(neg(g), ctx.in_shapes[1]) if ctx.needs_grad[1] else None
        return sum_to(g, ctx.in_shapes[0]), gb


class Mul(Binary):
    name = "mul"
    retain_inputs = (0, 1)

    def forward(self, xp, a, b):
        return a * b

    def backward(self, ctx, g):
        a, b = ctx.inputs
        needs = ctx.needs_grad
        ga = sum_to(mul(g, b), ctx.in_shapes[0]) if needs[0] else None
        gb = sum_to(mul(g, a), ctx.in_shapes[1]) if needs[1] else None
        return ga, gb


class Div(Binary):
    name = "div"
    retain_inputs = (0, 1)

    def infer(self, a: Cell, b: Cell):
        return [(broadcast_shape(self, a, b), float_dtype(self, a, b))]

    def forward(self, xp, a, b):
        return a / b

    def backward(self, ctx, g):
        a, b = ctx.inputs
        needs = ctx.needs_grad
        ga = sum_to(div(g, b), ctx.in_shapes[0]) if needs[0] else None
        gb = sum_to(apply(_DIV_GRAD, a, b, g), ctx.in_shapes[1]) if needs[1] else None
        return ga, gb


class DivisorGrad(Op):
    """dL/db of ``a / b``: ``-(g * ((a / b) / b))`` in one op (not -g * a / b**2: b**2
    under- or overflows first), in the output's buffer: NumPy reuses an expression's
    temporary only when the other operand has its shape, so a broadcast ``b`` would cost
    a second array of the output's size."""

    name = "div_grad"
    differentiable = False

    def infer(self, a: Cell, b: Cell, g: Cell):
        return [(g.shape, g.dtype)]

    def forward(self, xp, a, b, g):
        out = xp.divide(a, b, out=xp.empty(g.shape, dtype=g.dtype))
        xp.divide(out, b, out=out)
        xp.multiply(g, out, out=out)
        return xp.negative(out, out=out)


class Pow(Binary):
    name = "pow"
    flops = 16
    retain_inputs = (0, 1)
    retain_outputs = (0,)

    def infer(self, a: Cell, b: Cell):
        shape = broadcast_shape(self, a, b)
        dtype = same_dtype(self, a, b)
        if dtype.kind not in "iuf":
            raise self.error(f"needs numeric inputs, got {dtype}", a, b, kind=DTypeError)
        return [(shape, dtype)]

    def forward(self, xp, a, b):
        return a**b

    def backward(self, ctx, g):
        a, b = ctx.inputs
        ga = gb = None
        if ctx.needs_grad[0]:
            ga = sum_to(apply(PowGrad(0), a, b, g), ctx.in_shapes[0])
        if ctx.needs_grad[1]:
            gb = sum_to(apply(PowGrad(1), a, b, g, ctx.outputs[0]), ctx.in_shapes[1])
        return ga, gb


class PowGrad(Op):
    """dL/da (``wrt=0``) or dL/db (``wrt=1``) of ``a ** b``, with PyTorch's values at a = 0:
    b * a**(b - 1) is 0 where b == 0 (not 0 * inf), and a**b * log(a) is 0 where a == 0 and
    b >= 0 (not 0 * -inf)."""

    name = "pow_grad"
    differentiable = False

    def __init__(self, wrt: int):
        self.wrt = wrt

    def infer(self, a: Cell, b: Cell, g: Cell, *y: Cell):
        return [(g.shape, g.dtype)]

    def forward(self, xp, a, b, g, *y):
        """In the output's buffer, with one mask of g's size: the same products as
        ``g * where(mask, 0, d)``."""
        out = xp.empty(g.shape, dtype=g.dtype)
        mask = xp.empty(g.shape, dtype=bool)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.wrt == 0:
                xp.subtract(b, b.dtype.type(1), out=out)
                xp.power(a, out, out=out)
                xp.multiply(b, out, out=out)
                xp.equal(b, b.dtype.type(0), out=mask)
            else:
                xp.log(a, out=out)
                xp.multiply(y[0], out, out=out)
                xp.equal(a, a.dtype.type(0), out=mask)
                mask &= b >= b.dtype.type(0)
            xp.copyto(out, backend.zero(xp, g.dtype), where=mask)
            return xp.multiply(g, out, out=out)

    def workspace(self, a: Cell, b: Cell, g: Cell, *y: Cell) -> int:
        """The mask, and for the exponent's gradient a comparison of b."""
        return math.prod(g.shape) + (math.prod(b.shape) if self.wrt else 0)


class Maximum(Binary):
    """Elementwise max; where a == b each input gets half the gradient (as PyTorch)."""

    name = "maximum"
    retain_inputs = (0, 1)

    def forward(self, xp, a, b):
        return xp.maximum(a, b)

    def backward(self, ctx, g):
        a, b = ctx.inputs
        return tuple(
            sum_to(apply(self.share(i), a, b, g), shape) if ctx.needs_grad[i] else None
            for i, shape in enumerate(ctx.in_shapes)
        )

    def share(self, wrt: int) -> Op:
        return MaximumGrad(wrt)


class MaximumGrad(Op):
    """The share of g that goes to input ``wrt`` of maximum: none where it loses, half on
    ties, all otherwise (so both get all of it at a NaN, as in PyTorch)."""

    name = "maximum_grad"
    differentiable = False

    def __init__(self, wrt: int):
        self.wrt = wrt

    def infer(self, a: Cell, b: Cell, g: Cell):
        return [(g.shape, g.dtype)]

    def forward(self, xp, a, b, g):
        """In the output's buffer: the weight 1, or 0.5 on ties, times g (the same
        products as ``where``), then zeros where this input loses, one mask reused."""
        mine, other = (a, b) if self.wrt == 0 else (b, a)
        out = xp.empty(g.shape, dtype=g.dtype)
        mask = xp.equal(mine, other, out=xp.empty(g.shape, dtype=bool))
        xp.multiply(mask, g.dtype.type(-0.5), out=out)
        out += g.dtype.type(1)
        out *= g
        self.loses(xp, mine, other, out=mask)
        xp.copyto(out, backend.zero(xp, g.dtype), where=mask)
        return out

    def workspace(self, a: Cell, b: Cell, g: Cell) -> int:
        """The tie mask, reused for where this input loses."""
        return math.prod(g.shape)

    @staticmethod
    def loses(xp, mine, other, out):
        return xp.less(mine, other, out=out)


class Minimum(Maximum):
    """Elementwise min; where a == b each input gets half the gradient (as PyTorch)."""

    name = "minimum"

    def forward(self, xp, a, b):
        return xp.minimum(a, b)

    def share(self, wrt: int) -> Op:
        return MinimumGrad(wrt)


class MinimumGrad(MaximumGrad):
    name = "minimum_grad"

    @staticmethod
    def loses(xp, mine, other, out):
        return xp.greater(mine, other, out=out)


class Neg(Op):
    name = "neg"

    def infer(self, x: Cell):
        if x.dtype == np.bool_:
            raise self.error("negating a bool tensor is not supported", x, kind=DTypeError)
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return -x

    def backward(self, ctx, g):
        return neg(g)


class Abs(Op):
    """|x|; its gradient is g * sign(x): 0 at 0 and at NaN, as in PyTorch."""

    name = "abs"
    retain_inputs = (0,)

    def infer(self, x: Cell):
        if x.dtype == np.bool_:
            raise self.error(
                "the absolute value of a bool tensor is not supported", x, kind=DTypeError
            )
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return xp.abs(x)

    def backward(self, ctx, g):
        return apply(_ABS_GRAD, ctx.inputs[0], g)


class AbsGrad(Op):
    """g * sign(x), computed in the output's buffer; sign 0 at NaN, as in PyTorch."""

    name = "abs_grad"
    differentiable = False

    def infer(self, x: Cell, g: Cell):
        return [(g.shape, g.dtype)]

    def forward(self, xp, x, g):
        out = xp.sign(x, out=xp.empty(g.shape, dtype=g.dtype))
        out[xp.isnan(x)] = 0
        out *= g
        return out

    def workspace(self, x: Cell, g: Cell) -> int:
        """The NaN mask."""
        return math.prod(x.shape)


class Clip(Op):
    """x limited to [low, high] (either bound may be None), constants of the op. The
    gradient passes where low <= x <= high, bounds included, as PyTorch's ``clamp``."""

    name = "clip"
    retain_inputs = (0,)

    def __init__(self, low: int | float | None, high: int | float | None):
        self.low = low
        self.high = high

    def infer(self, x: Cell):
        if x.dtype.kind not in "iuf":
            raise self.error(f"needs a numeric input, got {x.dtype}", x, kind=DTypeError)
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return xp.clip(x, self.low, self.high)

    def backward(self, ctx, g):
        return apply(ClipGrad(self.low, self.high), ctx.inputs[0], g)


class ClipGrad(Op):
    name = "clip_grad"
    differentiable = False

    def __init__(self, low: int | float | None, high: int | float | None):
        self.low = low
        self.high = high

    def infer(self, x: Cell, g: Cell):
        return [(g.shape, g.dtype)]

    def workspace(self, x: Cell, g: Cell) -> int:
        """The mask and a comparison's result."""
        return 2 * math.prod(x.shape)

    def forward(self, xp, x, g):
        inside = xp.ones(x.shape, dtype=bool)
        if self.low is not None:
            inside &= x >= self.low
        if self.high is not None:
            inside &= x <= self.high
        return xp.where(inside, g, backend.zero(xp, g.dtype))


class Scale(Op):
    """``x * factor`` for a constant ``factor`` (an attribute, not a scalar tensor): the
    gradient of a mean, in one op. The product is ``mul_scalar``'s, so the same floats
    (for float16, in float32 and rounded once)."""

    name = "scale"

    def __init__(self, factor: float):
        self.factor = factor

    def infer(self, x: Cell):
        return [(x.shape, float_dtype(self, x))]

    def forward(self, xp, x):
        return (x * held_scalar(self.factor, x.dtype)).astype(x.dtype, copy=False)

    def workspace(self, x: Cell) -> int:
        """For float16, the float32 product it is rounded from."""
        return 4 * math.prod(x.shape) if x.dtype is HALF else 0

    def backward(self, ctx, g):
        return apply(Scale(self.factor), g)


# ---- functional API ----------------------------------------------------------------------------

# Ops without attributes hold no state of their own (an application's state lives in its
# recipe and its backward node), so one instance of each serves every application.
_ADD = Add()
_SUB = Sub()
_MUL = Mul()
_DIV = Div()
_POW = Pow()
_MAXIMUM = Maximum()
_MINIMUM = Minimum()
_ABS = Abs()
_ABS_GRAD = AbsGrad()
_NEG = Neg()
_DIV_GRAD = DivisorGrad()


# The binary ops below call ``operands`` only when an operand is not a Tensor: two
# tensors need no promotion, and this runs for every op.


def add(a, b) -> Tensor:
    if type(a) is not Tensor or type(b) is not Tensor:
        pair = tensor_and_scalar(a, b)
        if pair is not None:  # x + s, s + x: the scalar in the op (scalar.py)
            return scalar_op("add", pair[0], pair[1])
        a, b = operands("add", a, b)
    return apply(_ADD, a, b)


def sub(a, b) -> Tensor:
    """``a - b``; bool operands are refused (as PyTorch: use not_equal for xor; two bool
    tensors are refused by ``Sub.infer``)."""
    if type(a) is not Tensor or type(b) is not Tensor:
        pair = tensor_and_scalar(a, b)
        if pair is not None:  # (scalar.py refuses bool operands too)
            x, value, first = pair
            return scalar_op("rsub" if first else "sub", x, value)
        for v in (a, b):
            if (isinstance(v, Tensor) and v.dtype == np.bool_) or isinstance(v, bool | np.bool_):
                raise DTypeError(
                    f"sub: subtracting bool values is not supported, got {describe_operand(v)}"
                )
        a, b = operands("sub", a, b)
    return apply(_SUB, a, b)


def describe_operand(v) -> str:
    return f"a {v.dtype} tensor" if isinstance(v, Tensor) else f"the scalar {v!r}"


def mul(a, b) -> Tensor:
    if type(a) is not Tensor or type(b) is not Tensor:
        pair = tensor_and_scalar(a, b)
        if pair is not None:
            return scalar_op("mul", pair[0], pair[1])
        a, b = operands("mul", a, b)
    return apply(_MUL, a, b)


def div(a, b) -> Tensor:
    """True division: integer and bool operands give float32, as in PyTorch."""
    pair = tensor_and_scalar(a, b)
    if pair is not None:
        x, value, first = pair
        return scalar_op("rdiv" if first else "div", x, value)
    a, b = operands("div", a, b)
    if a.dtype == b.dtype and a.dtype.kind != "f":
        a, b = astype(a, DEFAULT_DTYPE), astype(b, DEFAULT_DTYPE)
    return apply(_DIV, a, b)


def pow(a, b) -> Tensor:
    if type(a) is Tensor and tensor_and_scalar(a, b) is not None:  # x ** s (not s ** x)
        return scalar_op("pow", a, b)
    a, b = operands("pow", a, b)
    if b.dtype.kind == "i" and a.dtype == b.dtype and (host_values(b) < 0).any():
        raise _POW.error(
            "integers to negative integer powers are not allowed; convert to float",
            a.cell,
            b.cell,
            kind=ValueError,
        )
    return apply(_POW, a, b)


def maximum(a, b) -> Tensor:
    return apply(_MAXIMUM, *operands("maximum", a, b))


def minimum(a, b) -> Tensor:
    return apply(_MINIMUM, *operands("minimum", a, b))


def neg(x: Tensor) -> Tensor:
    return apply(_NEG, expect_tensor("neg", x))


def abs(x: Tensor) -> Tensor:
    return apply(_ABS, expect_tensor("abs", x))


def clip(x: Tensor, min: int | float | None = None, max: int | float | None = None) -> Tensor:
    """``x`` limited to [min, max] (NumPy's ``clip``, PyTorch's ``clamp``), the bounds
    Python numbers: floats or ints for a float tensor, ints for an integer one. Where
    min > max every value becomes max."""
    expect_tensor("clip", x)
    if min is None and max is None:
        raise ValueError("clip: give min, max or both")
    kind = x.dtype.kind
    bounds = []
    for what, bound in (("min", min), ("max", max)):
        if bound is not None:
            if isinstance(bound, bool | np.bool_) or not isinstance(bound, int | float | np.number):
                raise TypeError(f"clip: {what} must be a number or None, got {bound!r}")
            if bound != bound:
                raise ValueError(f"clip: {what} must not be NaN")
            if kind in "iu":
                if not float(bound).is_integer() or isinstance(bound, float | np.floating):
                    raise DTypeError(
                        f"clip: a {x.dtype} tensor takes integer bounds, got {what}={bound!r}; "
                        "convert the tensor with astype(md.float32) first"
                    )
                info = np.iinfo(x.dtype)  # (a bound past the dtype's range limits nothing)
                bound = int(np.clip(int(bound), info.min, info.max))
            else:
                bound = float(bound)
        bounds.append(bound)
    return apply(Clip(*bounds), x)
