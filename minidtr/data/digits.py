"""The handwritten digits that scikit-learn ships (UCI optdigits test set).

1,797 grayscale images of 8x8 pixels with 16 intensity levels, classes 0-9.
It is bundled inside scikit-learn, so it loads offline.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

from .batches import Split, checked_split, split_indices


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> Split:
    """Images as float32 ``(N, 1, 8, 8)`` scaled to [0, 1], labels int64 ``(N,)``,
    split into train and test by a seeded shuffle. Flatten the images to
    ``(N, 64)`` for an MLP."""
    table = digits_table()
    checked_split("load_digits", len(table), test_fraction, seed)
    images = (table[:, :64].reshape(-1, 8, 8) / 16.0).astype(np.float32)[:, None, :, :]
    labels = table[:, 64].astype(np.int64)
    train, test = split_indices(len(labels), test_fraction, seed)
    return Split(images[train], labels[train], images[test], labels[test])


def digits_table() -> np.ndarray:
    """The (1797, 65) table scikit-learn's ``load_digits`` reads: 64 pixels, then the
    label. Read from the file scikit-learn ships, without importing scikit-learn: the
    import takes about a second, and its tens of thousands of objects make every full
    collection of the process slower (one runs each time a budgeted runtime is entered
    after the cycle collector's oldest generation was collected: tens of milliseconds
    more). Where a release of scikit-learn keeps the file elsewhere, its own
    ``load_digits`` reads it (the same values)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the digits dataset comes with scikit-learn, which is not installed: "
            "pip install 'minidtr[data]' (or pip install scikit-learn)"
        )
    path = pathlib.Path(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    if path.is_file():
        return np.loadtxt(path, delimiter=",")
    from sklearn import datasets

    bunch = datasets.load_digits()
    return np.column_stack([bunch.data, bunch.target])
