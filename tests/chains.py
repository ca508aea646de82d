"""Helpers for the tests of ``Lifetimes.cut_dead_chains``: cutting every few recipes, and
counting the recipes above a value."""

import contextlib

import pytest

from minidtr.runtime import lifetime
from minidtr.runtime.fast import hotpath


@contextlib.contextmanager
def short_chains(every: int = 3, walk: int = 4):
    """Dead chains looked for every ``every`` recipes deep instead of every 1,024, so that
    the random programs of the property tests, a few dozen ops deep, meet the cut again
    and again."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (lifetime, hotpath):  # (the hot path holds its own name for it)
            patch.setattr(module, "CHAIN_CHECK", every)
        patch.setattr(lifetime, "CHAIN_WALK", walk)
        yield


def recipes_above(storage) -> int:
    """How many recipes a rebuild of ``storage`` could reach (the outputs of a multi-output
    op counted once): the length of the chain above it."""
    seen, recipes, stack = set(), set(), [storage]
    while stack:
        for parent in stack.pop().parents:
            if parent.op is not None and id(parent) not in seen:
                seen.add(id(parent))
                recipes.add(id(parent.producer))
                stack.append(parent)
    return len(recipes)
