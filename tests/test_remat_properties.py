"""Property tests: random programs and training loops under random budgets, heuristics and
deallocation policies are bit-identical to the unbounded run and never pass the budget."""

import numpy as np
import pytest
from chains import short_chains
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minidtr as md
from minidtr.testing import assert_remat_equivalent, isolated_allocator, run_under
from minidtr.testing.floor import budget_floor
from minidtr.testing.strategies import (
    budget_fractions,
    deallocs,
    heuristics,
    minimal_budget,
    random_programs,
    training_loops,
    unbounded_peak,
)

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check_between_minimal_and_peak(fn, heuristic, dealloc, fraction, rebuild_orphans=True):
    with isolated_allocator():
        _check_between_minimal_and_peak(fn, heuristic, dealloc, fraction, rebuild_orphans)


def _check_between_minimal_and_peak(fn, heuristic, dealloc, fraction, rebuild_orphans):
    peak = unbounded_peak(fn, dealloc=dealloc)
    low = minimal_budget(fn, heuristic, dealloc, peak=peak, rebuild_orphans=rebuild_orphans)
    budget = int(low + fraction * (peak - low))
    # the minimal feasible budget and a random one above it must both be exact
    for nbytes in sorted({low, budget}):
        assert_remat_equivalent(
            fn,
            budgets=[nbytes],
            heuristics=[heuristic],
            dealloc=dealloc,
            allow_budget_error=nbytes != low,
            rebuild_orphans=rebuild_orphans,
        )


@SETTINGS
@given(random_programs(), heuristics(), deallocs(), budget_fractions(), st.booleans())
def test_random_programs_are_bit_identical_under_any_budget(
    program, heuristic, dealloc, frac, rebuild_orphans
):
    check_between_minimal_and_peak(program, heuristic, dealloc, frac, rebuild_orphans)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), heuristics(), deallocs(), budget_fractions(), st.booleans())
def test_random_programs_cutting_dead_chains_are_bit_identical(
    program, heuristic, dealloc, frac, rebuild_orphans
):
    """The same with a dead chain cut every three recipes (tests/short_chains.py): the
    values made constants are those computed, and the budget still holds."""
    with short_chains():
        check_between_minimal_and_peak(program, heuristic, dealloc, frac, rebuild_orphans)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_loops(), heuristics(), deallocs(), budget_fractions(), st.booleans())
def test_training_loops_are_bit_identical_under_any_budget(
    loop, heuristic, dealloc, frac, rebuild_orphans
):
    _, fn = loop
    check_between_minimal_and_peak(fn, heuristic, dealloc, frac, rebuild_orphans)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), heuristics(), st.floats(0.0, 0.9))
def test_infeasible_budget_raises_and_leaves_the_runtime_usable(program, heuristic, frac):
    with isolated_allocator() as allocator:
        _infeasible_budget(program, heuristic, frac, allocator)


def _infeasible_budget(program, heuristic, frac, allocator):
    peak = unbounded_peak(program)
    low = minimal_budget(program, heuristic, peak=peak)
    expected = run_under(program, md.Runtime(cost="flops"), fresh=False)
    too_small = int(frac * (low - 1))
    # the thrash guard off: this is about the BudgetError of a budget below the floor
    runtime = md.Runtime(budget=too_small, heuristic=heuristic, cost="flops", max_slowdown=None)
    try:
        outputs = run_under(program, runtime, fresh=False)
    except md.BudgetError as error:
        assert error.budget == too_small
        assert error.needed >= 0 and error.memory + error.needed > too_small
    else:
        for (name, a), (_, b) in zip(expected, outputs, strict=True):
            assert a.tobytes() == b.tobytes(), name
        assert runtime.stats_.peak_memory <= too_small
        # it fits below ``low``: the bisection assumes that what fits a budget fits every
        # larger one, which a greedy heuristic does not promise (random's draws, for one,
        # change with the budget). No run may fit below the physical floor, though.
        assert too_small >= budget_floor(program, heuristic).largest_op
    assert not runtime.active
    again = run_under(program, md.Runtime(cost="flops"), fresh=False)
    for (name, a), (_, b) in zip(expected, again, strict=True):
        assert a.tobytes() == b.tobytes(), name
    assert all(s.locks == 0 for s in allocator.eviction.candidates)


@pytest.mark.parametrize(
    "heuristic", ["dtr", "dtr_eq", "dtr_local", "msps", "lru", "size", "random"]
)
def test_every_heuristic_on_a_fixed_mlp(heuristic):
    from minidtr.testing.programs import mlp_training

    fn = mlp_training(depth=4, width=12, steps=2, seed=3)
    reports = assert_remat_equivalent(
        fn, budgets=[0.9, 0.7], heuristics=[heuristic], allow_budget_error=True
    )
    assert all(r["peak_memory"] <= r["budget"] for r in reports)


def test_budget_ratio_is_relative_to_the_unbounded_peak():
    from minidtr.testing.programs import lstm_unrolled

    fn = lstm_unrolled(length=6)
    peak = unbounded_peak(fn)
    (report,) = assert_remat_equivalent(fn, budgets=[0.8], heuristics=["dtr"])
    assert report["budget"] == int(0.8 * peak)
    assert report["evictions"] > 0 and report["remats"] > 0
    assert np.isfinite(report["slowdown"]) and report["slowdown"] >= 1.0


def test_pytorch_style_shape_ops_and_reductions_are_bit_identical_under_budgets():
    """max/min with dim (argmax and the values gathered there), argmax, squeeze,
    unsqueeze, permute, view and the dim= reductions, evicted and recomputed."""

    def train():
        rng = np.random.default_rng(5)
        w = md.tensor(rng.standard_normal((16, 16)) * 0.3, requires_grad=True)
        x = md.tensor(rng.standard_normal((64, 16)))
        losses = []
        for _ in range(2):
            h = (x @ w).tanh().unsqueeze(0).permute(1, 0, 2).view(64, 16)
            h = (h @ w).sigmoid() * h
            h = h - h.max(dim=1, keepdim=True).values + h.min(dim=0).values
            picked = (h.argmax(dim=1) + h.argmin()).astype(md.float64).view(-1, 1)
            loss = (h * picked).mean(dim=0).squeeze().sum(dim=[])
            w.grad = None
            loss.backward()
            with md.no_grad():
                w -= 0.1 * w.grad
            losses.append(loss)
        return losses, w

    reports = assert_remat_equivalent(train, budgets=[0.8, 0.9], heuristics=["dtr", "lru"])
    assert all(r["remats"] > 0 for r in reports)
