"""Three real runs of the same chain, the classic pictures of checkpointing: no budget,
sqrt(N) checkpoints (Chen et al.), and DTR under a budget as small as the
checkpoints' peak.

The chain is ``h = tanh(h)`` ``layers`` times from an input that requires a
gradient, then ``h.sum().backward()``; tanh's backward reads its output, so every
activation is saved for the backward pass. The checkpointed run keeps every
``segment``-th activation and evicts each other one by hand once the next layer has
read it; backward then rebuilds one segment at a time from its checkpoint (the
runtime's own rematerialization does it). Each run writes its event log, what
``minidtr animate`` draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

LAYERS = 16
SEGMENT = 4  # sqrt(16): a checkpoint every 4 layers
WIDTH = 256  # floats per activation


def run_chain(
    layers: int = LAYERS, budget: int | None = None, segment: int | None = None
) -> tuple[Any, np.ndarray]:
    """One forward and backward pass of the chain on a fresh allocator, with events
    recorded; (the runtime, the input's gradient). ``segment``: checkpoint every
    ``segment``-th activation and evict the others by hand."""
    import minidtr as md

    from .isolation import fresh_allocator

    with fresh_allocator():
        runtime = md.Runtime(budget=budget, cost="flops", record_events=True)
        with runtime:
            x = md.tensor(np.linspace(-1.0, 1.0, WIDTH), requires_grad=True)
            activations = [x]
            for i in range(1, layers + 1):
                activations.append(md.tanh(activations[-1]))
                if segment and i > 1 and (i - 1) % segment:
                    runtime.allocator.evict(activations[i - 1].storage, "checkpointing")
            loss = activations[-1].sum()
            del activations[1:]
            loss.backward()
            gradient = x.grad.numpy()
        return runtime, gradient


@dataclass(frozen=True)
class ChainRun:
    """One run's log: its title, where it was written, its peak, remats and slowdown."""

    title: str
    path: Path
    peak: int
    remats: int
    slowdown: float

    def __str__(self) -> str:
        return (
            f"{self.title}: {self.path} (peak {self.peak:,} bytes, {self.remats} remats, "
            f"slowdown {self.slowdown:.2f})"
        )


def chain_logs(
    directory: str | Path, layers: int = LAYERS, segment: int = SEGMENT
) -> list[ChainRun]:
    """Write the three runs' event logs into ``directory``. The budget of the DTR run is
    the checkpointed run's peak: the same memory, planned by hand or not at all."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plain, expected = run_chain(layers)
    checkpointed, by_hand = run_chain(layers, segment=segment)
    budget = checkpointed.stats()["peak_memory"]
    dtr, dynamic = run_chain(layers, budget=budget)
    if not (np.array_equal(by_hand, expected) and np.array_equal(dynamic, expected)):
        raise AssertionError("the three runs must compute the same gradient, bit for bit")
    runs = (
        ("no budget", plain, "chain_plain.jsonl"),
        (f"sqrt(N) checkpoints, every {segment}", checkpointed, "chain_checkpointed.jsonl"),
        ("DTR, budget = their peak", dtr, "chain_dtr.jsonl"),
    )
    out = []
    for title, runtime, name in runs:
        path = directory / name
        runtime.export_events(str(path))
        stats = runtime.stats()
        out.append(ChainRun(title, path, stats["peak_memory"], stats["remats"], stats["slowdown"]))
    return out
