"""Hypothesis strategies for rematerialization tests (needs the ``hypothesis`` package).

Configurations (compose them with your own strategies for seeds and architectures):

- ``budget_ratios(min_ratio=0.2, max_ratio=0.95)``: budgets as ratios of the
  unbounded peak (floats, what ``assert_remat_equivalent`` takes as ``budgets``).
- ``budget_fractions()``: where in [smallest feasible, unbounded peak] to put a
  budget (with ``minimal_budget``), for tests that must never draw an infeasible one.
- ``heuristics(names=None)`` / ``deallocs(names=None)``: policy names, all by default.
- ``remat_configs(ratio=..., heuristic=..., dealloc=...)``: one configuration as
  keyword arguments: ``assert_remat_equivalent(fn, **config)``.

Programs (what minidtr property-tests itself with):

- ``random_programs(max_ops=12, max_inputs=3, size=4, ops=None)``: random DAG
  programs (``RandomProgram``) with views, broadcasting, reused values, dropped
  references, reads and dropout.
- ``training_loops(kinds=None)``: one of the small training loops of
  ``programs`` with random sizes and seeds (an MLP, an LSTM over a random length,
  a random tree, a conv net), as ``(kind, fn)``.

Inputs for ``check_gradients``:

- ``float64_arrays(shape, scale=1.0)``: float64 arrays of standard normal values (from a
  drawn seed: no ties and no exact zeros, where ops like relu and max have kinks).

``unbounded_peak(fn)`` and ``minimal_budget(fn, ...)`` (the smallest feasible
budget by bisection of live runs) are plain helpers.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
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


def random_programs(
    max_ops: int = 12,
    max_inputs: int = 3,
    size: int = 4,
    ops: tuple[str, ...] | None = None,
) -> st.SearchStrategy[RandomProgram]:
    """A ``RandomProgram``: 1..``max_inputs`` random ``size`` x ``size`` float64 inputs
    (leaves with gradients), 1..``max_ops`` ops drawn from ``ops`` (default: every name
    in ``programs.UNARY`` and ``programs.BINARY``) on earlier values, each maybe read
    with ``.numpy()`` and dropping up to two earlier handles; then a scalar loss over
    1..3 of the values still held, and backward."""
    names = UNARY + BINARY if ops is None else tuple(ops)
    unknown = [name for name in names if name not in UNARY + BINARY]
    if unknown or not names:
        raise ValueError(f"ops must be a non-empty subset of {UNARY + BINARY}, got {names}")
    if max_ops < 1 or max_inputs < 1 or size < 1:
        raise ValueError(
            f"max_ops, max_inputs and size must be >= 1, got {max_ops}, {max_inputs}, {size}"
        )
    return _random_programs(max_ops, max_inputs, size, names)


@st.composite
def _random_programs(
    draw, max_ops: int, max_inputs: int, size: int, names: tuple[str, ...]
) -> RandomProgram:
    n_inputs = draw(st.integers(1, max_inputs))
    n_ops = draw(st.integers(1, max_ops))
    instructions: list[Instruction] = []
    alive = list(range(n_inputs))
    for k in range(n_ops):
        op = draw(st.sampled_from(names))
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


TRAINING_LOOPS = ("mlp", "lstm", "tree", "conv")


def training_loops(
    kinds: tuple[str, ...] | None = None,
) -> st.SearchStrategy[tuple[str, Callable[[], Any]]]:
    """``(kind, fn)`` for one of ``kinds`` (default all of ``TRAINING_LOOPS``), seed 0..1000:
    ``mlp``: ``mlp_training`` of depth 1..4, two SGD steps; ``lstm``: ``lstm_unrolled``
    over 1..8 steps; ``tree``: ``random_tree`` of 2..9 leaves; ``conv``:
    ``conv_training``, two SGD steps."""
    kinds = _names(kinds, TRAINING_LOOPS, "kinds")
    seeds = st.integers(0, 1000)
    builders = {
        "mlp": st.builds(
            lambda d, s: ("mlp", mlp_training(depth=d, steps=2, seed=s)), st.integers(1, 4), seeds
        ),
        "lstm": st.builds(
            lambda n, s: ("lstm", lstm_unrolled(length=n, seed=s)), st.integers(1, 8), seeds
        ),
        "tree": st.builds(
            lambda n, s: ("tree", random_tree(leaves=n, seed=s)), st.integers(2, 9), seeds
        ),
        "conv": st.builds(lambda s: ("conv", conv_training(steps=2, seed=s)), seeds),
    }
    return st.one_of(*(builders[kind] for kind in kinds))


def _names(names: Iterable[str] | None, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    """The names chosen (one name alone as itself, not its letters)."""
    chosen = known if names is None else (names,) if isinstance(names, str) else tuple(names)
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise ValueError(f"{what} must be a non-empty subset of {known}, got {chosen}")
    return chosen


def heuristics(names: Iterable[str] | None = None) -> st.SearchStrategy[str]:
    """A heuristic name from ``names`` (default: every one, ``HEURISTIC_NAMES``)."""
    return st.sampled_from(_names(names, HEURISTIC_NAMES, "heuristics"))


def deallocs(names: Iterable[str] | None = None) -> st.SearchStrategy[str]:
    """A deallocation policy from ``names`` (default: eager, banish, ignore)."""
    return st.sampled_from(_names(names, DEALLOC_POLICIES, "deallocs"))


def budget_ratios(min_ratio: float = 0.2, max_ratio: float = 0.95) -> st.SearchStrategy[float]:
    """A budget as a ratio of the unbounded peak, in [``min_ratio``, ``max_ratio``]. Low
    ratios can be below a program's floor: choose ``on_budget_error`` accordingly."""
    if not 0.0 < min_ratio <= max_ratio < math.inf:
        raise ValueError(
            f"need 0 < min_ratio <= max_ratio, got min_ratio={min_ratio}, max_ratio={max_ratio}"
        )
    return st.floats(min_ratio, max_ratio)


def budget_fractions() -> st.SearchStrategy[float]:
    """A position in [0, 1] between a program's smallest feasible budget and its peak."""
    return st.floats(0.0, 1.0)


def remat_configs(
    ratio: st.SearchStrategy[float] | None = None,
    heuristic: st.SearchStrategy[str] | None = None,
    dealloc: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[dict[str, list]]:
    """One configuration as ``assert_remat_equivalent`` keyword arguments (``budgets``,
    ``heuristics``, ``dealloc``: one-element lists), from a strategy for each. Defaults:
    ``budget_ratios()``, ``heuristics()`` (all), eager deallocation only."""
    return st.builds(
        lambda r, h, d: {"budgets": [r], "heuristics": [h], "dealloc": [d]},
        budget_ratios() if ratio is None else ratio,
        heuristics() if heuristic is None else heuristic,
        st.just("eager") if dealloc is None else dealloc,
    )


def unbounded_peak(fn: Callable[[], Any], cost: str = "flops", dealloc: str = "eager") -> int:
    """The counted peak of ``fn`` run unbounded on a fresh allocator (constants included)."""
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
                max_wall_slowdown=None,  # the answer must not depend on the machine's speed
                rebuild_orphans=rebuild_orphans,
            )
            with probing():
                run_under(fn, runtime)
            hi = mid
        except BudgetError:
            lo = mid
    return hi


@contextlib.contextmanager
def probing():
    """Budgets tried by a search fail often and on purpose: no garbage collection before
    each BudgetError (``minidtr.runtime.eviction.COLLECT_BEFORE_FAILING``)."""
    from ..runtime import eviction

    previous, eviction.COLLECT_BEFORE_FAILING = eviction.COLLECT_BEFORE_FAILING, False
    try:
        yield
    finally:
        eviction.COLLECT_BEFORE_FAILING = previous


def float64_arrays(shape: tuple[int, ...], scale: float = 1.0) -> st.SearchStrategy[np.ndarray]:
    """float64 arrays of ``shape``: ``scale`` times standard normal values drawn from a seed
    (hypothesis draws and shrinks the seed), for ``check_gradients``. Random values have no
    ties and no exact zeros, the points where relu, max or abs have no derivative."""
    shape = tuple(shape)
    return st.integers(0, 2**32 - 1).map(
        lambda seed: scale * np.random.default_rng(seed).standard_normal(shape)
    )
