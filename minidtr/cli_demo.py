"""``minidtr demo``: train the small ResNet under 30% of its memory, then explain what
the runtime did."""

from __future__ import annotations

import argparse
from typing import Any

from .cli_args import check_outputs, plot_path, require_plotting
from .cli_report import Progress, summary_table
from .cli_train import finish_outputs
from .explain import explain, runtime_header, summarize

PROG = "minidtr demo"
DEMO_MODEL = "resnet"
# The paper's headline budget. The small ResNet-32 is in the paper's memory regime
# (constants 5% of its peak, floor 0.12): at 0.3 it costs about 1.25x recomputation.
DEMO_RATIO = 0.3
DEMO_STEPS = 40
DEMO_PERCENT = round(100 * DEMO_RATIO)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``demo`` subcommand's parser, added to ``sub`` (the front door's subparsers)."""
    demo = sub.add_parser(
        "demo",
        help=f"train {DEMO_MODEL} at {DEMO_PERCENT}%% of its memory",
        description=f"Train the small {DEMO_MODEL} on the digits for "
        f"{DEMO_STEPS} steps under {DEMO_PERCENT}% of the memory "
        "it needs without a budget, then explain what happened.",
    )
    demo.add_argument(
        "--plot", metavar="FILE", type=plot_path, help="also write the memory timeline as a PNG"
    )
    return demo


def demo_report(
    steps: int = DEMO_STEPS,
    progress: Progress | None = None,
    size: str = "small",
    ratio: float = DEMO_RATIO,
) -> tuple[Any, str]:
    """Train the demo (by default; tests take a smaller one) and return (the result, its
    text: the summary table and the peak, eviction and recomputation sections of
    ``explain``)."""
    from .training import TrainConfig, train

    config = TrainConfig(
        DEMO_MODEL, size=size, steps=steps, ratio=ratio, cost="flops", record_events=True
    )
    progress = progress or Progress(steps, False)
    result = train(config, progress=progress.steps, on_loss=progress.on_loss, watch=progress.watch)
    summary = summarize([runtime_header(result.runtime), *result.runtime.events])
    text = explain(summary, top=3)
    score = score_line(result.runtime.heuristic)
    return result, summary_table(result) + "\n\n" + score + "\n\n" + text[text.index("The peak") :]


def score_line(heuristic: Any) -> str:
    """What the demo's evictions were decided by: the heuristic's name and its score in
    the paper's notation, with the terms spelled out."""
    formula = getattr(heuristic, "formula", "?")
    return (
        f"Eviction score ({heuristic.name}): {formula}, lowest evicted first: c is what "
        "recomputing a tensor costs, c(e*) what its evicted neighbourhood would cost to "
        "rebuild with it, m its bytes, s the time since it was last used "
        "(docs/heuristics.md)."
    )


def run(args: argparse.Namespace) -> int:
    """Run ``minidtr demo`` on parsed ``args``; returns the exit status."""
    check_outputs(PROG, {"--plot": args.plot})
    if args.plot:
        require_plotting(PROG, "--plot", args.plot)
    print(
        f"Training the small {DEMO_MODEL} on the 8x8 digits under {DEMO_RATIO:.0%} of the "
        "memory it needs without a budget (the peak of two unbounded steps, measured "
        "first).\n"
    )
    from .training import TrainingInterrupted

    progress = Progress(DEMO_STEPS, True)
    try:
        result, text = demo_report(DEMO_STEPS, progress)
    except TrainingInterrupted as stop:  # keep what the steps done show
        progress.close()
        if stop.result.losses:
            print(summary_table(stop.result))
        finish_outputs(stop.result, None, args.plot)
        raise KeyboardInterrupt from None
    print(text)
    finish_outputs(result, None, args.plot)
    print(
        "\nNext: minidtr train MODEL --ratio 0.5 --events ev.jsonl; minidtr explain ev.jsonl; "
        "minidtr models"
    )
    return 0
