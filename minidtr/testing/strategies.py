"""Hypothesis strategies for rematerialization tests (needs the ``hypothesis`` package).

- ``random_programs()``: random DAG programs (``RandomProgram``) with views,
  broadcasting, reused values, dropped references, reads and dropout.
- ``training_loops()``: one of the small training loops of ``programs`` with
  random sizes (an MLP, an LSTM over a random length, a random tree, a conv net).
- ``heuristics()`` / ``deallocs()``: the policy names.
- ``budget_fractions()``: where in [smallest feasible, unbounded peak] to put a budget.

``minimal_budget(fn, ...)`` finds the smallest feasible budget of a program by
bisection, so a property test can draw budgets between it and the peak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from ..runtime import BudgetError, Runtime
from ..runtime.heuristics import HEURISTIC_NAMES
from ..runtime.runtime import DEALLOC_POLICIES
from .equivalence import run_under
from .programs import (
    BINARY,
    UNARY,
    Instruction,
    RandomProgram,
    conv_training,
    lstm_unrolled,
    mlp_training,
    random_tree,
)


@st.composite
def random_programs(draw, max_ops: int = 12, max_inputs: int = 3, size: int = 4) -> RandomProgram:
    n_inputs = draw(st.integers(1, max_inputs))
    n_ops = draw(st.integers(1, max_ops))
    instructions: list[Instruction] = []
    alive = list(range(n_inputs))
    for k in range(n_ops):
        op = draw(st.sampled_from(UNARY + BINARY))
        arity = 2 if op in BINARY else 1
        args = tuple(draw(st.sampled_from(alive)) for _ in range(arity))
        new = n_inputs + k
        droppable = [i for i in alive if i >= n_inputs]
        drop = tuple(draw(st.sets(st.sampled_from(droppable), max_size=2))) if droppable else ()
        instructions.append(Instruction(op, args, drop, read=draw(st.booleans())))
        alive = [i for i in alive if i not in drop] + [new]
    outputs = tuple(draw(st.lists(st.sampled_from(alive), min_size=1, max_size=3, unique=True)))
    seed = draw(st.integers(0, 2**16))
    return RandomProgram(n_inputs, size, instructions, outputs, seed)


def training_loops() -> st.SearchStrategy[tuple[str, Callable[[], Any]]]:
    seeds = st.integers(0, 1000)
    return st.one_of(
        st.builds(
            lambda d, s: ("mlp", mlp_training(depth=d, steps=2, seed=s)), st.integers(1, 4), seeds
        ),
        st.builds(lambda n, s: ("lstm", lstm_unrolled(length=n, seed=s)), st.integers(1, 8), seeds),
        st.builds(lambda n, s: ("tree", random_tree(leaves=n, seed=s)), st.integers(2, 9), seeds),
        st.builds(lambda s: ("conv", conv_training(steps=2, seed=s)), seeds),
    )


def heuristics() -> st.SearchStrategy[str]:
    return st.sampled_from(HEURISTIC_NAMES)


def deallocs() -> st.SearchStrategy[str]:
    return st.sampled_from(DEALLOC_POLICIES)


def budget_fractions() -> st.SearchStrategy[float]:
    return st.floats(0.0, 1.0)


def unbounded_peak(fn: Callable[[], Any], cost: str = "flops", dealloc: str = "eager") -> int:
    runtime = Runtime(cost=cost, dealloc=dealloc)
    run_under(fn, runtime)
    return runtime.stats()["peak_memory"]


def minimal_budget(
    fn: Callable[[], Any],
    heuristic: str = "dtr",
    dealloc: str = "eager",
    cost: str = "flops",
    peak: int | None = None,
    max_slowdown: float = 20.0,
    rebuild_orphans: bool = True,
) -> int:
    """The smallest budget (bytes, to 1% of the peak) under which ``fn`` runs without
    thrashing past ``max_slowdown``, by bisection."""
    hi = unbounded_peak(fn, cost, dealloc) if peak is None else peak
    lo = 0
    tolerance = max(1, hi // 100)
    while hi - lo > tolerance:
        mid = (lo + hi) // 2
        try:
            runtime = Runtime(
                budget=mid,
                heuristic=heuristic,
                dealloc=dealloc,
                cost=cost,
                max_slowdown=max_slowdown,
                rebuild_orphans=rebuild_orphans,
            )
            run_under(fn, runtime)
            hi = mid
        except BudgetError:
            lo = mid
    return hi
