"""Step 7: heuristics compared in the simulator (a reference solution).

The paper's Figure 2 replays one recorded training step of each model under
budgets from 90% of its peak down, for each heuristic, and plots the slowdown
(compute + recompute) / compute. ``minidtr.sim.simulate`` replays a trace with the
live runtime's own allocator and heuristics; here it draws the same figure.
"""

from __future__ import annotations

from collections.abc import Sequence

from minidtr import sim

LIMIT = 2.0  # the paper stops a replay whose slowdown passes 2x: it thrashes


def slowdowns(
    trace: sim.Trace, heuristic: str, ratios: Sequence[float]
) -> dict[float, float | None]:
    """The slowdown of replaying ``trace`` at each budget ratio with ``heuristic``; None
    where the replay did not finish (out of memory, or stopped past ``LIMIT``)."""
    out: dict[float, float | None] = {}
    for ratio in ratios:
        result = sim.simulate(trace, ratio=ratio, heuristic=heuristic, thrash=LIMIT)
        out[ratio] = result.slowdown if result.status == "ok" else None
    return out


def lowest_ratio(curve: dict[float, float | None], max_slowdown: float = LIMIT) -> float | None:
    """The lowest ratio from which the replay stays within ``max_slowdown`` at that ratio and
    every higher one of ``curve``; None when it does not at the highest."""
    lowest = None
    for ratio in sorted(curve, reverse=True):
        slowdown = curve[ratio]
        if slowdown is None or slowdown > max_slowdown:
            break
        lowest = ratio
    return lowest


def figure2(
    traces: dict[str, sim.Trace],
    heuristics: Sequence[str],
    ratios: Sequence[float],
    path: str | None = None,
) -> dict[str, dict[str, dict[float, float | None]]]:
    """trace name -> heuristic -> ratio -> slowdown; with ``path``, also the figure as a
    PNG: one panel per trace, slowdown against ratio, one line per heuristic."""
    table = {
        name: {h: slowdowns(trace, h, ratios) for h in heuristics} for name, trace in traces.items()
    }
    if path is not None:
        draw(table, path)
    return table


def draw(table: dict[str, dict[str, dict[float, float | None]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(table), figsize=(4 * len(table), 3.2), squeeze=False)
    for ax, (name, rows) in zip(axes[0], table.items(), strict=True):
        for heuristic, curve in rows.items():
            points = sorted((r, s) for r, s in curve.items() if s is not None)
            ax.plot([r for r, _ in points], [s for _, s in points], "o-", label=heuristic)
        ax.set_title(name)
        ax.set_xlabel("budget / peak")
        ax.invert_xaxis()
        ax.set_ylim(0.95, LIMIT + 0.05)
    axes[0][0].set_ylabel("slowdown")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
