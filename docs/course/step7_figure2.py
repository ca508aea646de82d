"""Step 7: heuristics compared in the simulator (docs/course/step7_figure2.md).

Fill in the three functions below, then check your work:

    python -m minidtr.course check 7

``minidtr.sim.simulate(trace, ratio=r, heuristic=h, thrash=LIMIT)`` replays a recorded
training step under r times its unbounded peak with heuristic h (a name: dtr,
dtr_eq, dtr_local, msps, lru, size, ...) and returns a ``SimResult``: its ``status``
("ok", "oom": the budget cannot hold what one op needs, "thrash": stopped once
the slowdown passed ``thrash``) and its ``slowdown``, (compute + recompute) / compute.
``minidtr.sim.load_log(minidtr.sim.bundled_traces(["resnet"])[0])`` is the recorded
step of the bundled ResNet.
"""

from __future__ import annotations

from collections.abc import Sequence

from minidtr import sim

LIMIT = 2.0  # the paper stops a replay whose slowdown passes 2x: it thrashes


def slowdowns(
    trace: sim.Trace, heuristic: str, ratios: Sequence[float]
) -> dict[float, float | None]:
    """ratio -> the slowdown of replaying ``trace`` at that budget ratio with ``heuristic``
    (stopped past ``LIMIT``); None where the replay did not finish ("oom" or "thrash")."""
    # TODO(step 7)
    raise NotImplementedError("slowdowns")


def lowest_ratio(curve: dict[float, float | None], max_slowdown: float = LIMIT) -> float | None:
    """How low the budget can go: the lowest ratio of ``curve`` from which the slowdown is
    at most ``max_slowdown`` at that ratio *and at every higher ratio of the curve*;
    None when even the highest fails (or the curve is empty)."""
    # TODO(step 7)
    raise NotImplementedError("lowest_ratio")


def figure2(
    traces: dict[str, sim.Trace],
    heuristics: Sequence[str],
    ratios: Sequence[float],
    path: str | None = None,
) -> dict[str, dict[str, dict[float, float | None]]]:
    """The table of Figure 2, trace name -> heuristic -> ratio -> slowdown (``slowdowns``
    of each); with ``path``, also the figure as a PNG (``draw`` below does it)."""
    # TODO(step 7)
    raise NotImplementedError("figure2")


def draw(table: dict[str, dict[str, dict[float, float | None]]], path: str) -> None:
    """One panel per trace, slowdown against the budget ratio (falling to the right), one
    line per heuristic; a line stops where its replays stop finishing. (Given.)"""
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
