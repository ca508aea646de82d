"""Attention as one op against attention written with primitive ops: memory and time.

    python benchmarks/attention_memory.py [--batch 8] [--heads 4] [--length 256] [--dim 16]

Causal self-attention on (batch, heads, length, dim) float32 q, k and v, forward and
backward: ``md.scaled_dot_product_attention`` against the form the bundled Transformer
writes (q kᵀ, a scale, an additive mask, softmax, a product with v). For each it prints
the bytes held between the forward and the backward (the inputs, the output and what
the backward keeps), the counted peak of the whole (kernel workspaces included), the
processor time of forward and backward (the minimum of ``--rounds``), and how far the
two forms' outputs and gradients are apart.
"""

from __future__ import annotations

import argparse
import math
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

import minidtr as md
from minidtr.cli_args import whole_number
from minidtr.testing import isolated_allocator


def unfused(q, k, v, mask, scale):
    scores = (q @ md.transpose(k, (0, 1, 3, 2))) * scale + mask
    return md.softmax(scores, axis=-1) @ v


def run(arrays, fused: bool, mask_array: np.ndarray, scale: float):
    """(held after the forward, peak, seconds, output, gradients) of one forward and
    backward in a fresh allocator."""
    with isolated_allocator() as allocator, md.Runtime() as runtime:
        started = time.process_time()
        q, k, v = (md.tensor(a, requires_grad=True) for a in arrays)
        if fused:
            out = md.scaled_dot_product_attention(q, k, v, causal=True)
        else:
            out = unfused(q, k, v, md.tensor(mask_array), scale)
        held = allocator.ledger.memory
        out.sum().backward()
        seconds = time.process_time() - started
        peak = runtime.stats()["peak_memory"]
        return held, peak, seconds, out.numpy(), [t.grad.numpy() for t in (q, k, v)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("batch", 8), ("heads", 4), ("length", 256), ("dim", 16), ("rounds", 5)):
        p.add_argument(f"--{name}", type=whole_number(1), default=default)
    args = p.parse_args(argv)
    shape = (args.batch, args.heads, args.length, args.dim)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    future = np.triu(np.ones((args.length, args.length), dtype=bool), k=1)
    mask = np.where(future, -1e9, 0.0).astype(np.float32)
    scale = 1.0 / math.sqrt(args.dim)
    print(f"causal self-attention, q, k, v {shape} float32 ({4 * math.prod(shape):,} B each)")
    print(f"{'form':<12}{'held after forward':>20}{'peak':>14}{'CPU ms':>10}")
    results = {}
    for fused, label in ((False, "primitives"), (True, "one op")):
        runs = [run(arrays, fused, mask, scale) for _ in range(args.rounds)]
        held, peak, _, out, grads = runs[0]
        ms = 1e3 * min(r[2] for r in runs)
        results[label] = (out, grads)
        print(f"{label:<12}{held:>20,}{peak:>14,}{ms:>10.1f}")
    (a, ga), (b, gb) = results.values()
    apart = max(float(np.abs(x - y).max()) for x, y in zip([a, *ga], [b, *gb], strict=True))
    print(f"largest difference between the two forms' output and gradients: {apart:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
