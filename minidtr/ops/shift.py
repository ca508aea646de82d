"""Convolution as shifted matrix products: the window kernels' products without im2col.

A convolution of x (C, H, W, N), batch-last, with a KH x KW kernel sums, over the
kernel positions, one matrix product each: the weight slice W[:, :, kh, kw] (O, C)
times x shifted by (kh - ph, kw - pw). In the batch-last layout a shifted x is a
run of columns of x seen as (C, H*W*N), so each product reads x in place: no
im2col columns (C*KH*KW times the image, nine times a 3x3 convolution's output),
no padded copy (a shift reads only where it lands inside the image). The sums go
into the output through a buffer of at most ``chunk_columns`` columns, the
op's declared workspace: the memory the kernel needs beyond its output stays a
fixed fraction of its operands whatever the batch.

A stride s splits x into s*s phases (every s-th row and column from an offset),
each a stride-1 image for the kernel positions at that offset; the gradient with
respect to x is the same sum with the weight transposed and the shifts reversed,
phase by phase; the gradient with respect to the weight reads the same shifted
runs of x against the output's gradient.

Where the output and its source have rows of the same length, a chunk spans
several rows: a shift that reads across the image's right edge wraps into the
next row there, and those columns are left out of the sum (``add_rows``) or
zeroed in the gradient's copy (``masked``). Otherwise each row is its own run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

# A window kernel's workspace is at most this fraction of its largest operand (an input
# or its output): the product buffer, and a phase of x or of the image gradient (stride > 1).
CHUNK_FRACTION = 4


def chunk_columns(largest_bytes: int, rows: int, itemsize: int) -> int:
    """Columns of a (rows, columns) product buffer that fit a 1/``CHUNK_FRACTION`` share of
    the largest operand (at least one)."""
    return max(1, largest_bytes // (CHUNK_FRACTION * max(rows, 1) * itemsize))


def runs(
    out_hw: tuple[int, int], src_hw: tuple[int, int], shift: tuple[int, int], n: int, cap: int
) -> Iterator[tuple[int, int, int, int, int]]:
    """The runs of a shifted product: (out_start, src_start, length, rows, row_length) in
    the flat (H*W*N) index of the output and of the source, where output pixel (r, c)
    reads source pixel (r + ay, c + ax). A run covers ``rows`` rows of ``row_length``
    valid columns (times N), ``length`` columns in all (the wrapped ones between the
    rows included), at most ``cap``."""
    (ho, wo), (hi, wi), (ay, ax) = out_hw, src_hw, shift
    r_lo, r_hi = max(0, -ay), min(ho, hi - ay)
    c_lo, c_hi = max(0, -ax), min(wo, wi - ax)
    if r_lo >= r_hi or c_lo >= c_hi or n == 0:
        return
    valid = (c_hi - c_lo) * n
    if wo == wi and wo * n <= cap:  # whole rows at once, of equal length in both
        per = max(1, (cap - valid) // (wo * n) + 1)
        for r0 in range(r_lo, r_hi, per):
            r1 = min(r_hi, r0 + per)
            start = (r0 * wo + c_lo) * n
            length = (r1 - r0 - 1) * wo * n + valid
            yield start, start + (ay * wi + ax) * n, length, r1 - r0, valid
        return
    for r in range(r_lo, r_hi):  # each row alone, in pieces of at most cap
        out0, src0 = (r * wo + c_lo) * n, ((r + ay) * wi + c_lo + ax) * n
        for k in range(0, valid, cap):
            piece = min(cap, valid - k)
            yield out0 + k, src0 + k, piece, 1, piece


def add_rows(out, out_start: int, buffer, length: int, rows: int, valid: int) -> None:
    """Add a run's product (the first ``length`` columns of ``buffer``) into ``out`` (P, M)
    from column ``out_start``: its valid columns, the wrapped ones between rows skipped,
    one row at a time (NumPy adds a 2-d slice in place without buffering, a 3-d strided
    view through buffers of 8,192 elements per operand)."""
    if rows == 1 or valid * rows == length:
        target = out[:, out_start : out_start + length]
        target += buffer[:, :length]
        return
    row = (length - valid) // (rows - 1)  # the row length of both
    for i in range(0, rows * row, row):
        target = out[:, out_start + i : out_start + i + valid]
        target += buffer[:, i : i + valid]


def product(xp, a, b, out) -> None:
    """``out[...] = a @ b``: a (P, Q), b (Q, L). With Q = 1 (one input channel), an outer
    product, which NumPy's matmul takes ten times longer to do."""
    if a.shape[1] == 1:
        xp.multiply(a, b, out=out)
    else:
        xp.matmul(a, b, out=out)


def accumulate(
    xp,
    out,
    source,
    mats: Sequence,
    shifts: Sequence[tuple[int, int]],
    buffer,
    fresh: bool,
) -> None:
    """``out`` (P, Ho, Wo, N) (+)= the sum over k of ``mats[k]`` (P, Q) times ``source``
    (Q, Hi, Wi, N) shifted by ``shifts[k]``: out[:, r, c] += mats[k] @ source[:, r + ay,
    c + ax] where that lies inside the source. Both contiguous. When ``fresh``, the
    first shift that covers all of the output writes it, or without one the output
    starts at zero; every other product adds through ``buffer`` (P, cap)."""
    p, ho, wo, n = out.shape
    q, hi, wi, _ = source.shape
    out2, src2 = out.reshape(p, ho * wo * n), source.reshape(q, hi * wi * n)
    cap = buffer.shape[1]
    first = None
    if fresh:
        first = next((k for k, s in enumerate(shifts) if covers((ho, wo), (hi, wi), s)), None)
    if fresh and first is None:
        out2[...] = 0
    elif first is not None:
        ay, ax = shifts[first]
        start = (ay * wi + ax) * n
        product(xp, mats[first], src2[:, start : start + ho * wo * n], out2)
    for k, shift in enumerate(shifts):
        if k == first:
            continue
        for out0, src0, length, rows, valid in runs((ho, wo), (hi, wi), shift, n, cap):
            product(xp, mats[k], src2[:, src0 : src0 + length], buffer[:, :length])
            add_rows(out2, out0, buffer, length, rows, valid)


def covers(out_hw: tuple[int, int], src_hw: tuple[int, int], shift: tuple[int, int]) -> bool:
    """Whether every output pixel reads inside the source, as one run of equal rows."""
    (ho, wo), (hi, wi), (ay, ax) = out_hw, src_hw, shift
    return wo == wi and ax == 0 and ay >= 0 and ho + ay <= hi


def correlate(xp, grad, source, shifts: Sequence[tuple[int, int]], buffer) -> list:
    """For each shift, the (P, Q) sum over output pixels of ``grad`` (P, Ho, Wo, N) times
    ``source`` (Q, Hi, Wi, N) shifted by it (the weight gradient's terms): runs of grad
    against runs of source, the wrapped columns of a multi-row run zeroed in a copy of
    grad's run (``buffer``, (P, cap))."""
    p, ho, wo, n = grad.shape
    q, hi, wi, _ = source.shape
    g2, src2 = grad.reshape(p, ho * wo * n), source.reshape(q, hi * wi * n)
    cap = buffer.shape[1]
    out = []
    for shift in shifts:
        total = None
        for g0, src0, length, rows, valid in runs((ho, wo), (hi, wi), shift, n, cap):
            if rows > 1 and valid < wo * n:
                part = masked(g2, g0, length, rows, valid, wo * n, buffer)
            else:
                part = g2[:, g0 : g0 + length]
            run = src2[:, src0 : src0 + length]
            term = part @ run.T if q > 1 else (part @ run[0])[:, None]
            total = term if total is None else total + term
        out.append(xp.zeros((p, q), grad.dtype) if total is None else total)
    return out


def masked(g2, start: int, length: int, rows: int, valid: int, row: int, buffer):
    """A copy of grad's run in ``buffer`` with the wrapped columns between its rows zeroed."""
    part = buffer[:, :length]
    part[...] = g2[:, start : start + length]
    for i in range(valid, (rows - 1) * row, row):
        part[:, i : i - valid + row] = 0
    return part


def phase_count(size: int, offset: int, stride: int) -> int:
    """Rows (or columns) of a phase: len(range(offset, size, stride))."""
    return max(0, math.ceil((size - offset) / stride))
