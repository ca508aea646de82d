"""Dead chains cut every few recipes instead of every ``CHAIN_CHECK`` (1,024), so that the
random programs of the property tests, a few dozen ops deep, meet the cut
(``Lifetimes.cut_dead_chains``) again and again."""

import contextlib

import pytest

from minidtr.runtime import lifetime
from minidtr.runtime.fast import hotpath


@contextlib.contextmanager
def short_chains(every: int = 3, walk: int = 4):
    with pytest.MonkeyPatch.context() as patch:
        for module in (lifetime, hotpath):  # (the hot path holds its own name for it)
            patch.setattr(module, "CHAIN_CHECK", every)
        patch.setattr(lifetime, "CHAIN_WALK", walk)
        yield
