"""``minidtr train``: train a model under a budget and print a summary, or, with
``--find-budget``, probe for the lowest budget ratio that trains."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from .cli_args import (
    DEFAULT_MAX_SLOWDOWN,
    EXIT_FAILED,
    EXIT_USAGE,
    FIND_BUDGET_SLOWDOWN,
    MAX_SEED,
    RUNTIME_ARGUMENTS,
    UNSET,
    add_runtime_arguments,
    check_outputs,
    parse_ratio,
    plot_path,
    require_plotting,
    runtime_options,
    usage_error,
    whole_number,
)
from .cli_report import (
    Progress,
    budget_verdict,
    frontier_table,
    summary_table,
    thrash_verdict,
)
from .explain import write_event_log
from .training import (
    MEASURE_STEPS,
    ConfigError,
    TrainConfig,
    TrainingInterrupted,
    measure_unbounded,
    train,
)

PROG = "minidtr train"
DEFAULT_STEPS = 50
FIND_BUDGET_STEPS = 3
# The settings that act only when something is evicted to make room: without a budget
# (--budget, --ratio or --find-budget) they are refused rather than silently ignored.
# --dealloc is not one of them: it decides what a dead tensor's death frees, budget or not.
EVICTION_SETTINGS = ("heuristic", "rebuild_orphans", "max_slowdown", "max_wall_slowdown")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``train`` subcommand's parser, added to ``sub`` (the front door's subparsers)."""
    from .models.tasks import MODELS, SIZES

    train = sub.add_parser(
        "train",
        help="train a model under a memory budget",
        description="Train a model under a memory budget and print a summary.",
    )
    train.add_argument(
        "model",
        choices=sorted(MODELS),
        metavar="MODEL",
        help="one of: " + ", ".join(sorted(MODELS)),
    )
    _add_budget_options(train)
    _add_run_options(train, SIZES)
    train.add_argument(
        "--find-budget",
        action="store_true",
        help="instead of training: search the lowest budget ratio that trains within "
        f"--max-slowdown (default {FIND_BUDGET_SLOWDOWN}), probing {FIND_BUDGET_STEPS} steps "
        "(or --steps) per ratio, and print the table of probes",
    )
    train.set_defaults(**dict.fromkeys(EVICTION_SETTINGS, UNSET))  # to tell them given
    return train


def _add_budget_options(p: argparse.ArgumentParser) -> None:
    limit = p.add_mutually_exclusive_group()
    add_runtime_arguments(limit, ["budget"])
    limit.add_argument(
        "--ratio",
        type=parse_ratio,
        metavar="R",
        help="budget as a fraction of the unbounded peak (of the first two training steps, "
        "measured first on a fresh copy of the model; see --measure-steps)",
    )
    p.add_argument(
        "--measure-steps",
        type=whole_number(1),
        default=MEASURE_STEPS,
        metavar="N",
        help="measure the unbounded peak and the floor on the first N steps (default 2; "
        "more where batches differ in size, as a Tree-LSTM's do)",
    )
    add_runtime_arguments(
        p,
        [
            "heuristic",
            "dealloc",
            "rebuild_orphans",
            "cost",
            "max_slowdown",
            "max_wall_slowdown",
            "fit",
            "placement",
        ],
    )


def _add_run_options(p: argparse.ArgumentParser, sizes: Any) -> None:
    p.add_argument("--size", default="small", choices=sizes, help="model size (default small)")
    p.add_argument(
        "--steps",
        type=whole_number(1),
        default=None,
        help=f"training steps (default {DEFAULT_STEPS}; {FIND_BUDGET_STEPS} per probe with "
        "--find-budget)",
    )
    p.add_argument(
        "--batch", type=whole_number(1), default=None, help="batch size (default: per model)"
    )
    p.add_argument(
        "--seed",
        type=whole_number(0, MAX_SEED),
        default=0,
        help="seed for data, init and order (0 to 2**64 - 1)",
    )
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    add_runtime_arguments(p, ["reference", "measure_real"])
    p.add_argument("--events", metavar="FILE", help="write the event log (JSON lines)")
    p.add_argument("--trace", metavar="FILE", help="record a simulator trace (DTR log format)")
    p.add_argument(
        "--plot", metavar="FILE", type=plot_path, help="write the memory timeline as a PNG"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Run ``minidtr train`` on parsed ``args``; returns the exit status."""
    if args.steps is None:
        args.steps = FIND_BUDGET_STEPS if args.find_budget else DEFAULT_STEPS
    check_arguments(args)
    trace = None
    if args.trace:
        trace = trace_recorder(args.trace)
        if trace is None:
            return EXIT_USAGE
    options = runtime_options(
        args, max_slowdown=max_slowdown(args), record_events=bool(args.events or args.plot)
    )
    config = TrainConfig(
        args.model,
        args.size,
        args.steps,
        args.batch,
        ratio=args.ratio,
        options=options,
        measure_steps=args.measure_steps,
    )
    if args.find_budget:
        return run_find_budget(config, args)
    return run_training(config, args, trace)


def check_arguments(args: argparse.Namespace) -> None:
    """Usage errors (exit 2) found before any work: options that do not go together, a
    device that is not there, outputs that cannot be written, matplotlib missing."""
    if args.find_budget and (args.budget is not None or args.ratio is not None):
        usage_error(PROG, "--find-budget searches the budget; drop --budget/--ratio")
    _check_eviction_settings(args)
    if args.heuristic == "window" and args.fit != "contiguous":
        usage_error(PROG, "--heuristic window evicts runs of adjacent blocks: add --fit contiguous")
    if args.placement != "split" and args.fit != "contiguous":
        usage_error(PROG, f"--placement {args.placement} acts only with --fit contiguous: add it")
    outputs = {"--events": args.events, "--trace": args.trace, "--plot": args.plot}
    if args.find_budget and any(outputs.values()):
        given = ", ".join(option for option, path in outputs.items() if path)
        usage_error(PROG, f"--find-budget writes no {given} (its probes are short runs): drop it")
    if args.device != "cpu":
        from . import backend

        try:
            backend.xp_for(args.device)
        except RuntimeError as e:
            usage_error(PROG, str(e))
    check_outputs(PROG, outputs)
    if args.plot:
        require_plotting(PROG, "--plot", args.plot)


def _check_eviction_settings(args: argparse.Namespace) -> None:
    """Refuse the settings that would be silently ignored for want of a budget."""
    if args.budget is not None or args.ratio is not None or args.find_budget:
        return
    given = [
        RUNTIME_ARGUMENTS[name][0]  # the flag
        for name in EVICTION_SETTINGS
        if getattr(args, name) is not UNSET
    ]
    if given:
        usage_error(
            PROG,
            f"{', '.join(given)}: no effect without a budget (nothing is evicted to make "
            "room): add --budget BYTES or --ratio R",
        )


def run_training(config: Any, args: argparse.Namespace, trace: Any) -> int:
    """Train ``config`` as ``args`` say; print the summary and write the outputs. On
    Ctrl-C, print and write what the steps done recorded, then stop (exit 130)."""
    from .runtime import BudgetError, ThrashError

    progress = Progress(args.steps, not args.no_progress)
    try:
        unbounded = measure_unbounded(config)
        result = train(
            config,
            progress=progress.steps,
            on_loss=progress.on_loss,
            trace=trace,
            watch=progress.watch,
            unbounded=unbounded,
        )
    except TrainingInterrupted as stop:
        progress.close()
        keep_steps_done(stop.result, args)
        raise KeyboardInterrupt from None
    except ConfigError as e:
        usage_error(PROG, str(e))
    except ThrashError as e:
        progress.close()
        keep_steps_done(getattr(e, "result", None), args)
        print(
            f"{PROG}: stopped {args.model}, it was thrashing: "
            f"{thrash_verdict(e, unbounded, args.dealloc)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except BudgetError as e:
        progress.close()
        keep_steps_done(getattr(e, "result", None), args)
        print(
            f"{PROG}: the budget is too small to train {args.model}: {e} "
            f"({budget_verdict(e, unbounded, args.dealloc)})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(summary_table(result))
    finish_outputs(result, args.events, args.plot, args.trace)
    return 0


def max_slowdown(args: argparse.Namespace) -> float | None:
    """The thrash limit in force: as given, else the paper's 2x for --find-budget (its
    probes look for the lowest ratio that does not thrash) and the guard's default when
    training."""
    if args.max_slowdown is not UNSET:
        return args.max_slowdown
    return FIND_BUDGET_SLOWDOWN if args.find_budget else DEFAULT_MAX_SLOWDOWN


def keep_steps_done(result: Any, args: argparse.Namespace) -> None:
    """What a run stopped by Ctrl-C or an error keeps: the summary of the steps done,
    the event log (its header says how it ended, and after how many steps) and the
    memory timeline. Not the trace: a trace is a whole run, recorded only when the run
    ends. Nothing when the error came before the steps (``result`` None)."""
    if result is None:
        return
    if result.losses:
        print(summary_table(result))
    finish_outputs(result, args.events, args.plot)
    if args.trace:
        how = "was interrupted" if result.interrupted else "stopped"
        print(f"trace: not written to {args.trace} (the run {how})")


def run_find_budget(config: Any, args: argparse.Namespace) -> int:
    """Probe for the lowest budget ratio and print the probes; on Ctrl-C print those that
    finished, then stop (exit 130)."""
    from .budget_search import SearchInterrupted, find_budget

    try:
        search = find_budget(config, max_slowdown=max_slowdown(args))
    except SearchInterrupted as stop:
        print(frontier_table(stop.search))
        raise KeyboardInterrupt from None
    print(frontier_table(search))
    return 0


def trace_recorder(path: str) -> Any:
    """A context manager that records the budgeted steps as a trace at ``path`` (None
    when this version of minidtr has no simulator recorder)."""
    from . import sim

    record = getattr(sim, "record", None)
    if record is None:
        print(
            f"{PROG}: --trace needs minidtr.sim.record, which this version of minidtr "
            "does not have yet",
            file=sys.stderr,
        )
        return None
    return record(path)


def finish_outputs(
    result: Any, events_path: str | None, plot_path: str | None, trace_path: str | None = None
) -> None:
    """Write the event log and the memory timeline of ``result``; say where each went."""
    if events_path:
        write_events(result, events_path)
    if plot_path:
        draw_timeline(result, plot_path)
    if trace_path:
        print(f"trace: {trace_path}")


def write_events(result: Any, path: str) -> None:
    """The event log of ``result`` at ``path``, after its header (the budget, the policy,
    the model and, for a run that stopped early, ``interrupted`` or ``stopped_by`` and
    ``steps_done``). Removed
    if a second Ctrl-C stops the writing, rather than left cut."""
    c, events = result.config, result.runtime.events
    if not events:
        print(f"event log: not written to {path} (no op ran)")
        return
    header: dict[str, Any] = {"model": c.model, "size": c.size}
    if result.interrupted:
        header.update(interrupted=True, steps_done=len(result.losses))
    elif result.stopped_by:
        header.update(stopped_by=result.stopped_by, steps_done=len(result.losses))
    try:
        write_event_log(path, result.runtime, **header)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            os.remove(path)
        raise
    marks = sum(1 for event in events if event["event"] == "step")
    counts = f"{len(events) - marks:,} events and {marks:,} step mark{'s' if marks != 1 else ''}"
    done = f", after {len(result.losses)} steps, interrupted" if result.interrupted else ""
    print(f"event log: {path} ({counts}{done}; minidtr explain {path})")


def draw_timeline(result: Any, path: str) -> None:
    """The memory timeline of ``result`` at ``path``; none, said so, when no op ran (a
    budget too small for the first one)."""
    from .plots import memory_timeline

    c = result.config
    if not result.runtime.events:
        print(f"memory timeline: not written to {path} (no op ran)")
        return
    steps = f"{c.steps} steps"
    if result.interrupted or result.stopped_by:
        how = "interrupted" if result.interrupted else f"stopped by a {result.stopped_by}"
        steps = f"{len(result.losses)} of {steps} ({how})"
    memory_timeline(
        result.runtime.events,
        path,
        result.budget,
        title=f"{c.model} ({c.size}), {steps}",
        cost=c.cost,
    )
    print(f"memory timeline: {path}")
