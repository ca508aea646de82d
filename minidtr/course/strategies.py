"""Hypothesis strategies for the graders: programs (``programs.py``) with their budgets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from .programs import ALL_KINDS, Program, build_program

CHOICE = st.tuples(
    st.integers(0, 99), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 3)
)


def programs(
    kinds: Sequence[str] = ALL_KINDS,
    scalar: bool = False,
    min_lines: int = 3,
    max_lines: int = 30,
    ratios: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    weights: dict[str, int] | None = None,
) -> Any:
    """Programs of ``min_lines`` to ``max_lines`` instructions of ``kinds`` (drawn by
    ``weights``: ``programs.WEIGHTS`` by default), each with a budget ratio from
    ``ratios`` (0: the program's floor; shrinking goes towards it)."""
    return st.builds(
        lambda choices, ratio: build_program(choices, ratio, kinds, scalar, weights),
        st.lists(CHOICE, min_size=min_lines, max_size=max_lines),
        st.sampled_from(list(ratios)),
    )


def fixed(kinds: Sequence[str] = ALL_KINDS, scalar: bool = False) -> list[Program]:
    """A few programs every grader tries first: a chain, a fan-out, and one with reads."""
    chain = [("leaf", 0, 0, 2)] + [("unary", 10**5, 0, 0)] * 6
    chain += [("read", 0, 0, 0), ("read", 3, 0, 0)]
    fan = [("leaf", 0, 0, 3), ("leaf", 0, 0, 1)]
    fan += [("binary", i, i + 1, 0) for i in range(8)] + [("read", 1, 0, 0)]
    wide = [("leaf", 0, 0, i % 4) for i in range(4)] + [("unary", i, 0, 0) for i in range(10)]
    out = []
    for choices, ratio in ((chain, 0.2), (fan, 0.3), (wide, 0.0)):
        out.append(build_program(choices, ratio, kinds, scalar))
    return out
