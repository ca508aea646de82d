"""The elementwise ops, one module per family, all importable from here too:

- ``promotion.py``: type promotion of scalars and arrays, ``astype``;
- ``arithmetic.py``: + - * / **, maximum, neg, scale, with broadcasting;
- ``activation.py``: exp, log, sqrt, relu, sigmoid, tanh, gelu and their gradient op;
- ``compare.py``: the comparisons and ``where``.
"""

from .activation import (  # noqa: F401
    ACTIVATION_GRADS,
    ActivationGrad,
    Exp,
    Gelu,
    Log,
    Relu,
    Sigmoid,
    Sqrt,
    Tanh,
    Unary,
    exp,
    gelu,
    log,
    relu,
    sigmoid,
    sqrt,
    tanh,
    zero_where,
)
from .arithmetic import (  # noqa: F401
    Add,
    Binary,
    Div,
    DivisorGrad,
    Maximum,
    MaximumGrad,
    Mul,
    Neg,
    Pow,
    PowGrad,
    Scale,
    Sub,
    add,
    div,
    maximum,
    mul,
    neg,
    pow,
    sub,
    sum_to,
)
from .compare import (  # noqa: F401
    Compare,
    Where,
    equal,
    greater,
    greater_equal,
    less,
    less_equal,
    not_equal,
    where,
)
from .promotion import Astype, as_float, astype, operands  # noqa: F401
