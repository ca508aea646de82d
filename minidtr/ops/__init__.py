"""The functional op library. Each family lives in its own module; all are re-exported here
(and at the top level of ``minidtr``)."""

from .elementwise import (
    add,
    astype,
    div,
    equal,
    exp,
    gelu,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    maximum,
    mul,
    neg,
    not_equal,
    pow,
    relu,
    sigmoid,
    sqrt,
    sub,
    tanh,
    where,
)
from .linalg import matmul
from .op import DTypeError, Op, ShapeError, apply, as_constants
from .reduce import max, mean, sum, sum_to
from .shape import broadcast_to, concat, copy, flatten, getitem, reshape, split, stack, transpose
