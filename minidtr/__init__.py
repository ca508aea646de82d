"""minidtr: define-by-run autodiff on NumPy/CuPy where every tensor can be evicted and
recomputed (Dynamic Tensor Rematerialization), so models train under a hard memory budget."""

# ruff: noqa: E402  (the guard goes before the heavy imports)
from ._startup import guard_command_imports, invoked_as_command, limit_blas_threads

guard_command_imports()  # Ctrl-C while the minidtr command starts: one line, exit 130
if invoked_as_command():
    limit_blas_threads()  # before NumPy loads OpenBLAS

from . import nn, ops, optim, sim, testing
from .autograd import grad, no_grad
from .ops import *  # noqa: F403  (the functional API at top level)
from .ops import DTypeError, ShapeError, as_constants
from .ops.random import manual_seed, rand, randn
from .runtime import BudgetError, Runtime, RuntimeOptions, ThrashError
from .tensor import (
    Tensor,
    arange,
    bool_,
    float16,
    float32,
    float64,
    full,
    int8,
    int16,
    int32,
    int64,
    ones,
    ones_like,
    tensor,
    uint8,
    zeros,
    zeros_like,
)


def current_runtime(device: str = "cpu") -> Runtime:
    """The innermost active runtime of a device (the default unbounded one outside any
    ``with``). Not ``md.runtime``, which is the runtime's package (``minidtr.runtime``)."""
    from .runtime import allocator_for

    return allocator_for(device).runtime


__version__ = "0.1.0"
