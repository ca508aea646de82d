"""The standard normal's distribution Phi(x) for GELU and its gradient on float32
values, without an error function.

NumPy has no erf; SciPy's runs a scalar loop in double precision, about 11 ns a value,
and GELU (``gelu``) and its gradient (``gelu_grad``) took a seventh of a Transformer
step in it. Here
Phi comes from ``erfc(z) = exp(-z^2) erfcx(z)``, z = |x| / sqrt 2, with erfcx, the
scaled complementary error function, a fitted polynomial in ``t = 1 / (1 + P z)``
(``benchmarks/fit_normal_tail.py`` fits it; its largest relative error is 3.5e-8, under
float32's half unit in the last place): about twenty array operations in float32, and
``exp(-x^2 / 2)`` shared with the density phi that the gradient needs too.

Phi is then ``q = erfc(z) / 2`` for a negative x and ``1 - q`` for a positive one, so
that the left tail keeps its relative precision (``1 + erf(x / sqrt 2)`` loses it to
cancellation: off by 5% at x = -5 in float32). The sign is applied with arithmetic on
``signbit`` (a masked subtraction or ``where`` costs ten times the whole polynomial),
-0.0 counting as negative and +0.0 as positive: both give 1/2.
"""

from __future__ import annotations

import math

P = 0.36
COEFFICIENTS = (  # a_1 .. a_10: erfcx(z) ~ sum_k a_k t^k (benchmarks/fit_normal_tail.py)
    0.20310825722228043,
    0.20310772365347624,
    0.18994402736116117,
    0.1639167527904053,
    0.12292435721330633,
    0.10651831025468946,
    -0.028639316996486315,
    0.14342780398787291,
    -0.14197050948451612,
    0.03766262920672474,
)
T_SCALE = P / math.sqrt(2.0)  # t = 1 / (1 + T_SCALE |x|)
HALF_ROOT_2PI = 0.5 * math.sqrt(2.0 * math.pi)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
# the polynomial times sqrt(2 pi) / 2, so that times phi(x) it is erfc(z) / 2
SCALED = tuple(a * HALF_ROOT_2PI for a in COEFFICIENTS)
HALVED = tuple(a * 0.5 for a in COEFFICIENTS)  # times exp(-z^2): erfc(z) / 2
SMALL = 4096  # values the forward computes with a scratch array of its own


def gelu(xp, x, out):
    """``x * Phi(x)`` into ``out`` (both C-contiguous, of one shape and dtype) with no
    array of x's size besides: the first half of the values is computed with the
    second half of ``out`` as its scratch, then the first half of the rest with the
    rest's second half, and so on; the last ``SMALL`` values or fewer get a scratch
    array of their own. GELU's forward declares no workspace, and this keeps it so."""
    values, results = x.reshape(-1), out.reshape(-1)
    start, end = 0, values.size
    while end - start > SMALL:
        half = (end - start) // 2
        middle = start + half
        _gelu_part(xp, values[start:middle], results[start:middle], results[middle : middle + half])
        start = middle
    if start < end:
        _gelu_part(xp, values[start:], results[start:], xp.empty(end - start, out.dtype))
    return out


def erfcx_times(xp, x, coefficients, out, t) -> None:
    """The fitted erfcx(z), z = |x| / sqrt 2, times the factor the ``coefficients`` carry
    (``HALVED``, ``SCALED``), into ``out``; ``t`` overwritten."""
    xp.abs(x, out=t)
    t *= T_SCALE
    t += 1.0
    xp.reciprocal(t, out=t)
    out.fill(coefficients[-1])
    for coefficient in coefficients[-2::-1]:
        out *= t
        out += coefficient
    out *= t


def _gelu_part(xp, x, out, t):
    """``x * Phi(x)`` into ``out``, with ``t`` overwritten: Phi = u q + (1 - u) / 2, q =
    erfc(z) / 2, u = +1 for a negative x and -1 for a positive one."""
    erfcx_times(xp, x, HALVED, out, t)  # erfcx(z) / 2
    xp.multiply(x, x, out=t)
    t *= -0.5
    xp.exp(t, out=t)
    out *= t  # q
    xp.signbit(x, out=t)
    t *= 2.0
    t -= 1.0  # u
    out *= t
    t -= 1.0
    t *= -0.5  # (1 - u) / 2
    out += t
    out *= x


def gelu_grad(xp, x, g, out, scratch):
    """``g * (Phi(x) + x phi(x))``, GELU's gradient, into ``out``, with ``scratch`` (both
    of x's shape and dtype) overwritten. With u = +1 for a negative x and -1 for a
    positive one, Phi + x phi = (u K erfcx(z) + x) phi + (1 - u) / 2, K = sqrt(2 pi) / 2."""
    t = scratch
    erfcx_times(xp, x, SCALED, out, t)  # K erfcx(z)
    xp.signbit(x, out=t)
    t *= 2.0
    t -= 1.0  # u
    out *= t
    out += x
    xp.multiply(x, x, out=t)
    t *= -0.5
    xp.exp(t, out=t)
    t *= INV_SQRT_2PI  # phi(x)
    out *= t  # u q + x phi
    xp.signbit(x, out=t)
    xp.subtract(1.0, t, out=t)  # (1 - u) / 2
    out += t
    out *= g
    return out
