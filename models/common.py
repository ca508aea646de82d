"""What the scripts in models/ share: their command line and their closing report.

Each script reads top to bottom: the data, the model (from ``minidtr.models``,
the same class ``minidtr train`` builds), one training step, two steps with no
budget to learn the peak, then the training run under ``md.Runtime(budget=...)``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

import minidtr as md
from minidtr.cli_args import (
    MAX_SEED,
    parse_bytes,
    parse_heuristic,
    parse_ratio,
    parse_slowdown,
    whole_number,
)
from minidtr.data import minibatch_indices
from minidtr.runtime import deferred_interrupts


def parse_args(
    doc: str, argv: Sequence[str] | None, *, ratio: float, batch: int, steps: int = 20
) -> argparse.Namespace:
    """The options every script takes; ``ratio``, ``batch`` and ``steps`` are its defaults.
    Each is read with the argument type ``minidtr train`` reads it with, so a bad value is
    a usage error before any work (``--batch`` against the data: ``minibatches``)."""
    summary, _, details = doc.strip().partition("\n\n")
    p = argparse.ArgumentParser(
        description=summary,
        epilog=details,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument(
        "--ratio",
        type=parse_ratio,
        default=ratio,
        help=f"budget as a fraction of the unbounded peak, in (0, 1] (default {ratio})",
    )
    budget.add_argument(
        "--budget",
        type=parse_bytes,
        help="budget in bytes, K, M, G suffixes allowed (instead of --ratio)",
    )
    p.add_argument(
        "--steps", type=whole_number(1), default=steps, help=f"steps under the budget ({steps})"
    )
    p.add_argument(
        "--batch", type=whole_number(1), default=batch, help=f"batch size (default {batch})"
    )
    p.add_argument(
        "--heuristic", type=parse_heuristic, default="dtr", help="eviction heuristic (default dtr)"
    )
    p.add_argument(
        "--max-slowdown",
        type=parse_slowdown,
        default=4.0,
        help="stop once recomputation makes the run this many times slower (default 4; the "
        "paper calls a run past 2x thrashing; 'none': no limit): a budget near the floor can "
        "grind for long",
    )
    p.add_argument(
        "--seed",
        type=whole_number(0, MAX_SEED),
        default=0,
        help="data, initialization and batch order (0 to 2**64 - 1)",
    )
    args = p.parse_args(argv)
    args.usage_error = p.error
    return args


def minibatches(args: argparse.Namespace, n_train: int) -> Iterator[np.ndarray]:
    """``minibatch_indices`` over the ``n_train`` training examples in batches of
    ``--batch``: one larger than the data is a usage error, before any step."""
    if args.batch > n_train:
        args.usage_error(
            f"argument --batch: must be at most the {n_train:,} training examples, "
            f"got {args.batch:,}"
        )
    return minibatch_indices(n_train, args.batch, args.seed)


def budget_from(args: argparse.Namespace, peak: int) -> int:
    """The budget in bytes: ``--budget``, or ``--ratio`` times the measured peak."""
    return args.budget if args.budget is not None else int(args.ratio * peak)


def report(
    title: str, losses: list[float], runtime: md.Runtime, peak: int, model: md.nn.Module
) -> dict[str, Any]:
    """Print what the run did; return the runtime's statistics (with the losses and the
    model's parameter count)."""
    stats = runtime.stats()
    tail = losses[-5:]
    parameters = sum(p.size for p in model.parameters())
    print(f"{title}: {len(losses)} steps under a budget of {stats['budget']:,} bytes")
    print(f"  parameters          {parameters:,}")
    print(f"  loss                {losses[0]:.4f} -> {sum(tail) / len(tail):.4f}")
    print(f"  unbounded peak      {peak:,} bytes")
    print(
        f"  peak under budget   {stats['peak_memory']:,} bytes "
        f"({stats['peak_memory'] / peak:.0%} of the unbounded peak)"
    )
    print(
        f"  evictions           {stats['evictions']:,} "
        f"({stats['evictions'] - stats['dead_evictions']:,} forced by the budget)"
    )
    print(f"  rematerializations  {stats['remats']:,}")
    print(f"  slowdown            {stats['slowdown']:.3f}x  ((compute + recompute) / compute)")
    return {**stats, "losses": losses, "unbounded_peak": peak, "parameters": parameters}


def run(main: Callable[[], Any]) -> int:
    """Run a script's ``main``; a budget too small to train in is a message, not a
    traceback, and so is Ctrl-C (exit status 130), which stops the run at the allocator's
    next consistent point (``deferred_interrupts``; a second Ctrl-C stops it at once)."""
    try:
        with deferred_interrupts():
            result = main()
    except md.BudgetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{os.path.basename(sys.argv[0])}: interrupted", file=sys.stderr)
        return 130
    if not all(math.isfinite(loss) for loss in result["losses"]):
        print("error: the loss is not finite", file=sys.stderr)
        return 1
    return 0
