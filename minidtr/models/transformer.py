"""A small Transformer encoder (Vaswani et al., 2017) over token sequences.

Token and learned position embeddings, then pre-norm layers
``x + attention(layer_norm(x))`` and ``x + mlp(layer_norm(x))`` with GELU,
a final layer norm and a linear head per position. Attention is multi-head
scaled dot-product attention written with minidtr ops; ``causal=True`` adds a
mask so position t attends only to positions <= t (for next-token
prediction).
"""

from __future__ import annotations

import math

import numpy as np

from .. import nn
from .. import ops as F
from ..nn.init import Rng
from ..tensor import Tensor, arange, tensor
from .build import Build

MASKED = -1e9


class MultiHeadAttention(nn.Module):
    def __init__(self, b: Build, dim: int, heads: int):
        super().__init__()
        if dim % heads != 0:
            raise ValueError(f"attention: dim {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.qkv = b.linear(dim, 3 * dim)
        self.out = b.linear(dim, dim)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        b, t, d = x.shape
        dh = d // self.heads

        def heads(part: Tensor) -> Tensor:  # (B, T, D) -> (B, H, T, Dh)
            return F.transpose(F.reshape(part, (b, t, self.heads, dh)), (0, 2, 1, 3))

        q, k, v = (heads(p) for p in F.split(self.qkv(x), 3, axis=2))
        scores = F.matmul(q, F.transpose(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(dh))
        if mask is not None:
            scores = scores + mask
        context = F.matmul(F.softmax(scores, axis=-1), v)
        merged = F.reshape(F.transpose(context, (0, 2, 1, 3)), (b, t, d))
        return self.out(merged)


class EncoderLayer(nn.Module):
    def __init__(self, b: Build, dim: int, heads: int):
        super().__init__()
        self.norm1 = b.layer_norm(dim)
        self.attention = MultiHeadAttention(b, dim, heads)
        self.norm2 = b.layer_norm(dim)
        self.mlp = nn.Sequential(b.linear(dim, 4 * dim), nn.GELU(), b.linear(4 * dim, dim))

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = x + self.attention(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(
        self,
        vocab: int,
        max_length: int,
        dim: int = 32,
        heads: int = 4,
        layers: int = 2,
        causal: bool = True,
        rng: Rng = None,
        device: str = "cpu",
    ):
        super().__init__()
        b = Build.of(rng, device)
        self.max_length = max_length
        self.causal = causal
        self.tokens = b.embedding(vocab, dim)
        self.positions = b.embedding(max_length, dim)
        self.layers = nn.ModuleList(EncoderLayer(b, dim, heads) for _ in range(layers))
        self.norm = b.layer_norm(dim)
        self.head = b.linear(dim, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        """(N, T) int tokens -> (N, T, vocab) scores."""
        n, t = tokens.shape
        if t > self.max_length:
            raise ValueError(f"Transformer: sequence length {t} > max_length {self.max_length}")
        x = self.tokens(tokens) + self.positions(arange(t, device=tokens.device))
        mask = None
        if self.causal:
            future = np.triu(np.ones((t, t), dtype=bool), k=1)
            mask = tensor(np.where(future, MASKED, 0.0).astype(x.dtype), device=x.device)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.norm(x))
