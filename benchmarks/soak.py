"""Soak: does memory stay flat over thousands of training steps?

    python benchmarks/soak.py                       # 10,000 unbudgeted + 2,000 budgeted steps
    python benchmarks/soak.py --steps 1000 --budgeted-steps 200 --every 100

Trains a small MLP (dropout, Adam) on fresh random batches (``minidtr.testing.soak``),
first unbudgeted, then under a budget that holds the parameters, gradients and optimizer
state plus a fraction of what a step adds at its peak. Prints, at every sample, the bytes
the allocator counts and the Python memory tracemalloc sees (after a full garbage
collection, relative to the start of tracing), and the growth per 1,000 steps of each
phase, measured from its second sample (the first steps replace the parameters made
before tracing began). Both should be flat: 0 counted bytes and a few bytes of traced
memory per 1,000 steps (the samples themselves).
"""

from __future__ import annotations

import argparse
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr.cli_args import parse_ratio, whole_number
from minidtr.testing.soak import Sample, soak


def growth_per_1000(samples: list[Sample], field: str) -> float:
    first, last = samples[1], samples[-1]
    return 1000 * (getattr(last, field) - getattr(first, field)) / (last.step - first.step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=whole_number(1), default=10_000, help="unbudgeted steps")
    parser.add_argument("--budgeted-steps", type=whole_number(1), default=2_000)
    parser.add_argument("--every", type=whole_number(1), default=500, help="steps between samples")
    parser.add_argument(
        "--ratio", type=parse_ratio, default=0.95, help="budget: share of a step's peak"
    )
    args = parser.parse_args()
    if args.steps < 2 * args.every + 10 or args.budgeted_steps < 2 * args.every + 10:
        parser.error("each phase needs at least 2 * --every + 10 steps (two samples)")

    started = time.perf_counter()
    report = soak(args.steps, args.budgeted_steps, budget_ratio=args.ratio, every=args.every)
    elapsed = time.perf_counter() - started
    print(
        f"budget {report.budget:,} B; budgeted phase: {report.evictions:,} evictions, "
        f"{report.remats:,} rematerializations; {elapsed:.0f} s in all"
    )
    print(f"{'phase':<11} {'step':>6} {'counted B':>10} {'traced B':>10}")
    for s in report.samples:
        print(f"{s.phase:<11} {s.step:>6} {s.counted:>10,} {s.traced:>10,}")
    for phase in ("unbudgeted", "budgeted"):
        samples = report.phase(phase)
        counted = growth_per_1000(samples, "counted")
        traced = growth_per_1000(samples, "traced")
        print(
            f"{phase}: growth per 1,000 steps: counted {counted:+,.0f} B, traced {traced:+,.0f} B"
        )


if __name__ == "__main__":
    main()
