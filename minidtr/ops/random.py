"""Randomness that replays: seeds live in recipes, so recomputation is bit-identical.

Every random op (dropout, randn, rand) takes a seed as a static attribute.
Without an explicit seed one is drawn from minidtr's default generator
(``manual_seed`` resets it), so a program is reproducible end to end.
"""

from __future__ import annotations

import numpy as np

_default = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset minidtr's default generator (used for seeds and parameter initialization)."""
    global _default
    _default = np.random.default_rng(seed)


def default_generator() -> np.random.Generator:
    return _default


def next_seed(seed: int | np.random.Generator | None = None) -> int:
    """An int seed: ``seed`` itself, or one drawn from a Generator or the default one."""
    if seed is None:
        seed = _default
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**63 - 1))
    return int(seed)
