"""Fit the coefficients of ``minidtr/ops/normal.py``: the scaled complementary error
function erfcx(z) = exp(z^2) erfc(z), z >= 0, as a polynomial in t = 1 / (1 + P z).

    python benchmarks/fit_normal_tail.py

A least-squares fit in relative error at Chebyshev nodes of t in (0, 1], reweighted
toward the equal-ripple (minimax) fit by Lawson's iteration, with SciPy's erfcx as the
truth; prints the coefficients and the largest relative error on a fine grid of z
(0 to 10, then out to 1e6). t -> 0 as z -> infinity, where erfcx(z) ~ 1 / (z sqrt(pi)),
so the polynomial has no constant term. tests/test_normal.py checks that the module's
coefficients are what this prints.
"""

from __future__ import annotations

import argparse

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

P = 0.36  # t's scale: the best of those tried between 0.3 and 0.8 for ten coefficients
TERMS = 10
NODES = 60_000
LAWSON_STEPS = 40


def fit(p: float = P, terms: int = TERMS) -> np.ndarray:
    """a_1 .. a_terms with erfcx(z) ~ sum_k a_k t^k, t = 1 / (1 + p z)."""
    from scipy.special import erfcx

    k = np.arange(NODES)
    t = 0.5 - 0.5 * np.cos(np.pi * (k + 0.5) / NODES)  # Chebyshev nodes in (0, 1)
    truth = erfcx((1.0 / t - 1.0) / p)
    rows = np.stack([t**j for j in range(1, terms + 1)], axis=1) / truth[:, None]
    weights = np.full(t.size, 1.0 / t.size)
    for _ in range(LAWSON_STEPS):
        root = np.sqrt(weights)
        coefficients, *_ = np.linalg.lstsq(rows * root[:, None], root, rcond=None)
        weights *= np.abs(rows @ coefficients - 1.0)
        weights /= weights.sum()
    return coefficients


def largest_error(coefficients: np.ndarray, p: float = P) -> float:
    """The largest relative error of the fit, in float64, on a fine grid of z."""
    from scipy.special import erfcx

    z = np.concatenate([np.linspace(0.0, 10.0, 400_001), np.geomspace(10.0, 1e6, 2_000)])
    t = 1.0 / (1.0 + p * z)
    fitted = t * np.polyval(coefficients[::-1], t)
    return float(np.max(np.abs(fitted / erfcx(z) - 1.0)))


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    try:
        import scipy  # noqa: F401
    except ImportError:
        raise SystemExit(
            "fit_normal_tail: SciPy is the truth it fits to: pip install scipy"
        ) from None
    coefficients = fit()
    print(f"P = {P}")
    print("COEFFICIENTS = (")
    for value in coefficients:
        print(f"    {float(value)!r},")
    print(")")
    print(f"largest relative error {largest_error(coefficients):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
