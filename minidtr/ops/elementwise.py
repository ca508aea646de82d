"""Elementwise ops: arithmetic with broadcasting, activations, comparisons, where, astype.

Binary ops broadcast NumPy-style; their gradients are summed back to each
input's shape (``sum_to``).

Type promotion (docs/ops.md): tensor operands must share one dtype (convert with
``astype``); a Python (or NumPy) scalar is "weak", as in PyTorch and NumPy 2: it
takes the tensor's dtype unless it is of a higher kind (bool < int < float), in
which case the result is int64 (an int with a bool tensor) or float32, the default
float (a float with an int or bool tensor). Ops whose result is a float (``/``,
exp, log, ...) first convert int and bool tensors to float32, as PyTorch does.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import DEFAULT_DTYPE, Tensor, int64, tensor
from .op import (
    FLOAT32,
    HALF,
    DTypeError,
    Op,
    apply,
    broadcast_shape,
    expect_tensor,
    float_dtype,
    in_float32,
    same_dtype,
)

Scalar = int | float | bool | np.number | np.bool_


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


def scalar_tensor(name: str, value, dtype: np.dtype, device: str) -> Tensor:
    """A 0-d constant of ``dtype`` holding a scalar, refusing an int that does not fit."""
    if dtype.kind in "iu" and not isinstance(value, bool | np.bool_):
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise OverflowError(
                f"{name}: the scalar {value} does not fit the tensor's dtype {dtype} "
                f"({info.min}..{info.max}); convert the tensor with astype first"
            )
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


def elements(metas) -> int:
    return sum(math.prod(shape) for shape, _ in metas)


# ---- unary ------------------------------------------------------------------------------


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


class Neg(Unary):
    name = "neg"

    def infer(self, x: Cell):
        if x.dtype == np.bool_:
            raise self.error("negating a bool tensor is not supported", x, kind=DTypeError)
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return -x

    def backward(self, ctx, g):
        return neg(g)


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


class Scale(Op):
    """``x * factor`` for a constant ``factor`` (an attribute, not a scalar tensor): the
    gradient of a mean, in one op. The product is ``mul``'s with a 0-d operand of x's
    dtype, so the same floats."""

    name = "scale"

    def __init__(self, factor: float):
        self.factor = factor

    def infer(self, x: Cell):
        return [(x.shape, float_dtype(self, x))]

    def forward(self, xp, x):
        return x * xp.asarray(self.factor, dtype=x.dtype)

    def backward(self, ctx, g):
        return apply(Scale(self.factor), g)


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


# ---- binary ----------------------------------------------------------------------------------


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
        if metas[0][1] == np.bool_:
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
    under- or overflows first)."""

    name = "div_grad"
    differentiable = False

    def infer(self, a: Cell, b: Cell, g: Cell):
        return [(g.shape, g.dtype)]

    def forward(self, xp, a, b, g):
        return -(g * (a / b / b))


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
        if b.dtype.kind == "i" and bool((b < 0).any()):  # a value check: not in infer
            raise self.error(
                "integers to negative integer powers are not allowed; convert to float",
                a,
                b,
                kind=ValueError,
            )
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
        zero = backend.zero(xp, g.dtype)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.wrt == 0:
                d = xp.where(b == 0, zero, b * a ** (b - 1))
            else:
                d = xp.where((a == 0) & (b >= 0), zero, y[0] * xp.log(a))
            return xp.asarray(g * d, dtype=g.dtype)


class Maximum(Binary):
    """Elementwise max; where a == b each input gets half the gradient (as PyTorch)."""

    name = "maximum"
    retain_inputs = (0, 1)

    def forward(self, xp, a, b):
        return xp.maximum(a, b)

    def backward(self, ctx, g):
        a, b = ctx.inputs
        return tuple(
            sum_to(apply(MaximumGrad(i), a, b, g), shape) if ctx.needs_grad[i] else None
            for i, shape in enumerate(ctx.in_shapes)
        )


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
        mine, other = (a, b) if self.wrt == 0 else (b, a)
        zero = backend.zero(xp, g.dtype)
        share = xp.where(mine == other, g * g.dtype.type(0.5), g)
        return xp.where(mine < other, zero, share)


class Compare(Binary):
    """A comparison: a bool result and no gradient."""

    differentiable = False

    def __init__(self, name: str):
        self.name = name

    def infer(self, a: Cell, b: Cell):
        same_dtype(self, a, b)
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

    def backward(self, ctx, g):
        cond = ctx.inputs[0]
        ga = sum_to(where(cond, g, 0.0), ctx.in_shapes[1]) if ctx.needs_grad[1] else None
        gb = sum_to(where(cond, 0.0, g), ctx.in_shapes[2]) if ctx.needs_grad[2] else None
        return None, ga, gb


# ---- functional API ----------------------------------------------------------------------------


# Ops without attributes hold no state of their own (an application's state lives in its
# recipe and its backward node), so one instance of each serves every application.
_ADD = Add()
_SUB = Sub()
_MUL = Mul()
_DIV = Div()
_POW = Pow()
_MAXIMUM = Maximum()
_NEG = Neg()
_EXP = Exp()
_LOG = Log()
_SQRT = Sqrt()
_RELU = Relu()
_SIGMOID = Sigmoid()
_TANH = Tanh()
_WHERE = Where()
_DIV_GRAD = DivisorGrad()


# The binary ops below call ``operands`` only when an operand is not a Tensor: two
# tensors need no promotion, and this runs for every op.


def add(a, b) -> Tensor:
    if type(a) is not Tensor or type(b) is not Tensor:
        a, b = operands("add", a, b)
    return apply(_ADD, a, b)


def sub(a, b) -> Tensor:
    """``a - b``; bool operands are refused (as PyTorch: use not_equal for xor; two bool
    tensors are refused by ``Sub.infer``)."""
    if type(a) is not Tensor or type(b) is not Tensor:
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
        a, b = operands("mul", a, b)
    return apply(_MUL, a, b)


def div(a, b) -> Tensor:
    """True division: integer and bool operands give float32, as in PyTorch."""
    a, b = operands("div", a, b)
    if a.dtype == b.dtype and a.dtype.kind != "f":
        a, b = astype(a, DEFAULT_DTYPE), astype(b, DEFAULT_DTYPE)
    return apply(_DIV, a, b)


def pow(a, b) -> Tensor:
    return apply(_POW, *operands("pow", a, b))


def maximum(a, b) -> Tensor:
    return apply(_MAXIMUM, *operands("maximum", a, b))


def neg(x: Tensor) -> Tensor:
    return apply(_NEG, expect_tensor("neg", x))


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


def astype(x: Tensor, dtype) -> Tensor:
    return apply(Astype(dtype), expect_tensor("astype", x))


def less(a, b) -> Tensor:
    return apply(Compare("less"), *operands("less", a, b))


def less_equal(a, b) -> Tensor:
    return apply(Compare("less_equal"), *operands("less_equal", a, b))


def greater(a, b) -> Tensor:
    return apply(Compare("greater"), *operands("greater", a, b))


def greater_equal(a, b) -> Tensor:
    return apply(Compare("greater_equal"), *operands("greater_equal", a, b))


def equal(a, b) -> Tensor:
    return apply(Compare("equal"), *operands("equal", a, b))


def not_equal(a, b) -> Tensor:
    return apply(Compare("not_equal"), *operands("not_equal", a, b))


def where(cond: Tensor, a, b) -> Tensor:
    """``a`` where ``cond`` else ``b``; scalar branches follow the promotion rules."""
    if not isinstance(cond, Tensor):
        raise TypeError(f"where: the condition must be a bool Tensor, got {type(cond).__name__}")
    a, b = operands("where", a, b, device=cond.device)
    return apply(_WHERE, cond, a, b)
