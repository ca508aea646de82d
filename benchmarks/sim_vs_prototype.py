"""minidtr's default policy against the paper's simulator's rules, cell by cell.

    python benchmarks/sim_vs_prototype.py [LOG ...] [--heuristics H,...] [--ratios R,...]
                                          [--jobs N] [--bound]

For each trace (default: the seven that ship with minidtr) x heuristic x budget ratio, three
replays: minidtr's default, ``--no-orphan-rebuild`` and ``--as-prototype`` (the paper's
simulator's rules, docs/simulator.md; its ratios are of the simulator's own peak, a fraction
of a percent lower on a few traces). A cell is marked ``*`` where the default is more than
1% slower than the better of the other two that ran, or fails where one of them runs: the
cells the "never worse per cell" target is about. Nothing here changes the default;
it measures it. Slowdown = (compute + recompute) / compute; "thrash" = passed 2x, "OOM" = the
budget could not be met. With ``--bound``, each line ends with the LP lower bound of
``minidtr sim bound`` at that ratio (no schedule of the trace's op order, under any of these
rules, goes below it; a second to a minute per trace and ratio).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.cli_args import input_file, ratios, whole_number
from minidtr.runtime.options import RuntimeOptions
from minidtr.sim.cli import heuristic_names
from minidtr.sim.solver_cli import require_scipy
from minidtr.sim.sweep import sweep

RATIOS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
HEURISTICS = ("dtr", "dtr_eq", "msps", "lru")
MODES = {
    "default": RuntimeOptions(),
    "no-orphan": RuntimeOptions(rebuild_orphans=False),
    "prototype": RuntimeOptions(as_prototype=True),
}
TOLERANCE = 0.01  # the default may be this much slower than the better alternative


@dataclass(frozen=True)
class Cell:
    """One (trace, heuristic, ratio): each mode's result, and whether the default loses."""

    trace: str
    heuristic: str
    ratio: float
    results: dict  # mode -> SimResult

    def slowdown(self, mode: str) -> float:
        result = self.results[mode]
        return result.slowdown if result.status == "ok" else math.inf

    @property
    def best_other(self) -> float:
        return min(self.slowdown("no-orphan"), self.slowdown("prototype"))

    @property
    def default_loses(self) -> bool:
        best = self.best_other
        return math.isfinite(best) and self.slowdown("default") > (1 + TOLERANCE) * best

    def text(self) -> str:
        parts = " / ".join(shown(self.results[m]) for m in MODES)
        return parts + (" *" if self.default_loses else "")


def shown(result) -> str:
    """A slowdown to 3 decimals (the 1% comparisons need them), or why the replay failed."""
    if result.status == "ok":
        return f"{result.slowdown:.3f}"
    return "OOM" if result.status == "oom" else "thrash"


def measure(traces: list, heuristics, ratios, jobs: int | None) -> list[Cell]:
    by_mode = {}
    for mode, options in MODES.items():
        results = sweep(traces, ratios, heuristics, jobs=jobs, options=options)
        by_mode[mode] = {(r.trace, r.heuristic, r.ratio): r for r in results}
    keys = by_mode["default"].keys()
    return [Cell(*key, {mode: by_mode[mode][key] for mode in MODES}) for key in keys]


def bounds(traces: list, ratios) -> dict:
    """(trace name, ratio) -> the LP lower bound's slowdown (nan where it found none)."""
    out = {}
    for trace in traces:
        for ratio in ratios:
            bound = sim.lower_bound(trace, ratio=ratio)
            out[trace.name, ratio] = bound.slowdown if bound.found else math.nan
    return out


def report(cells: list[Cell], lower: dict | None = None) -> None:
    print(
        "default / --no-orphan-rebuild / --as-prototype; * = the default is more than "
        f"{TOLERANCE:.0%} slower than the better of the other two, or fails where one runs"
    )
    for trace in dict.fromkeys(c.trace for c in cells):
        print(f"\n{trace}")
        rows = [c for c in cells if c.trace == trace]
        for heuristic in dict.fromkeys(c.heuristic for c in rows):
            print(f"  {heuristic}")
            for c in rows:
                if c.heuristic == heuristic:
                    bound = "" if lower is None else f"  (bound {lower[c.trace, c.ratio]:.3f})"
                    print(f"    {c.ratio:<5g} {c.text()}{bound}")
    losing = [c for c in cells if c.default_loses]
    print(f"\nthe default is worse in {len(losing)} of {len(cells)} cells:")
    for c in losing:
        print(f"  {c.trace} {c.heuristic} {c.ratio:g}: {c.text()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "logs",
        nargs="*",
        metavar="LOG",
        type=input_file,
        help="traces (default: the bundled ones)",
    )
    p.add_argument("--heuristics", type=heuristic_names, default=list(HEURISTICS))
    p.add_argument("--ratios", type=ratios, default=list(RATIOS))
    p.add_argument(
        "--jobs", type=whole_number(1), default=None, help="processes (default: all cores)"
    )
    p.add_argument("--bound", action="store_true", help="add the LP lower bound (needs SciPy)")
    args = p.parse_args()
    if args.bound:
        require_scipy(p.prog, "--bound")
    try:
        traces = [sim.load_log(path) for path in (args.logs or sim.bundled_traces())]
    except (OSError, sim.TraceError) as e:
        sys.exit(f"sim_vs_prototype: {e}")
    cells = measure(traces, args.heuristics, args.ratios, args.jobs)
    report(cells, bounds(traces, args.ratios) if args.bound else None)


if __name__ == "__main__":
    main()
