"""Logged training steps at budget ratios 0.9 ... 0.1 for every heuristic: the traces that ship
with minidtr by default, or a directory of the DTR prototype's own logs, next to the paper's
simulated figures where it reports them.

    python benchmarks/sim_reference_logs.py [DIR] [--jobs N]

DIR holds ``*.log`` or ``*.log.gz`` files; without it, the traces that ship with minidtr
(``minidtr.sim.bundled_traces()``). The prototype's logs are ``simrd/logs.zip`` in the public
repository uwsampl/dtr-prototype (docs/dtr.md says how to get them); unzipped, its ``logs/``
folder is a DIR for this script, and the ResNet-32 and U-Net logs are compared with the
figures the paper's simulator gave for them (docs/dtr.md, "Evaluation").

Slowdown = (compute + recompute) / compute; "thrash" = passed 2x and stopped; "OOM" = the
budget could not be met.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.cli_args import input_folder, whole_number
from minidtr.sim.sweep import DEFAULT_HEURISTICS, cell, sweep

RATIOS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)

# The paper's simulator on its own logs (docs/dtr.md): (ratio, heuristic) -> slowdown, keyed
# by the start of the log's file name (the prototype names them MODEL-BATCH-...-default.log).
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


def reference_for(trace_name: str) -> dict:
    for prefix, figures in REFERENCE.items():
        if trace_name == prefix or trace_name.startswith(prefix + "-"):
            return figures
    return {}


def log_paths(directory: str | None) -> list[pathlib.Path]:
    """The logs to replay; exits with a message when there are none."""
    if directory is None:
        return sim.bundled_traces()
    folder = pathlib.Path(directory)
    paths = sorted([*folder.glob("*.log"), *folder.glob("*.log.gz")])
    if not paths:
        sys.exit(
            f"sim_reference_logs: no *.log or *.log.gz files in {directory}; give a folder "
            "of DTR logs (for instance the prototype's logs/, see docs/dtr.md) or nothing "
            "for the traces that ship with minidtr"
        )
    return paths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "logs",
        nargs="?",
        metavar="DIR",
        type=input_folder,
        help="a folder of logs (default: bundled)",
    )
    p.add_argument("--jobs", type=whole_number(1), default=None)
    args = p.parse_args()
    try:
        traces = [sim.load_log(path) for path in log_paths(args.logs)]
    except sim.TraceError as e:
        sys.exit(f"sim_reference_logs: {e}")
    results = sweep(traces, RATIOS, DEFAULT_HEURISTICS, jobs=args.jobs)
    by_key = {(r.trace, r.heuristic, r.ratio): r for r in results}
    for trace in traces:
        reference = reference_for(trace.name)
        note = " (the paper's simulator in brackets)" if reference else ""
        print(f"\n{trace.name}: slowdown at each budget ratio{note}")
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
