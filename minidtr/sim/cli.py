"""``minidtr sim``: replay traces, sweep budgets and heuristics, and run the experiments.

minidtr sim LOG... [--ratios 1,0.9,...] [--heuristics dtr,dtr_eq,...] [--csv F [--resume]]
                   [--plot F] [--jobs N | --scheduler ADDRESS]
minidtr sim --bundled ...                   the same on the traces that ship with minidtr
minidtr sim info LOG... | --bundled         what a trace holds, its peak and floors
minidtr sim frontier LOG... [--max-slowdown X] [--heuristic H]
                                            the lowest ratio that replays within X
minidtr sim optimal LOG [--ratios ...]      DTR against the optimal schedule (MILP)
minidtr sim bound LOG... [--ratios ...]     a lower bound on every schedule's slowdown (LP)
minidtr sim sqrt-n [--n 100,400,1600]       Theorem 3.1's chain table
minidtr sim adversary [--budget 8 --n ...]  Theorem 3.2's adversarial family
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..cli_args import (
    UsageParser,
    above_one,
    add_runtime_arguments,
    check_input,
    check_outputs,
    names,
    number,
    os_error_text,
    plot_path,
    ratios,
    require_plotting,
    runtime_options,
    whole_number,
    whole_numbers,
)
from .cluster_cli import ClusterLostError, add_cluster_options, cluster, cluster_settings
from .sweep import DEFAULT_HEURISTICS, DEFAULT_RATIOS

MOST_LAYERS = 10_000  # sqrt-n's --n
MOST_EXTENSIONS = 5_000  # adversary's --n
SUBCOMMANDS = ("info", "frontier", "optimal", "bound", "sqrt-n", "adversary")


def sizes(most: int) -> Callable[[str], list[int]]:
    """Comma-separated whole numbers from 1 to ``most``, each once: an experiment's sizes,
    whose time grows faster than linearly (a typo of a few more digits would run for days)."""
    numbers = whole_numbers(1, most)

    def parse(text: str) -> list[int]:
        return list(dict.fromkeys(numbers(text)))

    return parse


def _add_logs(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "logs", nargs="*", metavar="LOG", help="trace files (the DTR log format; .gz is read too)"
    )
    p.add_argument(
        "--bundled",
        action="store_true",
        help="also replay the traces that ship with minidtr (one training step of each model)",
    )


def _input_paths(args: argparse.Namespace) -> list[str]:
    """The traces a command reads: its LOGs, then the bundled ones with --bundled."""
    paths = list(getattr(args, "logs", ()))
    if getattr(args, "bundled", False):
        from .bundled import bundled_traces

        paths += [str(path) for path in bundled_traces()]
    return paths


def _log_paths(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    paths = _input_paths(args)
    if not paths:
        p.error("give trace files (LOG ...) or --bundled for the traces that ship with minidtr")
    return paths


def heuristic_name(name: str) -> str:
    """A heuristic the simulator knows: a runtime heuristic or its trace heuristic
    (belady and its variants); an unknown name's error lists both kinds."""
    from ..runtime.heuristics import make_heuristic
    from .clairvoyant import TRACE_HEURISTICS, parse_variant

    try:
        if name.split("+")[0] in TRACE_HEURISTICS:
            parse_variant(name)
        else:
            make_heuristic(name)
    except ValueError as e:
        if name.split("+")[0] in (*TRACE_HEURISTICS, "learned"):
            raise argparse.ArgumentTypeError(str(e)) from None
        raise argparse.ArgumentTypeError(
            f"{e}; or the simulator's trace heuristic 'belady' "
            "(and its belady+<cost>+<size|nosize>+<time|ops> variants)"
        ) from None
    return name


def heuristic_names(text: str) -> list[str]:
    """Comma-separated heuristic names, each as ``heuristic_name`` takes it, each once."""
    return list(dict.fromkeys(heuristic_name(name) for name in names(text)))


thrash_limit = number(lambda value: value == 0 or value > 1, "a slowdown > 1, or 0 for no limit")
open_fraction = number(lambda value: 0.0 < value < 1.0, "a fraction in (0, 1)")


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    return UsageParser(prog=prog, description=description)


def _load(prog: str, paths: Sequence[str]):
    """The traces, or a one-line error: exit 2 for a file that cannot be opened (checked
    for all before any is read), 1 for one that is not a valid trace."""
    from ..reading import read_limits
    from .trace import TraceError, load_log

    for path in paths:
        check_input(prog, path)
    try:
        read_limits()  # the environment's MINIDTR_MAX_* limits, checked once
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None
    traces, named = [], {}
    for path in paths:
        try:
            trace = load_log(path)
        except (OSError, TraceError) as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return None
        if trace.name in named:  # results name their trace: the two would be one
            print(
                f"{prog}: {named[trace.name]} and {path} are both named {trace.name!r} (a "
                "trace is named by its file): rename one",
                file=sys.stderr,
            )
            return None
        named[trace.name] = path
        traces.append(trace)
    return traces


def _parse(p: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``, then check that the outputs named (--csv, --plot) can be written,
    are not the input traces, and, for --plot, that matplotlib can write it."""
    args = p.parse_args(argv)
    _check_fit(p, args)
    outputs = {"--csv": getattr(args, "csv", None), "--plot": getattr(args, "plot", None)}
    check_outputs(p.prog, outputs, inputs=_input_paths(args))
    if outputs["--plot"]:  # before the replays, not after them
        require_plotting(p.prog, "--plot", outputs["--plot"])
    return args


def _check_fit(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors, before any work, for what acts only with a contiguous fit."""
    fit = getattr(args, "fit", None)  # None: the command has no --fit
    named = [*(getattr(args, "heuristics", None) or []), getattr(args, "heuristic", None)]
    if "window" in named and fit != "contiguous":
        if fit is None:
            p.error("the window heuristic evicts runs of adjacent blocks, which only minidtr "
                    "sim and minidtr train place (--fit contiguous)")  # fmt: skip
        p.error("--heuristics window evicts runs of adjacent blocks: add --fit contiguous")
    placement = getattr(args, "placement", "split")
    if placement != "split" and fit != "contiguous":
        p.error(f"--placement {placement} acts only with --fit contiguous: add it")


def _add_heuristics(p: argparse.ArgumentParser, default: Sequence[str], **more: str) -> None:
    p.add_argument("--heuristics", type=heuristic_names, default=list(default), **more)


def _print_rows(rows: list[dict], csv_path: str | None, columns=None) -> int:
    """Print ``rows`` as a table and write them to ``csv_path`` (when given)."""
    from .sweep import format_rows, write_rows

    print(format_rows(rows, columns))
    if csv_path:
        write_rows(rows, csv_path)
        print(f"CSV: {csv_path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, prog = sweep_main, "minidtr sim"
    if argv and argv[0] in SUBCOMMANDS:
        prog = f"minidtr sim {argv[0]}"
        command = {
            "info": info_main,
            "frontier": frontier_main,
            "optimal": _solver_command("optimal_main"),
            "bound": _solver_command("bound_main"),
            "sqrt-n": sqrt_n_main,
            "adversary": adversary_main,
        }[argv[0]]
        argv = argv[1:]
    try:
        return command(argv)
    except SystemExit as e:  # a usage error (its one line is printed) or --help: its status
        return e.code if isinstance(e.code, int) else 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # minidtr.cli's: the reader stopped reading
    except OSError as e:  # an output that passed check_output and still failed
        print(f"{prog}: {os_error_text(e)}", file=sys.stderr)
        return 1


def _solver_command(name: str):
    """``minidtr sim optimal`` and ``bound`` (minidtr.sim.solver_cli, which imports this
    module's helpers)."""

    def command(argv: Sequence[str]) -> int:
        from . import solver_cli

        return getattr(solver_cli, name)(argv)

    return command


def sweep_main(argv: Sequence[str]) -> int:
    p = _sweep_parser()
    args = _parse(p, argv)
    if args.resume and not args.csv:
        p.error("--resume needs --csv FILE (the sweep's results so far)")
    if args.as_prototype:
        _check_prototype(p, args)
    settings = cluster_settings(p, args)
    traces = _load(p.prog, _log_paths(p, args))
    if traces is None:
        return 1
    thrash = args.thrash if args.thrash > 0 else math.inf
    finished: list = []
    from .sweep_csv import SweepCsvError

    try:
        with cluster(settings) as client:
            results = _sweep(traces, args, client, thrash, finished.append)
    except SweepCsvError as e:  # a --resume CSV that is not a sweep's: a bad input file
        print(f"minidtr sim: {e}", file=sys.stderr)
        return 1
    except ClusterLostError as e:
        where = ""
        if args.csv:
            done = len(finished)
            where = f"; the {done} new replays finished are in {args.csv}: rerun with --resume"
        print(f"minidtr sim: {e}{where}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"minidtr sim: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = f"; they are in {args.csv}: rerun with --resume to finish" if args.csv else ""
        done = len(finished)
        print(f"\nminidtr sim: interrupted after {done} new replays{where}", file=sys.stderr)
        return 130
    _print_sweep(results, finished, traces, args, thrash)
    return 0


# What --as-prototype sets itself: the flags that would change it, and how to tell them given
PROTOTYPE_OVERRIDES = (
    ("--dealloc", lambda a: a.dealloc != "eager"),
    ("--no-orphan-rebuild", lambda a: not a.rebuild_orphans),
    ("--keep-dead-remats", lambda a: a.keep_dead_remats),
    ("--sample", lambda a: a.sample),
    ("--min-size", lambda a: a.min_size > 0),
    ("--fit", lambda a: a.fit != "bytes"),
)


def _check_prototype(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage error naming a flag that --as-prototype overrides."""
    for flag, given in PROTOTYPE_OVERRIDES:
        if given(args):
            p.error(
                f"--as-prototype sets what {flag} sets (the paper's simulator's rules): drop {flag}"
            )


def _sweep_parser() -> argparse.ArgumentParser:
    p = parser(
        "minidtr sim",
        "Replay DTR logs under budgets and heuristics (other commands: "
        + ", ".join(SUBCOMMANDS)
        + "; see minidtr sim COMMAND --help).",
    )
    _add_logs(p)
    p.add_argument(
        "--ratios",
        type=ratios,
        default=list(DEFAULT_RATIOS),
        help="budget ratios of the unbounded peak (default 1,0.9,...,0.1)",
    )
    _add_heuristics(
        p,
        DEFAULT_HEURISTICS,
        help="comma-separated names (default: all seven; ablation names such as "
        "eq+size+nostale work too, learned, and the simulator's belady)",
    )
    add_runtime_arguments(
        p, ["dealloc", "rebuild_orphans", "keep_dead_remats", "reference", "fit", "placement"]
    )
    add_runtime_arguments(p, ["as_prototype"])
    p.add_argument(
        "--thrash",
        type=thrash_limit,
        default=2.0,
        help="stop a replay once its slowdown passes this (default 2; 0 = never)",
    )
    _add_jobs_option(p)
    add_runtime_arguments(p, ["sample", "min_size"])
    p.add_argument("--csv", metavar="FILE", help="append every result to this CSV as it finishes")
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the results already in --csv FILE and replay only the missing points",
    )
    p.add_argument(
        "--plot", metavar="FILE", type=plot_path, help="slowdown vs budget ratio (PNG, matplotlib)"
    )
    add_cluster_options(p)
    return p


def _sweep(traces: list, args: argparse.Namespace, client: Any, thrash: float, on_result) -> list:
    from .sweep import sweep

    return sweep(
        traces,
        args.ratios,
        args.heuristics,
        jobs=args.jobs,
        client=client,
        csv_path=args.csv,
        resume=args.resume,
        progress=sys.stderr.isatty(),
        on_result=on_result,
        thrash=thrash,
        options=runtime_options(args),
    )


def _print_sweep(
    results: list, replayed: list, traces: list, args: argparse.Namespace, thrash: float
) -> None:
    """The sweep's table, the speed of its replays (``replayed``: the results not read
    back from a --resume CSV), and where the CSV and the plot went."""
    from .sweep import address_table, plot, table

    print(table(results))
    if args.fit == "contiguous":
        print("\ncontiguous fit (" + args.placement + "-fit, 512-byte alignment):")
        print(address_table(results))
    replay = sum(r.replay_time for r in replayed)
    ops = sum(r.instructions_done for r in replayed)
    read_back = len(results) - len(replayed)
    print(
        f"\n{len(replayed)} replays"
        + (f" ({read_back} more results read back from {args.csv})" if read_back else "")
        + (
            f", {replay:.2f} s of replay in all ({ops / replay:,.0f} instructions/s)"
            if replay
            else ""
        )
    )
    if args.csv:
        print(f"CSV: {args.csv}")
    if args.plot:
        plot(results, traces, args.plot, thrash)
        print(f"plot: {args.plot}")


def info_main(argv: Sequence[str]) -> int:
    p = parser("minidtr sim info", "Summarize traces.")
    _add_logs(p)
    args = p.parse_args(argv)
    traces = _load(p.prog, _log_paths(p, args))
    if traces is None:
        return 1
    from .floors import floor

    for trace in traces:
        f = floor(trace)
        print(
            f"{trace.name}: {len(trace)} instructions, {trace.ops} ops, {trace.accesses} "
            f"accesses, compute {trace.total_compute:,.0f} ns, {len(trace.outputs)} outputs"
        )
        print(f"  unbounded peak {f.peak:,} B")
        print(
            f"  physical floor {f.bytes:,} B = {f.ratio:.3f} of peak"
            + (f" (at {f.op})" if f.op else " (the constants alone)")
            + ": no policy runs this trace in less"
        )
        print(f"    constants at most alive:        {f.constants:,} B ({f.constants_ratio:.3f})")
        print(
            f"    largest single-op working set: {f.working_set:,} B "
            f"({f.working_set_ratio:.3f}, {f.working_set_op or '-'})"
        )
    return 0


def frontier_main(argv: Sequence[str]) -> int:
    p = parser(
        "minidtr sim frontier",
        "Search the lowest budget ratio at which each trace replays within a "
        "slowdown: scan down from 1 in steps, then bisect (replays only, no kernels).",
    )
    p.add_argument("logs", nargs="+", metavar="LOG")
    p.add_argument(
        "--max-slowdown", type=above_one, default=2.0, help="the slowdown allowed (default 2)"
    )
    p.add_argument(
        "--heuristic",
        type=heuristic_name,
        default="dtr",
        help="eviction heuristic (default dtr; learned; the simulator's belady too)",
    )
    p.add_argument("--step", type=open_fraction, default=0.1, help="scan step (default 0.1)")
    p.add_argument(
        "--tolerance",
        type=open_fraction,
        default=0.01,
        help="bisect down to this (default 0.01)",
    )
    add_runtime_arguments(p, ["dealloc", "rebuild_orphans"])
    args = _parse(p, argv)
    if args.tolerance > args.step:
        p.error(f"--tolerance ({args.tolerance:g}) must be at most --step ({args.step:g})")
    traces = _load(p.prog, args.logs)
    if traces is None:
        return 1
    for i, trace in enumerate(traces):
        try:
            table = _frontier_table(trace, args, "\n" if i else "")
        except ValueError as e:
            print(f"minidtr sim frontier: {e}", file=sys.stderr)
            return 2
        print(table)
    return 0


def _frontier_table(trace: Any, args: argparse.Namespace, before: str) -> str:
    """``trace``'s frontier as a table (after ``before``). On Ctrl-C, print the table of
    the probes that finished and say the search was interrupted, then stop."""
    from .floors import floor
    from .frontier import Frontier, format_frontier, frontier

    probes: list = []
    try:
        return (
            before
            + frontier(
                trace,
                args.max_slowdown,
                args.heuristic,
                step=args.step,
                tolerance=args.tolerance,
                on_probe=probes.append,
                dealloc=args.dealloc,
                rebuild_orphans=args.rebuild_orphans,
            ).table()
        )
    except KeyboardInterrupt:
        so_far = Frontier(trace.name, args.heuristic, args.max_slowdown, floor(trace), probes)
        best = so_far.lowest
        verdict = f"interrupted (Ctrl-C) after {len(probes)} probes, before the search ended"
        if best is not None:
            verdict += f"; so far the lowest ratio within {args.max_slowdown:g}x: {best.ratio:.3f}"
        print(before + "\n".join([*format_frontier(so_far).splitlines()[:-1], verdict]))
        raise


def sqrt_n_main(argv: Sequence[str]) -> int:
    p = parser(
        "minidtr sim sqrt-n",
        "Theorem 3.1: an N-layer chain, forward and backward, unit cost and size, "
        "at a budget of ceil(2 sqrt N): extra ops / N per heuristic, next to Chen's sqrt(N) "
        "and revolve (exact counts) and the paper's h_DTR figures.",
    )
    p.add_argument(
        "--n",
        type=sizes(MOST_LAYERS),
        default=[100, 400, 1600],
        help=f"chain lengths, at most {MOST_LAYERS:,} (6,400 takes about 20 s)",
    )
    _add_heuristics(p, ["dtr", "dtr_eq", "dtr_local", "msps", "lru"])
    p.add_argument("--csv", metavar="FILE")
    args = _parse(p, argv)
    from .experiments import sqrt_n_rows

    return _print_rows(sqrt_n_rows(args.n, args.heuristics), args.csv)


def adversary_main(argv: Sequence[str]) -> int:
    p = parser(
        "minidtr sim adversary",
        "Theorem 3.2: B paths off one root, the adversary always extending a fully "
        "evicted path; DTR's ops against a static plan's (every op once), next to N/B.",
    )
    p.add_argument(
        "--budget", type=whole_number(3), default=8, help="B, in tensors (the root included)"
    )
    p.add_argument(
        "--paths", type=whole_number(1), default=None, help="number of paths (default B)"
    )
    p.add_argument(
        "--n",
        type=sizes(MOST_EXTENSIONS),
        default=[200, 400, 800, 1600],
        help=f"path extensions, at most {MOST_EXTENSIONS:,} (3,200 takes about a minute)",
    )
    _add_heuristics(p, ["dtr"])
    p.add_argument("--csv", metavar="FILE")
    args = _parse(p, argv)
    from .experiments import adversary_rows

    try:
        rows = adversary_rows(args.n, args.budget, args.paths, args.heuristics)
    except ValueError as e:
        print(f"minidtr sim adversary: {e}", file=sys.stderr)
        return 2
    return _print_rows(rows, args.csv)


def _add_jobs_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--jobs", type=whole_number(1), default=None, help="processes (default: all cores)"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
