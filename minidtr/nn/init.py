"""Parameter creation and PyTorch's default initializations.

Values are drawn on the host from a NumPy Generator: ``rng=None`` means
minidtr's default generator (so ``md.manual_seed(s)`` makes a model
reproducible), an int seeds a fresh Generator, a Generator is used as is.
Each parameter is a constant storage (no recipe) with ``requires_grad=True``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..ops.random import default_generator
from ..tensor import DEFAULT_DTYPE, Tensor, constant

Rng = np.random.Generator | int | None


def generator(rng: Rng) -> np.random.Generator:
    if rng is None:
        return default_generator()
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(int(rng))


def parameter(
    array: np.ndarray,
    dtype=DEFAULT_DTYPE,
    device: str = "cpu",
    requires_grad: bool = True,
    name: str = "parameter",
) -> Tensor:
    """A leaf tensor holding a copy of ``array`` cast to ``dtype``, on ``device``."""
    dtype = np.dtype(dtype)
    if requires_grad and dtype.kind != "f":
        raise TypeError(f"parameter: only floating-point tensors can require grad, not {dtype}")
    host = np.asarray(array)
    xp = backend.xp_for(device)
    return constant(
        lambda: xp.array(host, dtype=dtype, copy=True, order="C"),
        host.shape,
        dtype,
        device,
        requires_grad,
        name=name,
    )


def uniform(shape: tuple[int, ...], bound: float, rng: Rng = None) -> np.ndarray:
    """U(-bound, bound) samples (float64; ``parameter`` casts them)."""
    return generator(rng).uniform(-bound, bound, size=shape)


def normal(shape: tuple[int, ...], std: float = 1.0, rng: Rng = None) -> np.ndarray:
    return generator(rng).normal(0.0, std, size=shape)


def fan_in(shape: tuple[int, ...]) -> int:
    """Inputs per output unit of a weight shaped (out, in, *kernel), as PyTorch counts them."""
    if len(shape) < 2:
        raise ValueError(f"fan_in needs a weight with at least 2 dimensions, got {shape}")
    return shape[1] * math.prod(shape[2:])


def kaiming_uniform(
    shape: tuple[int, ...], a: float = math.sqrt(5.0), rng: Rng = None
) -> np.ndarray:
    """He uniform with leaky-ReLU slope ``a``: bound = gain * sqrt(3 / fan_in),
    gain = sqrt(2 / (1 + a^2)). PyTorch's Linear/Conv default uses a = sqrt(5),
    which makes the bound 1 / sqrt(fan_in)."""
    gain = math.sqrt(2.0 / (1.0 + a * a))
    n = fan_in(shape)
    bound = gain * math.sqrt(3.0 / n) if n else 0.0
    return uniform(shape, bound, rng)


def bias_uniform(shape: tuple[int, ...], n_in: int, rng: Rng = None) -> np.ndarray:
    """PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(n_in) if n_in else 0.0
    return uniform(shape, bound, rng)
