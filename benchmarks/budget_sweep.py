"""Training under shrinking budgets: what DTR costs at each budget ratio.

For each model (default: the MLP and the small ResNet), measure the unbounded peak of a
training step, then train the same steps at ratios of it and print: the slowdown
((compute + recompute) / compute, from the runtime's cost accounting), the wall-time
ratio against the unbounded run, evictions, remats, the counted peak and the peak of
array memory as tracemalloc sees it (NumPy reports its buffers there; it also sees
arrays the runtime does not count, such as the data set). Then find the lowest ratio
that still trains (no BudgetError, no thrash past ``--max-slowdown``).

Run: ``python benchmarks/budget_sweep.py [--models mlp,resnet] [--steps 5]``.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr.cli_args import above_one, names_from, parse_heuristic, whole_number
from minidtr.models import MODELS, SIZES
from minidtr.runtime import BudgetError
from minidtr.training import TrainConfig, measure_peak, train

RATIOS = (1.0, 0.5, 0.3, 0.2)
SEARCH = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05)


def run(model: str, ratio: float | None, peak: int, args) -> dict:
    """Train at ``ratio`` x ``peak`` (None: unbounded). The budget is given in bytes, so
    that the unbounded peak is not measured again inside tracemalloc's window."""
    config = TrainConfig(
        model=model,
        size=args.size,
        steps=args.steps,
        budget=None if ratio is None else int(ratio * peak),
        heuristic=args.heuristic,
        cost=args.cost,
        max_slowdown=args.max_slowdown,
        max_wall_slowdown=None,  # figures that do not depend on the machine's load
    )
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    try:
        result = train(config)
    except BudgetError as error:
        return {"ratio": ratio, "status": type(error).__name__}
    finally:
        traced = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    stats = result.stats
    return {
        "ratio": ratio,
        "status": "ok",
        "budget": result.budget,
        "seconds": time.perf_counter() - started,
        "slowdown": stats["slowdown"],
        "evictions": stats["evictions"],
        "remats": stats["remats"],
        "peak": stats["peak_memory"],
        "traced": traced,
        "loss": result.losses[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=names_from(MODELS, "models"), default=["mlp", "resnet"])
    parser.add_argument("--size", default="small", choices=SIZES)
    parser.add_argument("--steps", type=whole_number(1), default=5)
    parser.add_argument("--heuristic", type=parse_heuristic, default="dtr")
    parser.add_argument("--cost", default="time", choices=("time", "flops"))
    parser.add_argument("--max-slowdown", type=above_one, default=10.0)
    args = parser.parse_args()
    for model in args.models:
        peak = measure_peak(TrainConfig(model=model, size=args.size, cost=args.cost))
        free = run(model, None, peak, args)
        print(
            f"\n{model} ({args.size}): unbounded peak {peak / 2**20:.2f} MiB, "
            f"{args.steps} steps in {free['seconds']:.2f} s, heuristic {args.heuristic}"
        )
        print(
            f"{'ratio':>6} {'slowdown':>9} {'wall':>6} {'evict':>7} {'remat':>7} "
            f"{'budget MiB':>11} {'peak MiB':>9} {'traced MiB':>11} {'last loss':>10}"
        )
        for ratio in RATIOS:
            r = run(model, ratio, peak, args)
            if r["status"] != "ok":
                print(f"{ratio:>6.2f} {r['status']}")
                continue
            print(
                f"{ratio:>6.2f} {r['slowdown']:>9.3f} {r['seconds'] / free['seconds']:>6.2f} "
                f"{r['evictions']:>7} {r['remats']:>7} {r['budget'] / 2**20:>11.2f} "
                f"{r['peak'] / 2**20:>9.2f} {r['traced'] / 2**20:>11.2f} {r['loss']:>10.5f}"
            )
        lowest = None
        for ratio in SEARCH:
            if run(model, ratio, peak, args)["status"] != "ok":
                break
            lowest = ratio
        print(f"lowest ratio that trains (of {SEARCH}): {lowest}")


if __name__ == "__main__":
    main()
