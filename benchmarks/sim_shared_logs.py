"""The shared prototype logs (../shared/traces) at budget ratios 0.9 ... 0.1 for every
heuristic, next to DTR.md's reference figures (the prototype's simulator on its own logs).

    python benchmarks/sim_shared_logs.py [TRACES_DIR] [--jobs N]

Slowdown = (compute + recompute) / compute; "thrash" = passed 2x and stopped; "OOM" = the
budget could not be met.
"""

from __future__ import annotations

import argparse
import pathlib

from minidtr import sim
from minidtr.sim.sweep import DEFAULT_HEURISTICS, cell, sweep

RATIOS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)

# DTR.md, "Reference figures": (ratio, heuristic) -> slowdown, for the two shared models
REFERENCE = {
    "resnet32-56": {
        (0.5, "dtr"): "1.11",
        (0.5, "dtr_eq"): "1.11",
        (0.5, "msps"): "1.11",
        (0.5, "lru"): "thrash",
        (0.4, "dtr"): "1.14",
        (0.4, "msps"): "1.15",
        (0.3, "dtr"): "1.18",
        (0.2, "dtr"): "1.37",
    },
    "unet-6": {
        (0.5, "dtr"): "1.16",
        (0.5, "dtr_eq"): "1.16",
        (0.5, "msps"): "1.13",
        (0.5, "lru"): "thrash",
        (0.4, "dtr"): "OOM",
        (0.4, "msps"): "1.24",
        (0.3, "dtr"): "OOM",
        (0.2, "dtr"): "OOM",
    },
}


def main() -> None:
    default = pathlib.Path(__file__).resolve().parents[2] / "shared" / "traces"
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="?", default=str(default))
    p.add_argument("--jobs", type=int, default=None)
    args = p.parse_args()
    traces = [sim.load_log(path) for path in sorted(pathlib.Path(args.traces).glob("*.log"))]
    results = sweep(traces, RATIOS, DEFAULT_HEURISTICS, jobs=args.jobs)
    by_key = {(r.trace, r.heuristic, r.ratio): r for r in results}
    for trace in traces:
        reference = REFERENCE.get(trace.name, {})
        print(f"\n{trace.name}: ours (reference from DTR.md in brackets)")
        print(f"{'':10}" + "".join(f"{r:>16g}" for r in RATIOS))
        for h in DEFAULT_HEURISTICS:
            cells = []
            for ratio in RATIOS:
                ours = cell(by_key[(trace.name, h, ratio)])
                ref = reference.get((ratio, h))
                cells.append(f"{ours} [{ref}]" if ref else ours)
            print(f"{h:10}" + "".join(f"{c:>16}" for c in cells))
    total = sum(r.replay_time for r in results)
    ops = sum(r.ops for r in results)
    print(f"\n{len(results)} replays in {total:.2f} s of replay ({ops / total:,.0f} trace ops/s)")


if __name__ == "__main__":
    main()
