"""Segmentation of rectangles and discs on noise, generated.

Each ``size`` x ``size`` image holds 1..``max_shapes`` shapes, each a
rectangle or a disc of random position and size, drawn brighter than a noisy
background (shapes drawn later cover earlier ones). The mask labels every
pixel: 0 background, 1 rectangle, 2 disc. Telling the two shapes apart needs
context beyond a pixel, which is what a U-Net's down/up path provides.
"""

from __future__ import annotations

import math

import numpy as np

from .batches import Split, checked_count, checked_number, checked_split, split_indices

CLASSES = ("background", "rectangle", "disc")


def shapes_segmentation(
    n: int = 600,
    size: int = 16,
    max_shapes: int = 3,
    noise: float = 0.3,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> Split:
    """Images float32 ``(n, 1, size, size)`` and masks int64 ``(n, size, size)``."""
    where = "shapes_segmentation"
    checked_split(where, n, test_fraction, seed)
    checked_count(where, "size", size, 8)
    checked_count(where, "max_shapes", max_shapes, 1)
    checked_number(where, "noise", noise, 0.0, math.inf)
    rng = np.random.default_rng(seed)
    images = rng.normal(0.0, noise, size=(n, 1, size, size)).astype(np.float32)
    masks = np.zeros((n, size, size), dtype=np.int64)
    rows, cols = np.mgrid[0:size, 0:size]
    for i in range(n):
        for _ in range(int(rng.integers(1, max_shapes + 1))):
            extent = int(rng.integers(size // 6 + 2, size // 2 + 1))
            top, left = rng.integers(0, size - extent + 1, size=2)
            if rng.random() < 0.5:
                inside = (
                    (rows >= top) & (rows < top + extent) & (cols >= left) & (cols < left + extent)
                )
                label = 1
            else:
                r = extent / 2.0
                inside = (rows - top - r + 0.5) ** 2 + (cols - left - r + 0.5) ** 2 <= r * r
                label = 2
            masks[i][inside] = label
            images[i, 0][inside] = 1.0 + rng.normal(0.0, noise, size=int(inside.sum()))
    train, test = split_indices(n, test_fraction, seed)
    return Split(images[train], masks[train], images[test], masks[test])
