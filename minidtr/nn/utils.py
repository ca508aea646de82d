"""Gradient utilities, under PyTorch's ``torch.nn.utils`` names."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from .. import ops
from ..autograd import no_grad
from ..ops.op import as_constants
from ..tensor import Tensor, tensor


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor], max_norm: float, *, error_if_nonfinite: bool = False
) -> Tensor:
    """Scale the gradients of ``parameters`` by one factor so that their 2-norm, taken as
    one vector, is at most ``max_norm``; returns that norm before clipping (a 0-d
    float32 tensor, the gradients' dtype when they share one). As
    ``torch.nn.utils.clip_grad_norm_`` with its default 2-norm: each gradient's norm,
    the norm of those, the factor ``max_norm / (norm + 1e-6)`` when below 1. A norm
    that is not finite scales them as torch's does (NaN: every gradient NaN; inf: zeros,
    NaN where a gradient was infinite), or with ``error_if_nonfinite`` raises instead,
    changing nothing.

    Parameters without a gradient are passed over. The gradients are replaced, not
    changed in place (values never change in place here, so that whatever read the old
    ones recomputes them): the new ones are constants, as an optimizer's updates."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    params = list(parameters)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"clip_grad_norm_: parameters[{i}] is a {type(p).__name__}")
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real):
        raise TypeError(f"clip_grad_norm_: max_norm must be a number, got {max_norm!r}")
    if not (max_norm >= 0 and math.isfinite(max_norm)):
        raise ValueError(f"clip_grad_norm_: max_norm must be >= 0 and finite, got {max_norm}")
    with_grads = [p for p in params if p.grad is not None]
    if not with_grads:
        return tensor(0.0)
    with no_grad(), as_constants():
        dtype = with_grads[0].grad.dtype
        norms = ops.stack([ops.astype(_norm(p.grad), dtype) for p in with_grads])
        total = _norm(norms)
        norm = float(total.item())
        if error_if_nonfinite and not math.isfinite(norm):
            raise RuntimeError(
                f"clip_grad_norm_: the gradients' total norm is {norm}, which cannot be "
                f"clipped (error_if_nonfinite=False scales them by it anyway)"
            )
        factor = max_norm / (norm + 1e-6)
        if not factor >= 1.0:  # below 1, or NaN
            for p in with_grads:
                p.grad = p.grad * factor
    return total


def _norm(x: Tensor) -> Tensor:
    return ops.sqrt(ops.sum(x * x))
