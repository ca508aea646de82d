"""A train/test split and a seeded stream of minibatch indices."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops.random import checked_seed


@dataclass
class Split:
    """Inputs and targets of a train and a test set (arrays, or ``PackedTrees`` for trees)."""

    train_x: Any
    train_y: np.ndarray
    test_x: Any
    test_y: np.ndarray

    def __repr__(self) -> str:
        return f"Split(train={len(self.train_y)}, test={len(self.test_y)})"


def checked_count(where: str, what: str, value: int, minimum: int) -> int:
    """``value`` as an int >= ``minimum``, else a TypeError or ValueError naming
    ``where``'s argument ``what`` (NumPy's own errors name neither)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {what} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{where}: {what} must be at least {minimum}, got {value}")
    return int(value)


def checked_number(where: str, what: str, value: float, low: float, high: float) -> float:
    """``value`` as a finite float in [``low``, ``high``], else a ValueError naming
    ``where``'s argument ``what``."""
    number = float(value)
    if not (math.isfinite(number) and low <= number <= high):
        expected = f"a finite number >= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise ValueError(f"{where}: {what} must be {expected}, got {value}")
    return number


def checked_split(where: str, n: int, test_fraction: float, seed: int) -> None:
    """Refuse a ``seed``, an ``n`` or a ``test_fraction`` with which ``where`` could not
    make its data and cut it into a train and a test set, neither empty."""
    checked_seed(seed, where)
    checked_count(where, "n", n, 2)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"{where}: test_fraction must be in (0, 1), got {test_fraction}")
    if _test_size(n, test_fraction) >= n:
        raise ValueError(
            f"{where}: n={n} with test_fraction={test_fraction} leaves no training examples"
        )


def _test_size(n: int, test_fraction: float) -> int:
    return max(1, int(round(n * test_fraction)))


def split_indices(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded shuffle of ``range(n)`` cut into (train, test) index arrays."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_test = _test_size(n, test_fraction)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def minibatch_indices(n: int, batch: int, seed: int) -> Iterator[np.ndarray]:
    """An endless stream of index batches: each epoch a fresh seeded permutation of
    ``range(n)``, cut into batches of ``batch`` (the last short one dropped). Its
    arguments are checked at the call, not at the first batch."""
    if not 0 < batch <= n:
        raise ValueError(
            f"minibatch_indices: batch must be between 1 and the dataset size {n}, got {batch}"
        )
    return _epochs(n, batch, np.random.default_rng(checked_seed(seed, "minibatch_indices")))


def _epochs(n: int, batch: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch + 1, batch):
            yield order[start : start + batch]
