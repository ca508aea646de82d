"""The ``minidtr`` command (also ``python -m minidtr``): its front door.

    minidtr train MODEL [--budget BYTES | --ratio R] [--heuristic H] [--steps N] ...
    minidtr demo
    minidtr explain EVENTS.jsonl [--html OUT.html]
    minidtr plot EVENTS.jsonl OUT.png
    minidtr animate EVENTS.jsonl [EVENTS.jsonl ...] OUT.gif
    minidtr models
    minidtr sim ...          (the trace simulator, minidtr.sim.cli)

This module builds the parser from the subcommands' own modules and runs one, with the
exit statuses and the handling of Ctrl-C and of a closed pipe that every subcommand
shares. The subcommands live in ``cli_train`` (train, --find-budget), ``cli_demo``,
``cli_logs`` (explain, plot), ``cli_animate`` and ``sim.cli``; what they show, in
``cli_report``; the argument types and checks they share with ``minidtr sim``, in
``cli_args``.
See docs/cli.md for every option.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from . import cli_animate, cli_demo, cli_logs, cli_train
from .cli_args import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageParser,
    os_error_text,
    parse_bytes,
    runtime_options,
    usage_error,
)
from .cli_demo import demo_report
from .cli_train import max_slowdown
from .host import tune_for_command

# What tests and programs have long imported from here (the front door re-exports them).
__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "build_parser",
    "demo_report",
    "main",
    "max_slowdown",
    "parse_bytes",
    "runtime_options",
]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand but ``sim`` (listed only: ``minidtr sim`` parses its
    own arguments, ``minidtr.sim.cli``)."""
    parser = UsageParser(
        prog="minidtr",
        description="Train models under a memory budget with Dynamic Tensor Rematerialization, "
        "and see what the runtime evicted and recomputed.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_train.add_parser(sub)
    cli_demo.add_parser(sub)
    cli_logs.add_explain_parser(sub)
    cli_logs.add_plot_parser(sub)
    cli_animate.add_parser(sub)
    sub.add_parser("models", help="list the models, their data and parameter counts")
    sub.add_parser(
        "sim", help="replay traces in the simulator (minidtr sim --help)", add_help=False
    )
    return parser


def run_models(args: argparse.Namespace) -> int:
    """Run ``minidtr models``: each model's parameter count per size, and its data."""
    from .models.tasks import MODELS, SIZES, build_model

    print(f"{'model':<13}{'parameters (' + '/'.join(SIZES) + ')':<32}data and task")
    for name, (_, description) in MODELS.items():
        counts = "/".join(f"{build_model(name, size).num_parameters():,}" for size in SIZES)
        print(f"{name:<13}{counts:<32}{description}")
    return 0


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": cli_train.run,
    "demo": cli_demo.run,
    "explain": cli_logs.run_explain,
    "plot": cli_logs.run_plot,
    "animate": cli_animate.run,
    "models": run_models,
}


def run_sim(argv: Sequence[str]) -> int:
    try:
        from .sim.cli import main as sim_main
    except ImportError as e:
        print(
            f"minidtr sim: the simulator's command line is not available in this version ({e})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return sim_main(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; returns its exit status (usage errors raise ``SystemExit(2)``, as
    argparse does, after a one-line message). A reader that stops reading the output
    (``minidtr explain ev.jsonl | head``) ends the command quietly."""
    if argv is None:  # the process is the command's own (not a caller's: tests, scripts)
        tune_for_command()
    try:
        status = run_command(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # here, not at the interpreter's exit, where an error is only shown
        return status
    except BrokenPipeError:
        # what is left to print goes nowhere, not into an error at the interpreter's exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def run_command(argv: list[str]) -> int:
    """Parse ``argv`` and run its subcommand, with Ctrl-C deferred to the runtime's next
    consistent point; an interrupt or an expected error is one line on stderr."""
    from ._startup import release_import_guard

    release_import_guard()  # the imports are done: interrupts are this function's now
    if argv and argv[0] == "sim":
        return run_sim(argv[1:])
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:  # named by the subcommand, whose --help lists its options
            usage_error(f"minidtr {args.command}", f"unrecognized arguments: {' '.join(unknown)}")
    except KeyboardInterrupt:
        print("minidtr: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    from .runtime.interrupts import deferred_interrupts

    try:
        with deferred_interrupts():
            return HANDLERS[args.command](args)
    except KeyboardInterrupt:
        print(f"minidtr {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise
    except OSError as e:
        print(f"minidtr {args.command}: {os_error_text(e)}", file=sys.stderr)
        return EXIT_FAILED
    except (ValueError, ImportError, MemoryError) as e:
        print(f"minidtr {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILED
