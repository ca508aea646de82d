"""``python -m minidtr.course``: list the steps, or grade a step's file.

    python -m minidtr.course list
    python -m minidtr.course check STEP [--path FILE] [--examples N]
    python -m minidtr.course chain DIR [--layers N] [--segment K]

``check`` grades docs/course/stepN_<name>.py (the skeleton you fill in) or the file
given with ``--path``; exit status 0 when every check passes, 1 when one fails, 2 on
a usage error (a step that does not exist, a missing file), 130 on Ctrl-C (after the
results of the checks that had finished). ``chain`` writes the event logs of three runs
of one chain (no budget, sqrt(N) checkpoints, DTR at the same memory) for ``minidtr
animate``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from .._startup import EXIT_INTERRUPTED
from .grading import EXAMPLES
from .steps import STEPS, step

EXIT_FAILED = 1
EXIT_USAGE = 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m minidtr.course",
        description="DTR in steps: fill in each step's skeleton, then check it against "
        "minidtr's reference policy (docs/course/README.md).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("list", help="the steps, what each teaches, and about how long it takes")
    check = sub.add_parser("check", help="grade a step's file")
    check.add_argument("step", metavar="STEP", help="the step's number, 0 to 7")
    check.add_argument(
        "--path",
        metavar="FILE",
        help="the file to grade (default: docs/course/stepN_<name>.py of this repository)",
    )
    check.add_argument(
        "--examples",
        type=int,
        default=EXAMPLES,
        metavar="N",
        help=f"random programs per property (default {EXAMPLES}; more finds rarer mistakes)",
    )
    chain = sub.add_parser(
        "chain",
        help="write the event logs of one chain run three ways, for minidtr animate",
    )
    chain.add_argument("directory", metavar="DIR", help="where to write the three logs")
    chain.add_argument("--layers", type=int, default=16, help="tanh layers (default 16)")
    chain.add_argument(
        "--segment", type=int, default=4, help="a checkpoint every K layers (default 4)"
    )
    return p


def write_chain(args: argparse.Namespace) -> int:
    if args.layers < 2 or not 1 <= args.segment < args.layers:
        return usage_error(
            f"need --layers >= 2 and 1 <= --segment < --layers, got {args.layers} and "
            f"{args.segment}"
        )
    from ..cli_args import os_error_text
    from .chain import chain_logs

    try:
        runs = chain_logs(args.directory, args.layers, args.segment)
    except OSError as error:  # DIR is a file, or cannot be made or written
        return usage_error(f"chain DIR: cannot write the logs: {os_error_text(error)}")
    for run in runs:
        print(run)
    return 0


def listing() -> str:
    rows = [f"{'step':<5}{'minutes':>8}  title, and what it teaches"]
    for s in STEPS:
        rows.append(f"{s.number:<5}{s.minutes:>8}  {s.title}: {s.teaches}")
        rows.append(f"{'':15}you write: {', '.join(s.writes)}  (docs/course/{s.name}.py)")
    rows.append(f"{'all':<5}{sum(s.minutes for s in STEPS):>8}")
    return "\n".join(rows)


def usage_error(message: str) -> int:
    print(f"python -m minidtr.course: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    from .._startup import release_import_guard

    release_import_guard()  # the imports are done: interrupts are this function's now
    args = parser().parse_args(argv)
    try:
        if args.command == "list":
            print(listing())
            return 0
        if args.command == "chain":
            return write_chain(args)
        return check(args)
    except KeyboardInterrupt:
        print("python -m minidtr.course: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def check(args: argparse.Namespace) -> int:
    try:
        chosen = step(int(args.step))
    except ValueError as error:
        if not args.step.lstrip("-").isdigit():
            last = STEPS[-1].number
            return usage_error(f"STEP is a step's number (0 to {last}), got {args.step!r}")
        return usage_error(str(error))
    if args.examples < 0:
        return usage_error(f"--examples must be >= 0, got {args.examples}")
    path = Path(args.path) if args.path else chosen.skeleton
    if not path.is_file():
        if args.path:
            return usage_error(f"--path {path} is not a file")
        return usage_error(
            f"the skeleton {path} is not there: the skeletons are in docs/course of a clone "
            "of the repository; give your file with --path"
        )
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        return usage_error("the graders need hypothesis: pip install hypothesis (or '.[test]')")
    for name in chosen.needs:
        try:
            importlib.import_module(name)
        except ImportError:
            return usage_error(
                f"step {chosen.number}'s grader needs {name}: pip install {name} (or '.[course]')"
            )
    from .runner import GradingInterrupted, grade, report

    try:
        results = grade(chosen, path, args.examples)
    except GradingInterrupted as stopped:
        show(report(chosen, path, stopped.results, interrupted=True))
        raise
    show(report(chosen, path, results))
    return 0 if all(r.passed for r in results) else EXIT_FAILED


def show(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader stopped reading (| head): nothing more to say
        sys.stdout = None  # no second error when Python flushes at exit


if __name__ == "__main__":
    sys.exit(main())
