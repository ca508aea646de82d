"""Memory really returns to NumPy: the array memory measured by tracemalloc during a
budgeted run stays within the budget plus one op's temporary workspace."""

import gc
import tracemalloc

import numpy as np

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
    return md.runtime().stats()["memory"]


def test_tracemalloc_peak_stays_within_budget_plus_workspace():
    width, batch = 192, 192
    tensor_bytes = width * batch * 8
    fn = mlp_training(depth=6, width=width, batch=batch, steps=2, dropout=True)
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
