"""Counting sequences for next-token prediction, generated.

Each sequence counts through a ring of ``vocab`` tokens from a random start with
a random stride: ``x[t+1] = (x[t] + d) mod vocab``, ``d`` drawn from
``1..max_stride``. The targets are the tokens after the first: the first of
them is a guess among the strides (one token does not show the stride), and
every later one is determined by the two tokens before it: a small grammar
that an LSTM or a causal Transformer learns in a few hundred steps.
"""

from __future__ import annotations

import numpy as np

from .batches import Split, checked_count, checked_split, split_indices


def counting_sequences(
    n: int = 2000,
    length: int = 12,
    vocab: int = 16,
    max_stride: int = 3,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> Split:
    """Inputs ``x[:, :-1]`` and next-token targets ``x[:, 1:]``, int64 ``(n, length)``
    each, split into train and test."""
    where = "counting_sequences"
    checked_split(where, n, test_fraction, seed)
    checked_count(where, "length", length, 2)
    if not 1 <= max_stride < vocab:
        raise ValueError(
            f"{where}: need 1 <= max_stride < vocab, got max_stride={max_stride}, vocab={vocab}"
        )
    rng = np.random.default_rng(seed)
    start = rng.integers(0, vocab, size=(n, 1))
    stride = rng.integers(1, max_stride + 1, size=(n, 1))
    tokens = (start + stride * np.arange(length + 1)[None, :]) % vocab
    tokens = tokens.astype(np.int64)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    train, test = split_indices(n, test_fraction, seed)
    return Split(inputs[train], targets[train], inputs[test], targets[test])
