"""Scaled dot-product attention as one op: ``softmax(q kᵀ · scale + mask) v``.

Written with primitive ops (as the bundled Transformer does, so that its trace shows each
step), attention makes a (..., L, S) matrix of scores, its scaled and masked copies and
its softmax, and keeps the softmax for backward: S times the size of the output, the
largest values of a Transformer's step. As one op, nothing of that size is ever a value:
the forward computes the probabilities as scratch (its declared workspace) and keeps only
q, k and v (and the mask) for backward; the backward computes the probabilities again
from q and k, as FlashAttention's does (Dao et al., 2022). Under a budget an attention
layer then holds its inputs and its output, and rebuilding its output is one op.

The arguments are PyTorch's ``scaled_dot_product_attention``'s: q (..., L, E), k
(..., S, E), v (..., S, Ev), the same leading dimensions; ``mask`` broadcastable to
(..., L, S), boolean (True: may attend) or added to the scores; ``causal`` lets position
i attend to positions 0..i only (with a mask, both apply; PyTorch refuses the pair). A
row with nothing to attend to (every score masked out) gives 0, and passes no gradient, as
in PyTorch since 2.5 (NaN before). ``dropout_p`` zeroes each
probability with that chance and scales the rest by 1 / (1 - dropout_p), from a seed kept in
the recipe (float32 uniforms in the scores' C order, as ``dropout`` draws them), so the
backward and every recompute draw the same mask. float16 is computed in float32 and
rounded once.
"""

from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import HALF, Op, apply, expect_tensor, float_dtype, in_float32
from .random import Seed, next_seed


def _sizes(in_metas) -> tuple[int, int, int]:
    """(scores, E, Ev): how many scores (..., L, S), and q's and v's last dimensions."""
    (q_shape, _), (k_shape, _), (v_shape, _) = in_metas[:3]
    return math.prod(q_shape[:-1]) * k_shape[-2], q_shape[-1], v_shape[-1]


def _rows(q_shape: tuple, k_shape: tuple, v_shape: tuple) -> int:
    """How many indices of the first axis of 3-d or larger inputs a kernel takes at a time
    (``_chunks``; 2-d inputs are one chunk): as many as keep the probabilities within
    the size of the largest operand (q, k, v or the output), at least one. Each index's
    products are separate matrix products in NumPy's batched matmul too, so the chunks
    give the same bits (tested)."""
    length, s = q_shape[-2], k_shape[-2]
    largest = max(math.prod(q_shape), math.prod(k_shape), math.prod(v_shape))
    largest = max(largest, math.prod(q_shape[:-1]) * v_shape[-1])
    per_row = math.prod(q_shape[1:-2]) * length * s
    return max(1, largest // max(per_row, 1))


def _chunk_scores(q_shape: tuple, k_shape: tuple, v_shape: tuple) -> int:
    """How many scores (probabilities) one chunk of a kernel holds."""
    if len(q_shape) == 2:
        return q_shape[0] * k_shape[0]
    rows = min(_rows(q_shape, k_shape, v_shape), q_shape[0])
    return rows * math.prod(q_shape[1:-1]) * k_shape[-2]


def _scratch(
    q: Cell, k: Cell, v: Cell, rest, results, grad: bool, causal: bool, dropout: bool
) -> int:
    """The bytes a kernel allocates besides its outputs: a chunk's probabilities (and,
    for the gradient, its scores' gradient), their rows' maxima and sums and which rows
    have nothing to attend to, a chunk's uniforms and dropout mask, a boolean mask's
    negation, the causal mask, and in float16 a float32 copy of each float16 input and
    of each result before rounding."""
    chunk = _chunk_scores(q.shape, k.shape, v.shape)
    half = q.dtype is HALF
    itemsize = 4 if half else q.dtype.itemsize
    total = chunk * itemsize * (2 if grad else 1)
    if dropout:  # the uniforms and the mask; the gradient also the dropped probabilities
        total += chunk * (5 + (itemsize if grad else 0))
    rows = chunk // max(k.shape[-2], 1)
    total += rows * (2 * itemsize + 1)  # the rows' maxima, sums and which are empty
    total += sum(math.prod(c.shape) for c in rest if c.dtype == np.bool_)
    if causal:
        total += 2 * q.shape[-2] * k.shape[-2]
    if half:
        widened = [c.shape for c in (q, k, v, *rest) if c.dtype is HALF]
        total += 4 * sum(math.prod(shape) for shape in (*widened, *results))
    return total


def _chunks(q, k, v, mask):
    """(index, mask) for each chunk of the first axis (``_rows``): slices, with the
    mask's own slice where it has that axis."""
    if q.ndim == 2:
        yield slice(None), mask
        return
    rows = _rows(q.shape, k.shape, v.shape)
    sliced = mask is not None and mask.ndim == q.ndim and mask.shape[0] != 1
    for start in range(0, q.shape[0], rows):
        index = slice(start, start + rows)
        yield index, (mask[index] if sliced else mask)


class Attention(Op):
    name = "scaled_dot_product_attention"

    def __init__(
        self, scale: float, causal: bool, mask_kind: str | None, dropout: float = 0.0, seed=None
    ):
        self.scale = scale
        self.causal = causal
        self.mask_kind = mask_kind  # None, "bool" or "float"
        self.dropout = dropout  # the chance of zeroing a probability
        self.seed = seed  # of the dropout mask (None without dropout)
        self.retain_inputs = (0, 1, 2, 3) if mask_kind else (0, 1, 2)

    def infer(self, q: Cell, k: Cell, v: Cell, *mask: Cell):
        dtype = float_dtype(self, q, k, v)
        if len(q.shape) < 2 or len(k.shape) != len(q.shape) or len(v.shape) != len(q.shape):
            raise self.error(
                "q, k and v must be (..., L, E), (..., S, E) and (..., S, Ev)", q, k, v
            )
        if k.shape[:-2] != q.shape[:-2] or v.shape[:-2] != q.shape[:-2]:
            raise self.error("q, k and v must have the same leading dimensions", q, k, v)
        if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
            raise self.error("k must be (..., S, E) for q (..., L, E), and v (..., S, Ev)", q, k, v)
        if k.shape[-2] == 0:
            raise self.error("k and v have no positions to attend to (S = 0)", q, k, v)
        scores = (*q.shape[:-1], k.shape[-2])
        if mask:
            (m,) = mask
            try:
                fits = np.broadcast_shapes(m.shape, scores) == scores
            except ValueError:
                fits = False
            if not fits:
                raise self.error(f"mask must broadcast to the scores' shape {scores}", q, k, v, m)
            if m.dtype != np.bool_ and m.dtype != dtype:
                raise self.error(f"mask must be bool or {dtype}", q, k, v, m)
        return [((*q.shape[:-1], v.shape[-1]), dtype)]

    def probabilities(self, xp, q, k, mask, future):
        """softmax(q kᵀ · scale + mask) along the last axis, in a new (..., L, S) array;
        ``future`` (L, S): where the causal mask hides a score (None without it)."""
        p = xp.matmul(q, xp.swapaxes(k, -1, -2))
        p *= p.dtype.type(self.scale)
        if self.mask_kind == "float":
            p += mask
        elif self.mask_kind == "bool":
            xp.copyto(p, -xp.inf, where=~mask)
        if future is not None:
            xp.copyto(p, -xp.inf, where=future)
        top = p.max(axis=-1, keepdims=True)
        empty = top == -xp.inf  # rows with nothing to attend to: 0, as PyTorch's
        xp.copyto(top, 0.0, where=empty)
        p -= top
        xp.exp(p, out=p)
        total = p.sum(axis=-1, keepdims=True)
        xp.copyto(total, 1.0, where=empty)
        p /= total
        return p

    def future(self, xp, q, k):
        """The causal mask: True above the diagonal of (L, S) (None without ``causal``)."""
        if not self.causal:
            return None
        return xp.triu(xp.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=1)

    def forward(self, xp, q, k, v, *mask):
        if q.dtype is HALF:
            return in_float32(self.forward, xp, q, k, v, *mask)
        out = xp.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
        future = self.future(xp, q, k)
        uniforms = self.uniforms(xp)
        for index, m in _chunks(q, k, v, mask[0] if mask else None):
            p = self.probabilities(xp, q[index], k[index], m, future)
            if uniforms is not None:
                self.drop(p, self.kept(uniforms, p))
            xp.matmul(p, v[index], out=out[index])
            del p  # before the next chunk's is made
        return out

    def uniforms(self, xp):
        """The generator of the dropout mask's uniforms, at the start of its stream (None
        without dropout)."""
        return None if not self.dropout else backend.generator(xp, self.seed)

    def kept(self, uniforms, p):
        """The next ``p.size`` uniforms of the stream: where they are at least the
        dropout chance, the probability is kept."""
        return uniforms.random(p.size, dtype=np.float32).reshape(p.shape) >= self.dropout

    def drop(self, p, kept) -> None:
        """``p`` (in place) zeroed where not ``kept``, the rest scaled by 1 / (1 - chance)."""
        p *= kept
        p *= p.dtype.type(1.0 / (1.0 - self.dropout))

    def workspace(self, q: Cell, k: Cell, v: Cell, *mask: Cell) -> int:
        """A chunk's probabilities and what goes with them (``_scratch`` lists it)."""
        return _scratch(
            q,
            k,
            v,
            mask,
            results=((*q.shape[:-1], v.shape[-1]),),
            grad=False,
            causal=self.causal,
            dropout=bool(self.dropout),
        )

    def cost(self, in_metas, out_metas):
        """q kᵀ and p v (two flops a multiply-add), and the softmax's 12 a score."""
        scores, e, ev = _sizes(in_metas)
        _, nbytes = super().cost(in_metas, out_metas)
        return scores * (2.0 * (e + ev) + 12.0 + (4.0 if self.dropout else 0.0)), nbytes

    def backward(self, ctx, g):
        mask = ctx.inputs[3:]
        grad_op = AttentionGrad(self.scale, self.causal, self.mask_kind, self.dropout, self.seed)
        dq, dk, dv = apply(grad_op, *ctx.inputs, g)
        need = ctx.needs_grad
        return (
            dq if need[0] else None,
            dk if need[1] else None,
            dv if need[2] else None,
            *[None] * len(mask),
        )


class AttentionGrad(Op):
    """(dq, dk, dv) of ``scaled_dot_product_attention`` from its inputs and its output's
    gradient g, the probabilities p computed again: dv = pᵀ g; dp = g vᵀ;
    ds = p (dp - rowsum(dp p)) · scale; dq = ds k; dk = dsᵀ q."""

    name = "scaled_dot_product_attention_grad"
    n_outputs = 3
    differentiable = False

    def __init__(
        self, scale: float, causal: bool, mask_kind: str | None, dropout: float = 0.0, seed=None
    ):
        self.forward_op = Attention(scale, causal, mask_kind, dropout, seed)

    def infer(self, q: Cell, k: Cell, v: Cell, *rest: Cell):
        return [(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype)]

    def forward(self, xp, q, k, v, *rest):
        if q.dtype is HALF:
            return in_float32(self.forward, xp, q, k, v, *rest)
        *mask, g = rest
        dq, dk, dv = xp.empty_like(q), xp.empty_like(k), xp.empty_like(v)
        attention = self.forward_op
        future = attention.future(xp, q, k)
        uniforms = attention.uniforms(xp)
        for i, m in _chunks(q, k, v, mask[0] if mask else None):
            p = attention.probabilities(xp, q[i], k[i], m, future)
            ds = xp.matmul(g[i], xp.swapaxes(v[i], -1, -2))  # the dropped ones' gradient
            if uniforms is None:
                xp.matmul(xp.swapaxes(p, -1, -2), g[i], out=dv[i])
            else:
                kept = attention.kept(uniforms, p)
                dropped = p.copy()
                attention.drop(dropped, kept)
                xp.matmul(xp.swapaxes(dropped, -1, -2), g[i], out=dv[i])
                del dropped
                attention.drop(ds, kept)  # now the probabilities' gradient
                del kept
            ds *= p
            p *= ds.sum(axis=-1, keepdims=True)
            ds -= p
            del p
            ds *= ds.dtype.type(attention.scale)
            xp.matmul(ds, k[i], out=dq[i])
            xp.matmul(xp.swapaxes(ds, -1, -2), q[i], out=dk[i])
            del ds
        return dq, dk, dv

    def workspace(self, q: Cell, k: Cell, v: Cell, *rest: Cell) -> int:
        """The forward's, and the scores' gradient beside the probabilities."""
        return _scratch(
            q,
            k,
            v,
            rest,
            results=(q.shape, k.shape, v.shape),
            grad=True,
            causal=self.forward_op.causal,
            dropout=bool(self.forward_op.dropout),
        )

    def cost(self, in_metas, out_metas):
        """The probabilities again, and four products."""
        scores, e, ev = _sizes(in_metas)
        _, nbytes = super().cost(in_metas, out_metas)
        dropout = 8.0 if self.forward_op.dropout else 0.0
        return scores * (2.0 * (2 * e + 2 * ev + e) + 16.0 + dropout), nbytes


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    causal: bool = False,
    scale: float | None = None,
    seed: Seed = None,
) -> Tensor:
    """``softmax(q kᵀ · scale + mask) v`` as one op, with PyTorch's conventions (module
    docstring): q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev); ``scale``
    1 / sqrt(E) by default; ``dropout_p`` drops probabilities (pass 0 when evaluating, as
    with PyTorch's), the mask's seed drawn from minidtr's default generator when None.
    Keeps q, k and v for backward, never the (..., L, S) probabilities. The mask gets no
    gradient (a mask that requires one is refused)."""
    name = Attention.name
    tensors = [expect_tensor(name, t, what) for t, what in ((q, "q"), (k, "k"), (v, "v"))]
    kind = None
    if mask is not None:
        expect_tensor(name, mask, "mask")
        if mask.requires_grad:
            raise ValueError(f"{name}: the mask gets no gradient; pass mask.detach()")
        kind = "bool" if mask.dtype == np.bool_ else "float"
        tensors.append(mask)
    if not isinstance(causal, bool):
        raise TypeError(f"{name}: causal must be True or False, got {causal!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape and q.shape[-1] else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"{name}: scale must be a positive number, got {scale!r}")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"{name}: dropout_p must be a number, got {dropout_p!r}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{name}: dropout_p must be in [0, 1), got {dropout_p}")
    seed = next_seed(seed, name) if dropout_p else None
    return apply(Attention(float(scale), causal, kind, float(dropout_p), seed), *tensors)
