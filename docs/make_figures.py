"""Regenerate the figures under docs/figures/ (needs matplotlib).

    python docs/make_figures.py                      # the timelines and Figure 2
    python docs/make_figures.py --sweep sweep.csv    # also the per-model budget figure, from
                                                     # benchmarks/frontier.py --csv sweep.csv
    python docs/make_figures.py --only figure2       # one part alone (or a comma list)

Parts:

- ``resnet``: ``resnet_timeline.png``, ResNet-32 (small) for 3 steps at half its peak.
- ``tutorial``: ``tutorial_timeline.png``, the tutorial's six-layer chain at 85% of its peak.
- ``figure2``: ``simulator_figure2.png``, the paper's Figure 2 on the bundled ResNet,
  DenseNet, Transformer and U-Net traces (every heuristic, ratios 0.9 to 0.2), what
  ``minidtr sim ... --plot`` draws (the command is in docs/simulator.md, by the figure).
- ``models``: ``models_budget.png``, slowdown against budget ratio for every model, from
  a sweep CSV (``--sweep``).
- ``chain``: ``chain_checkpointing.gif``, a 16-layer chain run three ways (no budget,
  sqrt(N) checkpoints, DTR at the checkpoints' peak), drawn by ``minidtr animate`` from
  the runs' event logs (docs/course/README.md shows the commands).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from minidtr.explain import runtime_header
from minidtr.plots import memory_timeline, require_matplotlib
from minidtr.training import TrainConfig, train

FIGURES = Path(__file__).parent / "figures"


def resnet_timeline() -> None:
    result = train(TrainConfig("resnet", size="small", steps=3, ratio=0.5, record_events=True))
    memory_timeline(
        result.runtime.events,
        str(FIGURES / "resnet_timeline.png"),
        result.budget,
        title="ResNet-32 (small), 3 training steps at 0.5 x its unbounded peak",
        cost=result.config.cost,
    )


def tutorial_timeline() -> None:
    """On an allocator of its own, as when the example runs alone: its clocks are then the
    ones tutorial.md prints (the allocator's clock runs on across the runs of a process)."""
    from minidtr.testing import isolated_allocator

    namespace: dict = {"__name__": "tutorial"}
    source = (Path(__file__).parent / "tutorial_example.py").read_text()
    devnull = open("/dev/null", "w")  # noqa: SIM115  (silence the example's prints)
    stdout, sys.stdout = sys.stdout, devnull
    try:
        with isolated_allocator():
            exec(compile(source, "tutorial_example.py", "exec"), namespace)
    finally:
        sys.stdout = stdout
        devnull.close()
    tight = namespace["tight"]
    header = runtime_header(tight)
    memory_timeline(
        tight.events,
        str(FIGURES / "tutorial_timeline.png"),
        header["budget"],
        title="the tutorial's six-layer chain, one step at 0.85 x its peak",
        cost=header["cost"],
    )


FIGURE2_TRACES = ("resnet", "densenet", "transformer", "unet")
FIGURE2_RATIOS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)


def figure2() -> None:
    from minidtr import sim
    from minidtr.sim.sweep import plot, sweep, table

    traces = [sim.load_log(str(path)) for path in sim.bundled_traces(FIGURE2_TRACES)]
    results = sweep(traces, FIGURE2_RATIOS)
    plot(results, traces, FIGURES / "simulator_figure2.png")
    print(table(results), end="\n\n")  # docs/simulator.md's tables of the figure


def models_budget(path: str) -> None:
    plt = require_matplotlib()
    series: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            slowdown = float(row["slowdown"]) if row["status"] == "ok" else float("nan")
            series[row["model"]].append((float(row["ratio"]), slowdown, row["status"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (model, points) in enumerate(series.items()):
        points.sort(reverse=True)
        ratios = [r for r, _, _ in points]
        ax.plot(ratios, [s for _, s, _ in points], "o-", label=model)
        failed = [r for r, _, status in points if status != "ok"]
        if failed:  # one row of crosses per model below the 1.0 line
            ax.plot(failed, [0.97 - 0.02 * i] * len(failed), "x", color=ax.lines[-1].get_color())
    ax.set_xlabel("budget / unbounded peak")
    ax.set_ylabel("slowdown (compute + remat) / compute")
    ax.invert_xaxis()
    ax.axhline(1.0, color="0.6", linewidth=0.8)
    ax.set_title("minidtr models under a budget (h_DTR; x at the bottom: OOM or thrash)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(FIGURES / "models_budget.png", dpi=120)
    plt.close(fig)


def chain_animation() -> None:
    import tempfile

    from minidtr.animate import animate
    from minidtr.course.chain import chain_logs

    with tempfile.TemporaryDirectory() as directory:
        runs = chain_logs(directory)
        paths = [str(run.path) for run in runs]
        titles = [run.title for run in runs]
        animate(paths, str(FIGURES / "chain_checkpointing.gif"), titles)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sweep", metavar="CSV", help="a CSV from benchmarks/frontier.py (or models_budget.py)"
    )
    parser.add_argument(
        "--only",
        metavar="PARTS",
        help=f"comma-separated parts to draw, of {', '.join(PARTS)} (default: all; models "
        "needs --sweep)",
    )
    args = parser.parse_args()
    parts = args.only.split(",") if args.only else list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part {unknown[0]!r}; expected one of {', '.join(PARTS)}")
    if "models" in parts and not args.sweep:
        if args.only:
            parser.error("the models part needs --sweep CSV")
        parts.remove("models")
    FIGURES.mkdir(exist_ok=True)
    for part in parts:
        if part == "models":
            models_budget(args.sweep)
        else:
            PARTS[part]()
    written = sorted(p.name for p in [*FIGURES.glob("*.png"), *FIGURES.glob("*.gif")])
    print("docs/figures:", ", ".join(written))
    subprocess.run(["git", "status", "--short", str(FIGURES)], check=False)


PARTS = {
    "resnet": resnet_timeline,
    "tutorial": tutorial_timeline,
    "figure2": figure2,
    "models": models_budget,
    "chain": chain_animation,
}

if __name__ == "__main__":
    main()
