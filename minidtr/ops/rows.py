"""Sums and means along the last axis, and over all the others, as products with a
vector of ones.

NumPy reduces a short last axis (a row of a few dozen elements: a layer norm's
features, an attention row) one row at a time, about eight times as slowly as a
matrix-vector product, which BLAS runs over all the rows at once; and it sums a
contiguous matrix's columns about six times as slowly as a vector-matrix product.
Below ``SMALL`` elements NumPy's own reduction is the quicker (the product's call
costs about 2 us), and is used.
The products add in another order than NumPy's pairwise sums, so the last bits
can differ from ``a.sum(...)``; a kernel always takes the same path for the same
shapes, so a recomputation is bit-identical to the first run.
"""

from __future__ import annotations

SMALL = 2048  # elements: below this, the plain reduction


def sum_last(xp, a):
    """``a.sum(axis=-1, keepdims=True)``."""
    if a.ndim < 2 or a.size < SMALL:
        return a.sum(axis=-1, keepdims=True)
    return (a @ xp.ones(a.shape[-1], dtype=a.dtype))[..., None]


def mean_last(xp, a):
    """``a.mean(axis=-1, keepdims=True)`` (a product with 1/n)."""
    if a.ndim < 2 or a.size < SMALL:
        return a.mean(axis=-1, keepdims=True)
    n = a.shape[-1]
    return (a @ xp.full((n,), 1.0 / n, dtype=a.dtype))[..., None]


def sum_leading(xp, a):
    """``a.sum(axis=every axis but the last)``, a vector of the last axis's length."""
    if a.ndim < 2 or a.size < SMALL or not a.flags.c_contiguous:  # (a reshape would copy)
        return a.sum(axis=tuple(range(a.ndim - 1)))
    rows = a.reshape(-1, a.shape[-1])
    return xp.ones(rows.shape[0], dtype=a.dtype) @ rows
