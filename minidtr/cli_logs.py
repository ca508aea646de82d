"""``minidtr explain`` and ``minidtr plot``: read an event log, tell what it shows in
words (and as an explorer page), or draw its memory timeline."""

from __future__ import annotations

import argparse
from typing import Any

from .cli_args import (
    check_input,
    check_outputs,
    parse_bytes,
    plot_path,
    require_plotting,
    whole_number,
)
from .explain import explain, human_bytes, load_events, summarize


def add_explain_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``explain`` subcommand's parser, added to ``sub``."""
    ex = sub.add_parser(
        "explain",
        help="tell in plain words what an event log shows",
        description="Summarize an event log written by `minidtr train --events` "
        "or Runtime.export_events.",
    )
    ex.add_argument("events", metavar="EVENTS.jsonl")
    ex.add_argument(
        "--top", type=whole_number(1), default=5, help="how many ops to list (default 5)"
    )
    ex.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write a self-contained page to explore the log in a browser: the memory "
        "timeline, each eviction's candidates and scores, each remat's cascade",
    )
    return ex


def add_plot_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``plot`` subcommand's parser, added to ``sub``."""
    plot = sub.add_parser("plot", help="memory timeline PNG from an event log")
    plot.add_argument("events", metavar="EVENTS.jsonl")
    plot.add_argument("out", metavar="OUT.png", type=plot_path)
    plot.add_argument(
        "--budget",
        type=parse_bytes,
        default=None,
        help="budget line (default: from the log's header, if any)",
    )
    return plot


def run_explain(args: argparse.Namespace) -> int:
    """Run ``minidtr explain`` on parsed ``args``; returns the exit status."""
    check_input("minidtr explain", args.events)
    check_outputs("minidtr explain", {"--html": args.html}, inputs=[args.events])
    events = load_events(args.events)
    print(explain(summarize(events), top=args.top))
    if args.html:
        from .explorer import write_html

        size = write_html(events, args.html, title=args.events)
        print(f"\nexplorer page: {args.html} ({human_bytes(size)}; open it in a browser)")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    """Run ``minidtr plot`` on parsed ``args``; returns the exit status."""
    from .plots import memory_timeline

    check_input("minidtr plot", args.events)
    check_outputs("minidtr plot", {"OUT.png": args.out}, inputs=[args.events])
    require_plotting("minidtr plot", None, args.out)
    events = load_events(args.events)
    budget = args.budget if args.budget is not None else summarize(events).budget
    memory_timeline(events, args.out, budget, title=args.events)
    print(f"memory timeline: {args.out}")
    return 0
