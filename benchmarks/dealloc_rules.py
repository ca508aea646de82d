"""What the eager deallocation's two refinements buy (docs/deallocation.md's tables).

    python benchmarks/dealloc_rules.py                          # the bundled traces
    python benchmarks/dealloc_rules.py LOG ... [--no-bundled]   # other traces too
    python benchmarks/dealloc_rules.py --ratios 0.6,0.5 --heuristic msps

Replays each trace (h_DTR, flops cost, thrash at 2x) at each ratio four ways:

- *plain eager*: a dying storage is evicted at once even when an evicted child still
  needs it, and a dead storage rematerialized to rebuild another is freed when that
  access ends (the paper's prototype without its dead remats kept as candidates);
- *orphans rebuilt*: plain eager, but the evicted, referenced children of a dying
  storage are rebuilt before it goes (the runtime before its dead-storage rules);
- *default*: ``minidtr sim`` as it ships, orphans rebuilt and dead storages kept while an
  evicted, referenced storage below needs them;
- *--no-orphan-rebuild*: ``minidtr sim --no-orphan-rebuild``: no orphan rebuild and no
  dying storage kept, but dead rematerialized storages kept while useful.

Dead storages are never kept (the first two) by replacing
``minidtr.runtime.lifetime.useful_dead`` with one that always says no: the runtime has
no switch for it. Each cell is the slowdown, or ``thrash`` (past 2x) or ``oom``.
Simulator costs do not depend on the machine or its load.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import cache

import interrupts  # Ctrl-C: one line, not a traceback; pool workers leave quietly

from minidtr.cli_args import input_file, ratios, whole_number
from minidtr.sim.cli import heuristic_name

MODES = {  # name: (rebuild orphans, keep useful dead storages)
    "plain eager": (False, False),
    "orphans rebuilt": (True, False),
    "default": (True, True),
    "--no-orphan-rebuild": (False, True),
}


@cache
def _trace(path: str):
    from minidtr import sim

    return sim.load_log(path)


def _replay(path: str, ratio: float, mode: str, heuristic: str) -> str:
    from minidtr.runtime import lifetime
    from minidtr.sim.simulator import simulate

    if not hasattr(lifetime, "_shipped_useful_dead"):
        lifetime._shipped_useful_dead = lifetime.useful_dead
    rebuild_orphans, keep_useful = MODES[mode]
    lifetime.useful_dead = lifetime._shipped_useful_dead if keep_useful else (lambda s: False)
    result = simulate(
        _trace(path), ratio=ratio, heuristic=heuristic, rebuild_orphans=rebuild_orphans
    )
    if result.status == "ok":
        return f"{result.slowdown:.2f}×"
    return result.status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "logs", nargs="*", metavar="LOG", type=input_file, help="more traces to replay"
    )
    parser.add_argument("--no-bundled", action="store_true", help="only the LOGs given")
    parser.add_argument("--ratios", type=ratios, default=[0.5, 0.4, 0.3, 0.2])
    parser.add_argument("--heuristic", type=heuristic_name, default="dtr")
    parser.add_argument("--jobs", type=whole_number(1), default=2)
    args = parser.parse_args()
    from minidtr import sim

    paths = [] if args.no_bundled else [str(p) for p in sim.bundled_traces()]
    paths += args.logs
    if not paths:
        parser.error("no traces")
    keys = [(p, r, m) for p in paths for m in MODES for r in args.ratios]
    with ProcessPoolExecutor(args.jobs, initializer=interrupts.quiet_worker) as pool:
        futures = {k: pool.submit(_replay, *k, args.heuristic) for k in keys}
        cells = {k: f.result() for k, f in futures.items()}
    print(
        f"slowdown under h_{args.heuristic} at {' / '.join(map(str, args.ratios))} of the peak "
        "(thrash: past 2x)\n"
    )
    print("| trace | " + " | ".join(MODES) + " |")
    print("|---" * (len(MODES) + 1) + "|")
    for path in paths:
        name = _trace(path).name
        row = [" / ".join(cells[(path, r, m)] for r in args.ratios) for m in MODES]
        print(f"| {name} | " + " | ".join(row) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
