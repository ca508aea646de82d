"""The handwritten digits that scikit-learn ships (UCI optdigits test set).

1,797 grayscale images of 8x8 pixels with 16 intensity levels, classes 0-9.
It is bundled inside scikit-learn, so it loads offline.
"""

from __future__ import annotations

import numpy as np

from .batches import Split, split_indices


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> Split:
    """Images as float32 ``(N, 1, 8, 8)`` scaled to [0, 1], labels int64 ``(N,)``,
    split into train and test by a seeded shuffle. Flatten the images to
    ``(N, 64)`` for an MLP."""
    try:
        from sklearn import datasets
    except ImportError:
        raise ImportError(
            "the digits dataset comes with scikit-learn, which is not installed: "
            "pip install 'minidtr[data]' (or pip install scikit-learn)"
        ) from None
    bunch = datasets.load_digits()
    images = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = bunch.target.astype(np.int64)
    train, test = split_indices(len(labels), test_fraction, seed)
    return Split(images[train], labels[train], images[test], labels[test])
