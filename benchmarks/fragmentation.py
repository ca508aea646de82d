"""What addresses cost, and what the window heuristic wins back (docs/memory.md's table).

    python benchmarks/fragmentation.py                  # the seven bundled traces
    python benchmarks/fragmentation.py LOG ...          # and other traces (the prototype's logs)
    python benchmarks/fragmentation.py LOG ... --no-bundled --ratios 0.5,0.3 --jobs 1

Replays each trace three ways, each at the budget ratios (of the unbounded peak) given:

- *h_DTR, bytes*: the paper's rule, a value fits when the resident bytes do (the default);
- *h_DTR, contiguous*: ``fit="contiguous"``, a value fits only when one free block of the
  arena holds it, h_DTR's victims evicted in score order until one does;
- *window, contiguous*: the same arena, the ``window`` heuristic evicting the cheapest
  run of adjacent blocks (``minidtr.runtime.window``).

Each cell is the slowdown (the simulator's cost model, so the figures do not depend on
the machine), or ``OOM`` (a budget or placement error) or ``thrash`` (past 2x). The last
column is the lowest ratio that replays within 2x (``minidtr.sim.frontier``: down in
steps of 0.1, then bisection to 0.01), whose probes also fill the cells they share.
Under the table, the window's goal trace by trace: does the window reach a lower ratio
than h_DTR under the contiguous fit, and how much slower is it where both run (the
highest ratio of their slowdowns over the ratios both passed).
"""

from __future__ import annotations

import argparse
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache

import interrupts  # Ctrl-C: one line, not a traceback; pool workers leave quietly

from minidtr.cli_args import input_file, ratios, whole_number
from minidtr.runtime.options import PLACEMENTS

RUNS = {  # column name: (heuristic, fit)
    "h_DTR, bytes": ("dtr", "bytes"),
    "h_DTR, contiguous": ("dtr", "contiguous"),
    "window, contiguous": ("window", "contiguous"),
}
MAX_SLOWDOWN = 2.0


@dataclass(frozen=True)
class Cell:
    """One replay's outcome: ``status`` (ok, oom, thrash, below floor) and slowdown."""

    status: str
    slowdown: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def __str__(self) -> str:
        if self.status == "ok":
            return f"{self.slowdown:.2f}"
        return {"oom": "OOM", "below floor": "floor"}.get(self.status, self.status)


@dataclass(frozen=True)
class Row:
    """One trace under one run: a cell per ratio and the lowest ratio within 2x."""

    name: str
    run: str
    cells: tuple[Cell, ...]
    lowest: float | None


@cache
def _trace(path: str):
    from minidtr import sim

    return sim.load_log(path)


def measure(path: str, run: str, ratios: tuple[float, ...], placement: str | None) -> Row:
    """The frontier of ``path`` under ``run``, and a replay at each ratio it did not probe."""
    from minidtr.sim.frontier import frontier
    from minidtr.sim.simulator import simulate

    heuristic, fit = RUNS[run]
    trace = _trace(path)
    settings = {"fit": fit}
    if fit == "contiguous" and placement is not None:
        settings["placement"] = placement
    found = frontier(trace, MAX_SLOWDOWN, heuristic, tolerance=0.01, **settings)
    probed = {round(p.ratio, 6): Cell(p.status, p.slowdown) for p in found.probes}
    cells = []
    for ratio in ratios:
        cell = probed.get(round(ratio, 6))
        if cell is None:
            r = simulate(trace, ratio=ratio, heuristic=heuristic, thrash=MAX_SLOWDOWN, **settings)
            cell = Cell(r.status, r.slowdown)
        cells.append(cell)
    lowest = found.lowest
    return Row(trace.name, run, tuple(cells), None if lowest is None else lowest.ratio)


def goal(rows: list[Row]) -> tuple[str, bool | None, float]:
    """For one trace's rows: the verdict on the lower budget (window against h_DTR, both
    under the contiguous fit), whether the window's is lower (None: equal), and the
    highest ratio of the window's slowdown to h_DTR's over the ratios both passed (nan
    when none)."""
    dtr = next(r for r in rows if r.run == "h_DTR, contiguous")
    window = next(r for r in rows if r.run == "window, contiguous")
    a = math.inf if dtr.lowest is None else dtr.lowest
    b = math.inf if window.lowest is None else window.lowest
    lower = None if a == b else b < a
    pairs = zip(dtr.cells, window.cells, strict=True)
    worst = max((w.slowdown / d.slowdown for d, w in pairs if d.ok and w.ok), default=math.nan)
    verdict = {None: "same", True: "window lower", False: "h_DTR lower"}[lower]
    return verdict, lower, worst


def _ratio(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f}"


def table(rows: list[Row], ratios: tuple[float, ...]) -> str:
    """The markdown table, then the goal trace by trace and in all."""
    lines = [
        "| trace | run | " + " | ".join(f"{r:g}" for r in ratios) + " | lowest within 2x |",
        "|---|---|" + "---|" * len(ratios) + "---|",
    ]
    for row in rows:
        cells = " | ".join(str(c) for c in row.cells)
        lines.append(f"| {row.name} | {row.run} | {cells} | {_ratio(row.lowest)} |")
    lines += ["", "| trace | lowest ratio | window / h_DTR slowdown, at worst |", "|---|---|---|"]
    names = list(dict.fromkeys(r.name for r in rows))
    wins = slower = 0
    for name in names:
        verdict, lower, worst = goal([r for r in rows if r.name == name])
        wins += lower is True
        slower += worst > 1.05
        shown = "-" if math.isnan(worst) else f"{worst:.3f}"
        lines.append(f"| {name} | {verdict} | {shown} |")
    lines += [
        "",
        f"window lower than h_DTR (contiguous) on {wins} of {len(names)} traces; "
        f"more than 5% slower where both run on {slower}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "logs", nargs="*", metavar="LOG", type=input_file, help="more traces to replay"
    )
    parser.add_argument("--no-bundled", action="store_true", help="only the LOGs given")
    parser.add_argument("--ratios", type=ratios, default=[0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    parser.add_argument(
        "--placement",
        default=None,
        choices=PLACEMENTS,
        help="the contiguous fit's placement (default: its own)",
    )
    parser.add_argument("--jobs", type=whole_number(1), default=2)
    args = parser.parse_args()
    from minidtr import sim

    paths = [] if args.no_bundled else [str(p) for p in sim.bundled_traces()]
    paths += args.logs
    if not paths:
        parser.error("no traces")
    keys = [(path, run) for path in paths for run in RUNS]
    with ProcessPoolExecutor(args.jobs, initializer=interrupts.quiet_worker) as pool:
        futures = [
            pool.submit(measure, path, run, tuple(args.ratios), args.placement)
            for path, run in keys
        ]
        rows = [f.result() for f in futures]
    print(
        f"slowdown at each budget ratio (OOM: out of memory or no block; thrash: past "
        f"{MAX_SLOWDOWN:g}x), and the lowest ratio within {MAX_SLOWDOWN:g}x\n"
    )
    print(table(rows, tuple(args.ratios)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
