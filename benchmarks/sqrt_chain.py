"""Theorem 3.1 on the live runtime: an N-layer chain trains in a budget of about 2*sqrt(N)
tensors with O(N) extra operations under h_DTR, while h_LRU and h_DTR^local grow faster.

Every layer is ``tanh`` on a one-element float64 tensor (8 bytes) and every op costs 1
(``cost=`` callable), so memory and compute are in units of tensors and ops, as in the
paper. The budget is ``ceil(2*sqrt(N))`` tensors on top of the constants (the input and
the seed gradient). Extra ops = rematerializations (the forward and backward ops are
counted once each). Run: ``python benchmarks/sqrt_chain.py [N ...]``.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

import minidtr as md
from minidtr.testing.programs import tanh_chain, unit_cost

HEURISTICS = ("dtr", "dtr_eq", "msps", "dtr_local", "lru", "size", "random")
SLOT = 8  # bytes of one tensor
MAX_EXTRA = 200  # stop a run once its extra ops pass 200 N (reported as ">200")


def chain_length(text: str) -> int:
    """N: a whole number of layers from 2 to 100,000."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"N is a whole number, got {text!r}") from None
    if not 2 <= n <= 100_000:
        raise argparse.ArgumentTypeError(f"N must be from 2 to 100,000, got {n}")
    return n


def run(n: int, heuristic: str, slots: int | None = None) -> dict:
    slots = math.ceil(2 * math.sqrt(n)) if slots is None else slots
    constants = 2 * SLOT  # the input and the seed gradient
    runtime = md.Runtime(
        budget=constants + slots * SLOT,
        heuristic=heuristic,
        cost=unit_cost,
        max_slowdown=MAX_EXTRA + 1,
        max_wall_slowdown=None,  # counts, not seconds, decide
    )
    started = time.perf_counter()
    try:
        with runtime:
            tanh_chain(n)()
        status = "ok"
    except md.ThrashError:
        status = "thrash"
    except md.BudgetError:
        status = "oom"
    gc.collect()
    stats = runtime.stats()
    return {
        "n": n,
        "heuristic": heuristic,
        "slots": slots,
        "status": status,
        "extra_per_n": stats["remats"] / n,
        "evictions": stats["evictions"],
        "seconds": time.perf_counter() - started,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=chain_length, help="N (default 100 400 1600)")
    sizes = parser.parse_args(argv).sizes or [100, 400, 1600]
    print(f"{'N':>6} {'budget':>7} " + " ".join(f"{h:>10}" for h in HEURISTICS))
    for n in sizes:
        cells = []
        for heuristic in HEURISTICS:
            result = run(n, heuristic)
            shown = {"ok": f"{result['extra_per_n']:.2f}", "thrash": f">{MAX_EXTRA}"}
            cells.append(f"{shown.get(result['status'], 'OOM'):>10}")
        print(f"{n:>6} {math.ceil(2 * math.sqrt(n)):>7} " + " ".join(cells))
    print("(extra ops / N; budget in tensors on top of the 2 constants)")


if __name__ == "__main__":
    main(sys.argv[1:])
