"""The paper's ablation grid on traces, in a local process pool and on a Dask cluster.

    python benchmarks/sim_cluster.py [LOG ...] [--workers 2] [--scheduler ADDRESS]

Runs every point of the grid {estar, eq, local, none} x {size, nosize} x {stale, nostale}
(16 heuristics) at 9 budget ratios on each trace (default: the repository's traces/
folder), once in a local pool of ``--workers`` processes and once on a Dask cluster: a
LocalCluster of ``--workers`` worker processes started here, or the running scheduler at
``--scheduler``. Prints wall time and points per second for each, and checks that both
gave the same results.
"""

from __future__ import annotations

import argparse
import glob
import logging
import pathlib
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.cli_args import input_file, whole_number
from minidtr.runtime.heuristics import ablation_names
from minidtr.sim.sweep import sweep

RATIOS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
TRACES = pathlib.Path(__file__).resolve().parents[1] / "traces"


def decisions(results):
    return [(r.trace, r.heuristic, r.ratio, r.status, r.remats, r.evictions) for r in results]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="*", type=input_file, help=f"trace files (default: {TRACES}/*)")
    p.add_argument("--workers", type=whole_number(1), default=2)
    p.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler")
    args = p.parse_args()
    paths = args.logs or sorted(glob.glob(str(TRACES / "*.log*")))
    if not paths:
        raise SystemExit(f"no traces given and none in {TRACES}")
    traces = [sim.load_log(path) for path in paths]
    heuristics = ablation_names()
    points = len(traces) * len(heuristics) * len(RATIOS)
    print(f"{len(traces)} traces x {len(heuristics)} heuristics x {len(RATIOS)} ratios")

    started = time.perf_counter()
    local = sweep(traces, RATIOS, heuristics, jobs=args.workers)
    local_s = time.perf_counter() - started

    from distributed import Client, LocalCluster

    if args.scheduler:
        client, cluster = Client(args.scheduler), None
    else:
        cluster = LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        client = Client(cluster)
    with client:
        started = time.perf_counter()
        remote = sweep(traces, RATIOS, heuristics, client=client)
        remote_s = time.perf_counter() - started
    if cluster is not None:
        cluster.close()
    rows = [
        (f"local pool, {args.workers} processes", local_s),
        (f"dask, {args.scheduler or f'LocalCluster of {args.workers} workers'}", remote_s),
    ]
    width = max(len(name) for name, _ in rows) + 2
    print(f"{'':{width}}{'wall s':>9}{'points/s':>10}")
    for name, seconds in rows:
        print(f"{name:{width}}{seconds:9.1f}{points / seconds:10.1f}")
    same = decisions(local) == decisions(remote)
    print(f"{points} points; same results on both: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
