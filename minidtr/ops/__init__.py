"""The functional op library. Each family lives in its own module; all are re-exported here
(and at the top level of ``minidtr``)."""

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
from .reduce import max, mean, min, sum, sum_to
from .rnn import child_sum_cell, lstm_cell, lstm_gates
from .shape import broadcast_to, concat, copy, flatten, getitem, reshape, split, stack, transpose

# Tensor's operators whose operands come in their op's order are the ops themselves
# (tensor.py): one Python frame less for each ``a + b``.
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
Tensor.min = min


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
