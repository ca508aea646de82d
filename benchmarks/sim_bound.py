"""The lower bound against h_DTR on the seven bundled traces: docs/simulator.md's table.

    python benchmarks/sim_bound.py [--ratios 0.5,0.3,0.2] [--time-limit 600] [--jobs N]

For each bundled trace and budget ratio, ``minidtr.sim.lower_bound`` (the linear
relaxation of ``minidtr.sim.bound``, solved by SciPy's HiGHS) and h_DTR's replay at the
same budget (no thrash guard), as one Markdown table. The bound is at most the slowdown of
every schedule for the trace's op order, h_DTR's included, so ``dtr / bound`` is at least
how far h_DTR can be from the best schedule; ``infeasible``: the budget is below what
one op needs (no schedule fits), ``OOM``: h_DTR could not meet the budget. The solver's
seconds depend on the machine and its load; everything else is the same everywhere.
``minidtr sim bound --bundled --heuristics dtr`` prints the same figures as a plain table.
"""

from __future__ import annotations

import argparse
import math
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.cli_args import positive_seconds, ratios, whole_number
from minidtr.sim.bound import bound_rows
from minidtr.sim.solver_cli import require_scipy

LABELS = {
    "resnet": "ResNet-32",
    "densenet": "DenseNet",
    "unet": "U-Net",
    "lstm": "LSTM",
    "transformer": "Transformer",
    "treelstm": "Tree-LSTM",
    "mlp": "MLP",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ratios", type=ratios, default=[0.5, 0.3, 0.2])
    p.add_argument("--time-limit", type=positive_seconds, default=600.0, help="seconds per program")
    p.add_argument(
        "--jobs", type=whole_number(1), default=None, help="processes (default: all cores)"
    )
    args = p.parse_args()
    require_scipy(p.prog, "the lower bound")
    traces = [sim.load_log(path) for path in sim.bundled_traces()]
    started = time.perf_counter()
    rows = bound_rows(traces, args.ratios, ["dtr"], args.time_limit, jobs=args.jobs)
    print(markdown(rows))
    print(f"\n({len(rows)} programs, {time.perf_counter() - started:.0f} s in all)")


def markdown(rows: list[dict]) -> str:
    """One line per trace and ratio: h_DTR, the bound, their ratio and the LP's seconds."""
    head = ["trace (graph nodes)", "ratio", "dtr", "bound", "dtr / bound", "LP s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, row in enumerate(rows):
        first = i == 0 or rows[i - 1]["trace"] != row["trace"]
        cells = [_label(row) if first else "", f"{row['ratio']:g}"]
        dtr = f"{row['dtr']:.3f}" if math.isfinite(row["dtr"]) else "OOM"
        if row["status"] == "ok":
            bound = f"{row['bound']:.3f}"
            over = f"{row['dtr'] / row['bound']:.3f}" if math.isfinite(row["dtr"]) else "-"
        else:  # infeasible, or no bound in the time limit
            bound, over = row["status"].replace("_", " "), "-"
        cells += [dtr, bound, over, f"{row['solve_time']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _label(row: dict) -> str:
    name = LABELS.get(row["trace"], row["trace"])
    blocks = f", {row['block']} stages per block" if row["block"] > 1 else ""
    return f"{name} ({row['nodes']}{blocks})"


if __name__ == "__main__":
    main()
