"""``minidtr sim optimal`` and ``minidtr sim bound``: the commands that run a solver.

Both need SciPy (its HiGHS), an optional extra: without it each says so in one line
(exit 2) before reading a trace. Each row can take a solver's whole time limit, so on
Ctrl-C the rows finished are printed (and written to ``--csv``) before the command stops.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cli_args import positive_seconds, ratios, usage_error, whole_number
from .cli import (
    _add_heuristics,
    _add_jobs_option,
    _add_logs,
    _load,
    _log_paths,
    _parse,
    _print_rows,
    parser,
)
from .cluster_cli import add_cluster_options, cluster, cluster_settings


def optimal_main(argv: Sequence[str]) -> int:
    p = parser(
        "minidtr sim optimal",
        "Each heuristic's slowdown against the optimal schedule for the trace's "
        "op order (a mixed-integer program solved by SciPy's HiGHS).",
    )
    p.add_argument("logs", nargs="+", metavar="LOG")
    p.add_argument("--ratios", type=ratios, default=[0.9, 0.8, 0.7, 0.6, 0.5])
    _add_heuristics(p, ["dtr"])
    p.add_argument("--time-limit", type=positive_seconds, default=60.0, help="seconds per budget")
    p.add_argument(
        "--bound",
        action="store_true",
        help="also the linear relaxation's lower bound on every schedule (minidtr sim bound)",
    )
    _add_jobs_option(p)
    p.add_argument("--csv", metavar="FILE")
    add_cluster_options(p)
    args = _parse(p, argv)
    settings = cluster_settings(p, args)
    require_scipy(p.prog, "the optimal schedule")
    traces = _load(p.prog, args.logs)
    if traces is None:
        return 1
    from .sweep import optimal_rows

    def make_rows(on_row) -> list[dict]:
        with cluster(settings) as client:
            return optimal_rows(
                traces,
                args.ratios,
                args.heuristics,
                args.time_limit,
                jobs=args.jobs,
                client=client,
                progress=sys.stderr.isatty(),
                on_row=on_row,
                bound=args.bound,
            )

    columns = _optimal_columns(args.heuristics, args.bound)
    total = len(traces) * len(args.ratios)
    return _task_table(p.prog, make_rows, total, args.csv, columns, _optimal_notes)


def _optimal_columns(heuristics: Sequence[str], bound: bool = False) -> list[str]:
    return [
        "trace",
        "nodes",
        "ratio",
        *heuristics,
        "best",
        "lower",
        "gap",
        "status",
        "solve_time",
        *(["bound", "bound_time"] if bound else []),
        *[f"{h}/best" for h in heuristics],
    ]


def _optimal_notes(rows: list[dict]) -> str:
    """What a row's figures are where the solver did not prove the optimum."""
    notes = []
    if any(row["status"] == "incumbent" for row in rows):
        notes.append(
            "incumbent: the solver stopped at its time limit; best is the cheapest schedule "
            "found, an upper bound on the optimum, not the optimum (lower: a proven lower "
            "bound on it)"
        )
    if any("bound" in row for row in rows):
        notes.append(
            "bound: at most every schedule's slowdown, each heuristic's and the optimum's "
            "(the linear relaxation; - where it was not proven in time)"
        )
    return "\n".join(notes)


def bound_main(argv: Sequence[str]) -> int:
    p = parser(
        "minidtr sim bound",
        "A proven lower bound on the slowdown of every schedule of each trace at each "
        "budget ratio, every heuristic's and the optimal schedule's for the trace's op "
        "order: the linear relaxation of the rematerialization program, solved by "
        "SciPy's HiGHS (see docs/simulator.md).",
    )
    _add_logs(p)
    p.add_argument(
        "--ratios",
        type=ratios,
        default=[0.5, 0.3, 0.2],
        help="budget ratios of the unbounded peak (default 0.5,0.3,0.2)",
    )
    _add_heuristics(p, [], help="also replay these at the same budgets (default none)")
    p.add_argument(
        "--time-limit",
        type=positive_seconds,
        default=600.0,
        help="seconds per linear program (default 600)",
    )
    p.add_argument(
        "--block",
        type=whole_number(1),
        default=None,
        help="stages per block (default: 1, the exact relaxation, unless the graph is "
        "too large to solve in minutes)",
    )
    _add_jobs_option(p)
    p.add_argument("--csv", metavar="FILE")
    args = _parse(p, argv)
    require_scipy(p.prog, "the lower bound")
    traces = _load(p.prog, _log_paths(p, args))
    if traces is None:
        return 1
    from .bound import bound_rows

    def make_rows(on_row) -> list[dict]:
        return bound_rows(
            traces,
            args.ratios,
            args.heuristics,
            args.time_limit,
            args.block,
            jobs=args.jobs,
            progress=sys.stderr.isatty(),
            on_row=on_row,
        )

    columns = ["trace", "nodes", "ratio", "status", "bound", *args.heuristics, "block"]
    total = len(traces) * len(args.ratios)
    return _task_table(p.prog, make_rows, total, args.csv, [*columns, "solve_time"])


def require_scipy(prog: str, what: str) -> None:
    """Usage error (exit 2), before any work, unless SciPy's HiGHS can be imported."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        usage_error(prog, f"{what} needs SciPy (pip install 'minidtr[scipy]')")


def _task_table(prog: str, make_rows, total: int, csv_path, columns, notes=None) -> int:
    """Print the rows ``make_rows(on_row)`` returns as a table (and ``notes(rows)`` under
    it). Each row can take a solver's whole time limit, so on Ctrl-C the rows finished
    are printed (and written to ``csv_path``) before one line says so, exit 130."""
    finished: list[dict] = []
    try:
        rows = make_rows(finished.append)
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if finished:
            _print_rows(finished, csv_path, columns)
        print(f"\n{prog}: interrupted after {len(finished)} of {total} rows", file=sys.stderr)
        return 130
    _print_rows(rows, csv_path, columns)
    if notes is not None and notes(rows):
        print(notes(rows))
    return 0
