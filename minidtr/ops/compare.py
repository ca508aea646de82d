"""Comparisons (bool results, no gradient) and ``where``."""

from __future__ import annotations

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor
from .arithmetic import Binary, sum_to
from .op import DTypeError, Op, apply, broadcast_shape, same_dtype
from .promotion import operands


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

_WHERE = Where()


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
