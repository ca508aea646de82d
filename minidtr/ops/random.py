"""Randomness that replays: seeds live in recipes, so recomputation is bit-identical.

Every random op (dropout, randn, rand) takes a seed as a static attribute.
Without an explicit seed one is drawn from minidtr's default generator
(``manual_seed`` resets it), so a program is reproducible end to end.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import backend
from ..arguments import size_of
from ..runtime.storage import Cell
from ..tensor import Tensor, checked_device, checked_dtype
from .op import FLOATS, DTypeError, Op, apply, expect_tensor, float_dtype, numel

_default = np.random.default_rng(0)

Seed = int | np.random.Generator | None


def checked_seed(seed, where: str, what: str = "seed") -> int:
    """``seed`` as an int in [0, 2**64) (PyTorch's range for ``manual_seed``), else a
    TypeError or ValueError naming ``where``'s argument ``what``."""
    if type(seed) is not int and (
        not isinstance(seed, numbers.Integral) or isinstance(seed, bool | np.bool_)
    ):
        raise TypeError(f"{where}: {what} must be an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"{where}: {what} must be in [0, 2**64), got {seed}")
    return int(seed)


def manual_seed(seed: int) -> None:
    """Reset minidtr's default generator (used for seeds and parameter initialization)."""
    global _default
    _default = np.random.default_rng(checked_seed(seed, "manual_seed"))


def default_generator() -> np.random.Generator:
    return _default


def next_seed(seed: Seed = None, where: str = "next_seed") -> int:
    """An int seed: ``seed`` itself, or one drawn from a Generator or the default one."""
    if seed is None:
        seed = _default
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**63 - 1))
    if isinstance(seed, np.random.RandomState):
        raise TypeError(
            f"{where}: seed must be an int, a numpy Generator (np.random.default_rng) or "
            "None, got a RandomState"
        )
    return checked_seed(seed, where)


# ---- random ops ----------------------------------------------------------------------------


class Dropout(Op):
    """Inverted dropout: zero each element with probability p, scale the rest by 1/(1-p).

    The mask is drawn from ``seed`` (float32 uniforms, so it does not depend on x's
    dtype); the VJP is the same op on the gradient, which draws the same mask. At p = 1
    the output is ``x * 0`` (NaN where x is infinite or NaN, as PyTorch's), no mask drawn.
    """

    name = "dropout"

    def __init__(self, p: float, seed: int):
        self.p = float(p)
        self.seed = seed

    def infer(self, x: Cell):
        return [(x.shape, float_dtype(self, x))]

    def forward(self, xp, x):
        """In the output's buffer (C order, as the uniforms), a chunk of the mask at a
        time (``backend.uniform_chunks``)."""
        if self.p == 1.0:
            return xp.multiply(x, x.dtype.type(0))
        out = xp.multiply(x, 1.0 / (1.0 - self.p), out=xp.empty(x.shape, dtype=x.dtype))
        values, zero, start = out.reshape(-1), xp.zeros((), dtype=x.dtype), 0
        for uniforms in backend.uniform_chunks(xp, self.seed, values.size):
            part = values[start : start + uniforms.size]
            xp.copyto(part, zero, where=uniforms < self.p)
            start += uniforms.size
        return out

    def workspace(self, x: Cell) -> int:
        """A chunk of float32 uniforms and the mask drawn from them."""
        return 5 * backend.uniform_chunk_size(x.device, math.prod(x.shape))

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 4.0 * numel(in_metas[0]), nbytes

    def backward(self, ctx, g):
        return apply(Dropout(self.p, self.seed), g)


class RandomFill(Op):
    """A tensor of standard normal (``randn``) or [0, 1) uniform (``rand``) samples, drawn
    from ``seed``: no inputs, so an evicted one is recomputed from the seed alone."""

    differentiable = False

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, seed: int):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.seed = seed

    def infer(self):
        return [(self.shape, self.dtype)]

    def forward(self, xp):
        rng = backend.generator(xp, self.seed)
        dtype = np.float32 if self.dtype == np.float16 else self.dtype
        if self.name == "randn":
            out = rng.standard_normal(self.shape, dtype=dtype)
        else:
            out = rng.random(self.shape, dtype=dtype)
        return out.astype(self.dtype, copy=False)

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 16.0 * math.prod(self.shape), nbytes


def dropout(x: Tensor, p: float = 0.5, training: bool = True, seed: Seed = None) -> Tensor:
    """Inverted dropout; ``x`` itself when not training or p == 0. The seed (drawn from
    minidtr's default generator when None) is kept in the recipe."""
    expect_tensor("dropout", x)
    if type(p) is not float and not isinstance(p, numbers.Real):
        raise TypeError(f"dropout: p must be a number, got {type(p).__name__} {p!r}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    return apply(Dropout(p, next_seed(seed, "dropout")), x)


def _random(name: str, shape, dtype, seed, requires_grad: bool, device: str) -> Tensor:
    dtype = checked_dtype(np.float32 if dtype is None else dtype, name)
    if dtype not in FLOATS:
        raise DTypeError(f"{name}: dtype must be floating point, got {dtype}")
    device = checked_device(device, name)
    op = RandomFill(name, shape, dtype, next_seed(seed, name))
    out = apply(op, device=device)
    out.requires_grad = requires_grad
    return out


def randn(
    *size,
    dtype=np.float32,
    seed: Seed = None,
    requires_grad: bool = False,
    device: str = "cpu",
) -> Tensor:
    """Standard normal samples of ``size`` (``randn(2, 3)`` or ``randn((2, 3))``).
    ``seed``: an int, a numpy Generator (an int is drawn from it) or None (drawn from
    minidtr's default generator, see ``manual_seed``)."""
    return _random("randn", size_of(size, "randn"), dtype, seed, requires_grad, device)


def rand(
    *size,
    dtype=np.float32,
    seed: Seed = None,
    requires_grad: bool = False,
    device: str = "cpu",
) -> Tensor:
    """Uniform samples in [0, 1) of ``size`` (as ``randn``); ``seed`` as for ``randn``."""
    return _random("rand", size_of(size, "rand"), dtype, seed, requires_grad, device)
