"""Parameter creation and PyTorch's default initializations.

Values are drawn on the host from a NumPy Generator: ``rng=None`` means
minidtr's default generator (so ``md.manual_seed(s)`` makes a model
reproducible), an int seeds a fresh Generator, a Generator is used as is.
Each parameter is a constant storage (no recipe) with ``requires_grad=True``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import backend
from ..arguments import shape_of
from ..ops.op import expect_number
from ..ops.random import checked_seed, default_generator
from ..tensor import DEFAULT_DTYPE, Tensor, checked_device, checked_dtype, constant

Rng = np.random.Generator | int | None


def generator(rng: Rng, where: str = "generator") -> np.random.Generator:
    """minidtr's default generator (None), ``rng`` itself (a Generator), or a new one
    seeded by ``rng`` (an int)."""
    if rng is None:
        return default_generator()
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, numbers.Integral):
        return np.random.default_rng(checked_seed(rng, where, "rng"))
    raise TypeError(
        f"{where}: rng must be an int seed, a numpy Generator or None, got {type(rng).__name__}"
    )


def layer_options(where: str, dtype, device: str, **sizes) -> np.dtype:
    """A layer's arguments checked before anything is made, each error naming the layer and
    the argument: ``sizes`` non-negative ints, ``dtype`` a floating-point dtype (returned
    as a NumPy dtype), ``device`` one minidtr knows."""
    for name, size in sizes.items():
        if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size < 0:
            raise (ValueError if isinstance(size, numbers.Integral) else TypeError)(
                f"{where}: {name} must be a non-negative int, got {size!r}"
            )
    dtype = checked_dtype(dtype, where)
    if dtype.kind != "f":
        raise TypeError(f"{where}: parameters are floating-point, so dtype cannot be {dtype}")
    checked_device(device, where)
    return dtype


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
    device = checked_device(device, "parameter")
    xp = backend.xp_for(device)
    return constant(
        lambda: xp.array(host, dtype=dtype, copy=True, order="C"),
        host.shape,
        dtype,
        device,
        requires_grad,
        name=name,
    )


def non_negative(where: str, name: str, value: float) -> float:
    """``value`` as a float if it is a finite number >= 0; otherwise an error naming the
    function and the argument (not NumPy's "scale < 0" or math's "math domain error")."""
    number = expect_number(where, value, name)
    if not (number >= 0.0 and math.isfinite(number)):
        raise ValueError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    return number


def uniform(shape: tuple[int, ...], bound: float, rng: Rng = None) -> np.ndarray:
    """U(-bound, bound) samples (float64; ``parameter`` casts them)."""
    shape = shape_of(shape, "uniform")
    bound = non_negative("uniform", "bound", bound)
    return generator(rng, "uniform").uniform(-bound, bound, size=shape)


def normal(shape: tuple[int, ...], std: float = 1.0, rng: Rng = None) -> np.ndarray:
    """N(0, std^2) samples (float64)."""
    shape = shape_of(shape, "normal")
    std = non_negative("normal", "std", std)
    return generator(rng, "normal").normal(0.0, std, size=shape)


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
    a = expect_number("kaiming_uniform", a, "a")
    gain = math.sqrt(2.0 / (1.0 + a * a))
    n = fan_in(shape_of(shape, "kaiming_uniform"))
    bound = gain * math.sqrt(3.0 / n) if n else 0.0
    return uniform(shape, bound, rng)


def bias_uniform(shape: tuple[int, ...], n_in: int, rng: Rng = None) -> np.ndarray:
    """PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    n_in = non_negative("bias_uniform", "n_in", n_in)
    bound = 1.0 / math.sqrt(n_in) if n_in else 0.0
    return uniform(shape, bound, rng)
