"""Memory really returns to NumPy: the array memory measured by tracemalloc during a
budgeted run stays within the budget plus one op's temporary workspace."""

import gc
import os
import tracemalloc

import numpy as np
import pytest

import minidtr as md
from minidtr.testing import isolated_allocator
from minidtr.testing.programs import mlp_training


def traced_peak_above_baseline(fn, runtime) -> tuple[int, int]:
    """Run ``fn`` in ``runtime``; return (tracemalloc peak - baseline, counted bytes at the
    baseline). tracemalloc sees every NumPy buffer (NumPy reports them to it)."""
    gc.collect()
    tracemalloc.reset_peak()
    baseline = tracemalloc.get_traced_memory()[0]
    counted = runtime_memory()
    with runtime:
        result = fn()
    del result
    peak = tracemalloc.get_traced_memory()[1]
    return peak - baseline, counted


def runtime_memory() -> int:
    return md.current_runtime().stats()["memory"]


@pytest.mark.skipif(
    os.environ.get("MINIDTR_AUDIT") == "1",
    reason="measures minidtr without the audit (which copies outputs, general path)",
)
def test_tracemalloc_peak_stays_within_budget_plus_workspace():
    width, batch = 192, 192
    tensor_bytes = width * batch * 8
    fn = mlp_training(depth=6, width=width, batch=batch, steps=2, dropout=True)
    with isolated_allocator():  # what loads on first use, before anything is traced: the
        # first eviction search's np.unique imports numpy.ma (1.5 MB of module objects)
        with md.Runtime(cost="flops") as warm_up:
            fn()
        with md.Runtime(budget=int(0.75 * warm_up.stats()["peak_memory"]), cost="flops"):
            fn()
    tracemalloc.start()
    try:
        with isolated_allocator():
            unbounded = md.Runtime(cost="flops")
            free_peak, _ = traced_peak_above_baseline(fn, unbounded)
            budget = int(0.75 * unbounded.stats()["peak_memory"])
            bounded = md.Runtime(budget=budget, cost="flops")
            peak, counted = traced_peak_above_baseline(fn, bounded)
    finally:
        tracemalloc.stop()
    stats = bounded.stats()
    assert stats["evictions"] > 0 and stats["remats"] > 0
    assert stats["peak_memory"] <= budget
    # one op's workspace: NumPy temporaries inside a kernel (a few tensors at most) plus the
    # metadata of the graph (Python objects), small next to the arrays
    workspace = 3 * tensor_bytes
    assert peak <= budget - counted + workspace, (
        f"tracemalloc peak {peak:,} B over budget {budget:,} B + workspace {workspace:,} B"
    )
    assert peak < 0.9 * free_peak, "the budgeted run should really use less memory"


def test_evicting_returns_the_buffer_to_numpy():
    tracemalloc.start()
    try:
        with isolated_allocator(), md.Runtime():
            x = md.tensor(np.ones((512, 512)))
            y = md.tanh(x)
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            y.storage.allocator.evict(y.storage)
            after = tracemalloc.get_traced_memory()[0]
            assert before - after >= 0.99 * y.nbytes
            y.numpy()
            assert tracemalloc.get_traced_memory()[0] - after >= 0.99 * y.nbytes
    finally:
        tracemalloc.stop()


def backward_of_a_forward_made_without_a_budget(fraction: float | None):
    """An MLP's forward run without a budget (no candidate table is kept), its backward
    under its constants and ``fraction`` of the rest it left resident: the activations made
    before are evicted when the budget starts and recomputed. Returns the gradients' bytes, the
    runtime, the array memory tracemalloc saw freed on entering it and the activations'
    bytes."""
    width, batch = 32, 512
    rng = np.random.default_rng(3)
    with isolated_allocator() as allocator:
        params = [
            md.tensor(rng.standard_normal((width, width)) * 0.2, requires_grad=True)
            for _ in range(6)
        ]
        h = md.tensor(rng.standard_normal((batch, width)))
        for w in params:
            h = md.tanh(md.matmul(h, w))
        loss = md.sum(h * h)
        del h
        gc.collect()
        activations = allocator.memory - allocator.constant_bytes
        budget = (
            None if fraction is None else allocator.constant_bytes + int(fraction * activations)
        )
        runtime = md.Runtime(budget=budget, cost="flops", max_slowdown=None)  # forward outside
        before = tracemalloc.get_traced_memory()[0]
        with runtime:
            freed = before - tracemalloc.get_traced_memory()[0]
            loss.backward()
        return [p.grad.numpy().tobytes() for p in params], runtime, freed, activations


def test_storages_made_before_a_budget_are_evicted_under_it():
    tracemalloc.start()
    try:
        expected = backward_of_a_forward_made_without_a_budget(None)[0]
        grads, bounded, freed, activations = backward_of_a_forward_made_without_a_budget(0.75)
    finally:
        tracemalloc.stop()
    stats = bounded.stats()
    assert grads == expected
    assert stats["evictions"] > 0 and stats["remats"] > 0
    assert stats["peak_memory"] <= bounded.budget
    assert freed >= 0.99 * 0.25 * activations, "entering evicts for real"
