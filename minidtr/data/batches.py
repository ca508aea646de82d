"""A train/test split and a seeded stream of minibatch indices."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Split:
    """Inputs and targets of a train and a test set (arrays, or ``PackedTrees`` for trees)."""

    train_x: Any
    train_y: np.ndarray
    test_x: Any
    test_y: np.ndarray

    def __repr__(self) -> str:
        return f"Split(train={len(self.train_y)}, test={len(self.test_y)})"


def split_indices(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded shuffle of ``range(n)`` cut into (train, test) index arrays."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(n * test_fraction)))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def minibatch_indices(n: int, batch: int, seed: int) -> Iterator[np.ndarray]:
    """An endless stream of index batches: each epoch a fresh seeded permutation of
    ``range(n)``, cut into batches of ``batch`` (the last short one dropped)."""
    if not 0 < batch <= n:
        raise ValueError(f"batch must be between 1 and the dataset size {n}, got {batch}")
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch + 1, batch):
            yield order[start : start + batch]
