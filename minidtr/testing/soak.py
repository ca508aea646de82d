"""A soak run: many training steps of a small model, watching for memory that grows.

``soak(unbudgeted_steps, budgeted_steps)`` trains a small MLP (dropout, Adam) on fresh
random batches, first unbudgeted, then under a budget that holds the parameters,
gradients and optimizer state and a fraction of what a step adds at its peak. Every
``every`` steps it samples the bytes the allocator counts and the Python memory
tracemalloc sees. Nothing a finished step made may stay: both must be flat once the
first steps have made the parameters, gradients and optimizer state. Used by the test
suite (a few hundred steps) and ``benchmarks/soak.py`` (thousands).
"""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import dataclass

import numpy as np

from .. import nn, optim
from ..ops import cross_entropy
from ..runtime import Runtime
from ..tensor import tensor
from . import isolated_allocator


@dataclass(slots=True)
class Sample:
    phase: str  # "unbudgeted" or "budgeted"
    step: int  # steps done in this phase
    counted: int  # bytes the allocator counts (allocator.memory)
    traced: int  # bytes tracemalloc sees, minus the baseline taken after warm-up


@dataclass
class SoakReport:
    samples: list[Sample]
    budget: int
    evictions: int
    remats: int

    def phase(self, name: str) -> list[Sample]:
        return [s for s in self.samples if s.phase == name]


def small_mlp(rng: np.random.Generator) -> nn.Module:
    return nn.Sequential(
        nn.Linear(32, 64, rng=rng),
        nn.ReLU(),
        nn.Dropout(0.1, rng=rng),
        nn.Linear(64, 64, rng=rng),
        nn.ReLU(),
        nn.Linear(64, 10, rng=rng),
    )


def soak(
    unbudgeted_steps: int,
    budgeted_steps: int,
    budget_ratio: float = 0.95,
    every: int = 50,
    warmup: int = 10,
    batch: int = 128,
    seed: int = 0,
) -> SoakReport:
    """Train unbudgeted, then budgeted (``budget_ratio`` of a step's own peak), sampling
    memory every ``every`` steps after ``warmup`` steps of each phase (tracemalloc runs
    only while sampling, from the unbudgeted warm-up on)."""
    rng = np.random.default_rng(seed)
    samples: list[Sample] = []
    with isolated_allocator() as allocator:
        model = small_mlp(rng)
        opt = optim.Adam(model.parameters(), lr=1e-3)

        def step() -> None:
            x = tensor(rng.standard_normal((batch, 32)).astype(np.float32))
            y = tensor(rng.integers(0, 10, batch))
            loss = cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()

        def run(phase: str, steps: int, runtime: Runtime, baseline: list[int]) -> None:
            with runtime:
                for i in range(1, steps + 1):
                    step()
                    if i == warmup and not baseline:
                        gc.collect()
                        tracemalloc.start()
                        baseline.append(tracemalloc.get_traced_memory()[0])
                    if i >= warmup and (i - warmup) % every == 0:
                        gc.collect()  # a full collection also empties the free lists
                        traced = tracemalloc.get_traced_memory()[0] - baseline[0]
                        samples.append(Sample(phase, i, allocator.memory, traced))

        baseline: list[int] = []
        unbounded = Runtime(cost="flops")
        try:
            run("unbudgeted", unbudgeted_steps, unbounded, baseline)
            fixed = allocator.memory  # parameters, gradients, optimizer state
            peak = unbounded.stats()["peak_memory"]
            budget = fixed + int(budget_ratio * (peak - fixed))
            bounded = Runtime(budget=budget, cost="flops")
            run("budgeted", budgeted_steps, bounded, baseline)
        finally:
            tracemalloc.stop()
        stats = bounded.stats()
    return SoakReport(samples, budget, stats["evictions"], stats["remats"])
