"""The functional op library. Each family lives in its own module; all are re-exported here
(and at the top level of ``minidtr``)."""

from types import ModuleType as _ModuleType

from ..modes import grad_enabled as _grad_enabled
from ..tensor import Tensor
from .activation import exp, gelu, log, relu, sigmoid, sqrt, tanh
from .arithmetic import abs, add, clip, div, maximum, minimum, mul, neg, pow, sub
from .attention import scaled_dot_product_attention
from .compare import equal, greater, greater_equal, less, less_equal, not_equal, where
from .conv import conv2d
from .embedding import embedding
from .gather import gather_rows, sum_children
from .linalg import linear, matmul
from .loss import cross_entropy, log_softmax, mse_loss, softmax
from .norm import batch_norm, layer_norm
from .op import DTypeError, Op, ShapeError, apply, as_constants
from .pool import avg_pool2d, global_avg_pool2d, max_pool2d, upsample_nearest2d
from .promotion import astype
from .random import dropout, rand, randn
from .reduce import argmax, argmin, max, mean, min, sum, sum_to
from .rnn import child_sum_cell, lstm_cell, lstm_gates
from .shape import (
    broadcast_to,
    concat,
    copy,
    flatten,
    getitem,
    permute,
    reshape,
    split,
    squeeze,
    stack,
    transpose,
    unsqueeze,
)

# Tensor's operators whose operands come in their op's order, and its methods that are an
# op with the tensor first, are the ops themselves (tensor.py): one Python frame less for
# each ``a + b``, and one signature for ``md.sum(x, axis)`` and ``x.sum(axis)``.
Tensor.__add__ = add
Tensor.__sub__ = sub
Tensor.__mul__ = mul
Tensor.__truediv__ = div
Tensor.__pow__ = pow
Tensor.__matmul__ = matmul
Tensor.__neg__ = neg
Tensor.__getitem__ = getitem
Tensor.__abs__ = abs
Tensor.abs = abs
Tensor.clip = clip
Tensor.sum = sum
Tensor.mean = mean
Tensor.max = max
Tensor.min = min
Tensor.argmax = argmax
Tensor.argmin = argmin
Tensor.permute = permute
Tensor.squeeze = squeeze
Tensor.unsqueeze = unsqueeze
Tensor.flatten = flatten
Tensor.softmax = softmax
Tensor.log_softmax = log_softmax


def _refuse_item_assignment(self: Tensor, key, value) -> None:
    """``x[i] = v``: a value is never changed in place, so that every recipe that read it
    recomputes the same bits. ``x += y`` rebinds ``x`` to a new tensor (other names of
    the old one keep the old value, unlike PyTorch's in-place add)."""
    raise TypeError(
        f"a Tensor does not support item assignment (x[{key!r}] = ..., shape {self.shape}): "
        "values never change in place, so that they can be recomputed; build a new "
        "tensor instead, e.g. md.where(mask, v, x) or md.concat of slices"
    )


Tensor.__setitem__ = _refuse_item_assignment


def _updating_a_parameter(op, symbol: str):
    """``p -= lr * p.grad`` on a parameter (a leaf that requires grad) under ``no_grad``:
    the parameter takes the new value, as PyTorch's in-place update of it does, by
    ``Tensor.assign`` (copy-on-write: a recipe that read the old value keeps it; the new
    one is a constant, as an optimizer's). Rebinding the loop's name alone left the
    model's weights as they were. Any other ``x op= y`` rebinds ``x`` (ops.md)."""

    def update(self: Tensor, other):
        if self.grad_fn is not None or not self._requires_grad:
            return op(self, other)
        if _grad_enabled():
            raise RuntimeError(
                f"x {symbol} ...: x is a leaf that requires grad (a parameter), and an "
                "in-place update would be recorded; update it under md.no_grad(), as "
                "PyTorch asks, or with an optimizer"
            )
        with as_constants():
            new = op(self, other)
        if new.shape != self.shape or new.dtype != self.dtype:
            raise ValueError(
                f"x {symbol} y: the result is {new.shape} {new.dtype}, the parameter "
                f"{self.shape} {self.dtype}; an update keeps both"
            )
        self.assign(new)
        return self

    return update


Tensor.__iadd__ = _updating_a_parameter(add, "+=")
Tensor.__isub__ = _updating_a_parameter(sub, "-=")
Tensor.__imul__ = _updating_a_parameter(mul, "*=")
Tensor.__itruediv__ = _updating_a_parameter(div, "/=")

# the functions, not the family modules (``md.gather`` was the module gather.py: "'module'
# object is not callable" for a PyTorch user's md.gather(x, 1, idx))
__all__ = [n for n, v in globals().items() if n[0] != "_" and not isinstance(v, _ModuleType)]
