"""Sums and means along the last axis, and over all the others, as products with a
vector of ones; maxima along a short last axis, over a transposed copy.

NumPy reduces a short last axis (a row of a few dozen elements: a layer norm's
features, an attention row) one row at a time, about eight times as slowly as a
matrix-vector product, which BLAS runs over all the rows at once; and it sums a
contiguous matrix's columns about six times as slowly as a vector-matrix product.
Below ``SMALL`` elements NumPy's own reduction is the quicker (the product's call
costs about 2 us), and is used.
The products add in another order than NumPy's pairwise sums, so the last bits
can differ from ``a.sum(...)``; a kernel always takes the same path for the same
shapes, so a recomputation is bit-identical to the first run. A maximum is exact in any
order: ``max_last`` gives ``a.max(...)``'s values.
"""

from __future__ import annotations

import numpy as np

SMALL = 2048  # elements: below this, the plain reduction
SHORT_ROW = 64  # ``max_last``: rows this long or shorter, and at least
MANY_ROWS = 256  # this many of them, go by the transposed copy


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


def max_last(xp, a, scratch):
    """``a.max(axis=-1, keepdims=True)``, with ``scratch`` (a C-contiguous array of
    ``a``'s size and dtype whose values do not matter: the caller's output buffer, about
    to be written) to work in.

    NumPy's maximum reduces a short last axis one row at a time, as it sums: 95 us for
    the (2048, 16) rows of an attention softmax. Copied into the scratch as (last axis,
    rows), the maximum is one elementwise ``maximum`` of whole rows per element of the
    last axis: 16 us with the copy; from 2x to 40x faster for rows of 2 to 32."""
    n = a.shape[-1] if a.ndim else 0
    if (
        xp is not np
        or a.ndim < 2
        or n > SHORT_ROW
        or a.size < MANY_ROWS * max(n, 1)
        or not scratch.flags.c_contiguous
    ):
        return a.max(axis=-1, keepdims=True)
    columns = scratch.reshape(n, *a.shape[:-1])
    np.copyto(columns, np.moveaxis(a, -1, 0))
    return np.maximum.reduce(columns, axis=0)[..., None]
