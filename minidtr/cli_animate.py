"""``minidtr animate``: the classic animation of checkpointing, drawn from event logs
(``minidtr.animate``): each storage a node coloured resident, evicted, being
recomputed or freed, one event a frame; several logs side by side."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .cli_args import check_input, check_outputs, number, usage_error, whole_number

PROG = "minidtr animate"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``animate`` subcommand's parser, added to ``sub``."""
    from .animate import DEFAULT_LIMIT

    p = sub.add_parser(
        "animate",
        help="a GIF of an event log: each storage resident, evicted, recomputed, freed",
        description="Draw event logs (written by `minidtr train --events` or "
        "Runtime.export_events) as an animated GIF, one event a frame: each storage is a "
        "node coloured by its state, under it the memory against the budget. Several logs "
        "are drawn side by side.",
    )
    p.add_argument("logs", nargs="+", metavar="EVENTS.jsonl", help="the event logs, one or more")
    p.add_argument("out", metavar="OUT.gif", help="the GIF to write, every log side by side")
    p.add_argument("--titles", metavar="A,B,...", help="a title per log (default: its path)")
    p.add_argument(
        "--fps",
        type=number(lambda v: 0.1 <= v <= 50, "a number of frames a second in [0.1, 50]"),
        default=4.0,
        help="frames a second (default 4)",
    )
    p.add_argument(
        "--start", type=whole_number(0), default=0, help="the first event shown (default 0)"
    )
    p.add_argument(
        "--limit",
        type=whole_number(1),
        default=DEFAULT_LIMIT,
        help=f"events shown at most, one frame each (default {DEFAULT_LIMIT})",
    )
    p.add_argument(
        "--columns", type=whole_number(1), default=None, help="nodes per row (default: fit)"
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``minidtr animate`` on parsed ``args``; returns the exit status."""
    from .animate import AnimationError, animate
    from .plots import require_matplotlib

    logs, out = args.logs, args.out
    if not out.lower().endswith(".gif"):
        usage_error(PROG, f"{out}: the last argument is the GIF to write (a name ending in .gif)")
    for log in logs:
        if log.lower().endswith(".gif"):
            usage_error(
                PROG,
                f"{log}: only the last argument is a GIF (one GIF shows every log side by "
                "side); the others are the event logs",
            )
    for log in logs:
        check_input(PROG, log)
    check_outputs(PROG, {"OUT.gif": out}, inputs=logs)
    titles = None
    if args.titles is not None:
        titles = [t.strip() for t in args.titles.split(",")]
        if len(titles) != len(logs):
            usage_error(PROG, f"--titles: {len(titles)} titles for {len(logs)} logs")
    try:
        require_matplotlib()
    except ImportError as e:
        usage_error(PROG, str(e))
    try:
        frames = animate(logs, out, titles, args.fps, args.start, args.limit, args.columns)
    except AnimationError as e:
        raise ValueError(str(e)) from None
    size = os.path.getsize(out)
    print(f"animation: {out} ({frames} frames, one per event; {size / 1024:.0f} KiB)")
    return 0
