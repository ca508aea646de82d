"""Sweeps over budgets and heuristics (in parallel), their tables, CSV and the Figure 2 plot,
and DTR against the optimal schedule.

Each (trace, ratio, heuristic) replay is independent, so a sweep farms them out
(``minidtr.sim.parallel``: a local process pool by default, or a Dask cluster);
the traces (with their unbounded baseline already measured) travel to each
worker once.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from ..reading import printable
from ..runtime.options import RuntimeOptions
from . import parallel
from .instructions import slowdown_of
from .simulator import (
    ADDRESS_COLUMNS,
    SimResult,
    baseline,
    replay_options,
    simulate,
)
from .sweep_csv import (  # noqa: F401  (read_csv, write_csv, write_rows: the API here too)
    CSV_FIELDS,
    CsvLog,
    SweepCsvError,
    options_stamp,
    read_csv,
    write_csv,
    write_rows,
)
from .trace import Trace

DEFAULT_RATIOS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
DEFAULT_HEURISTICS = ("dtr", "dtr_eq", "dtr_local", "msps", "lru", "size", "random")


def _replay(
    trace: Trace, ratio: float, heuristic: str, options: RuntimeOptions, thrash: float | None
) -> SimResult:
    return simulate(trace, ratio=ratio, heuristic=heuristic, thrash=thrash, options=options)


def sweep(
    traces: Sequence[Trace],
    ratios: Sequence[float] = DEFAULT_RATIOS,
    heuristics: Sequence[str] = DEFAULT_HEURISTICS,
    jobs: int | None = None,
    *,
    client: Any = None,
    executor: Executor | None = None,
    csv_path: str | os.PathLike | None = None,
    resume: bool = False,
    progress: bool = False,
    on_result: Callable[[SimResult], None] | None = None,
    thrash: float | None = 2.0,
    options: RuntimeOptions | None = None,
    **settings: Any,
) -> list[SimResult]:
    """Replay every trace at every ratio with every heuristic; results come back in
    (trace, heuristic, ratio) order. ``thrash``, ``options`` and ``settings`` (dealloc,
    sample, ...) are ``simulate``'s.

    Where the replays run (``minidtr.sim.parallel``): ``jobs`` local processes (default:
    all cores; 1 runs here), or a Dask ``client``, or any ``executor``. With ``csv_path``
    each result is appended to that CSV as it arrives, so an interrupted sweep loses
    nothing finished; ``resume`` then reuses the rows already there (written with the
    same options) and replays only the missing points. ``progress`` shows a bar (tqdm
    when installed); ``on_result`` is called with each new result as it arrives.
    """
    traces = list(traces)
    names = _trace_numbers(traces)
    keys = [(i, h, ratio) for i in range(len(traces)) for h in heuristics for ratio in ratios]
    options = replay_options(options, **settings)
    stamp = options_stamp(options, thrash)
    addresses = options.fit == "contiguous"  # its measures are columns too
    header = [*CSV_FIELDS, *(ADDRESS_COLUMNS if addresses else ()), "options"]
    done: dict[tuple, SimResult] = {}
    if resume and csv_path is not None and os.path.exists(csv_path) and os.path.getsize(csv_path):
        for result in read_csv(csv_path, stamp, header=header):
            i = names.get(result.trace)
            if i is None:
                continue
            if result.compute != traces[i].total_compute:
                raise ValueError(
                    f"{os.fspath(csv_path)}: its results for {result.trace} are of another "
                    f"trace of that name (compute {result.compute:g}, this one's "
                    f"{traces[i].total_compute:g}); write to a new file"
                )
            done[(i, result.heuristic, result.ratio)] = result
    pending = [key for key in keys if key not in done]
    for i in sorted({key[0] for key in pending}):
        baseline(traces[i])  # measured once, here, and shipped with the trace
    tasks = [(i, (ratio, h, options, thrash)) for i, h, ratio in pending]
    log = CsvLog(csv_path, stamp, resume, header) if csv_path is not None else None
    bar = _progress(len(keys), len(done)) if progress else None
    try:
        for n, result in parallel.run(
            _replay, traces, tasks, jobs=jobs, client=client, executor=executor
        ):
            done[pending[n]] = result
            if log is not None:
                log.write(result)
            if bar is not None:
                bar.update(1)
            if on_result is not None:
                on_result(result)
    finally:
        if log is not None:
            log.close()
        if bar is not None:
            bar.close()
    return [done[key] for key in keys]


def _trace_numbers(traces: Sequence[Trace]) -> dict[str, int]:
    """Each trace's index by name: results (a CSV's rows, a table's blocks) name their
    trace, so two traces of one name would be told apart by nothing."""
    numbers: dict[str, int] = {}
    for i, trace in enumerate(traces):
        if trace.name in numbers:
            raise ValueError(
                f"sweep: two traces are named {trace.name!r}, and results name their trace: "
                "give one another name (load_log(path, name=...))"
            )
        numbers[trace.name] = i
    return numbers


def _progress(total: int, initial: int):
    try:
        from tqdm import tqdm
    except ImportError:  # the plain counter below
        return _Counter(total, initial)
    return tqdm(total=total, initial=initial, unit="replay", file=sys.stderr, leave=False)


class _Counter:
    """A one-line progress counter on stderr, for when tqdm is not installed."""

    def __init__(self, total: int, initial: int):
        self.total, self.count = total, initial

    def update(self, n: int) -> None:
        self.count += n
        print(f"\r{self.count}/{self.total} replays", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        print(file=sys.stderr)


def cell(result: SimResult) -> str:
    if result.status == "ok":
        return f"{result.slowdown:.2f}"
    return "OOM" if result.status == "oom" else "thrash"


def table(results: Sequence[SimResult]) -> str:
    """One block per trace: a row per heuristic, a column per budget ratio."""
    blocks = []
    for name in dict.fromkeys(r.trace for r in results):
        rows = [r for r in results if r.trace == name]
        ratios = list(dict.fromkeys(r.ratio for r in rows))
        heuristics = list(dict.fromkeys(r.heuristic for r in rows))
        width = max(len(h) for h in heuristics) + 2
        head = f"{name:<{width}}" + "".join(f"{ratio:>8g}" for ratio in ratios)
        lines = [head, "-" * len(head)]
        by_key = {(r.heuristic, r.ratio): r for r in rows}
        for h in heuristics:
            lines.append(
                f"{h:<{width}}" + "".join(f"{cell(by_key[(h, ratio)]):>8}" for ratio in ratios)
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def address_table(results: Sequence[SimResult]) -> str:
    """Under fit="contiguous": per replay, its evictions, those the contiguous rule added
    (``extra_evictions``), the requests no block held at first, the mean fragmentation at
    them and the peak address as a share of the budget."""
    rows = []
    for r in results:
        peak = r.extra.get("peak_address")
        rows.append(
            {
                "trace": r.trace,
                "heuristic": r.heuristic,
                "ratio": r.ratio,
                "slowdown": cell(r),
                "evictions": r.evictions,
                "extra": r.extra.get("extra_evictions"),
                "failures": r.extra.get("placement_failures"),
                "fragmentation": r.extra.get("fragmentation"),
                "peak_address/budget": peak / r.budget if peak is not None and r.budget else None,
            }
        )
    return format_rows(rows)


def plot(
    results: Sequence[SimResult],
    traces: Sequence[Trace],
    path: str | os.PathLike,
    thrash: float = 2.0,
) -> None:
    """Slowdown against budget ratio, one panel per trace and a line per heuristic (the
    paper's Figure 2). Shaded: below the constant-memory floor (dark) and below the
    single-op bottleneck (light), where no policy can run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - matplotlib is an optional extra
        raise ImportError("plots need matplotlib (pip install 'minidtr[plots]')") from e
    if not results:
        raise ValueError("plot: no results to draw")
    by_name = {t.name: t for t in traces}
    names = list(dict.fromkeys(r.trace for r in results))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        unbounded = baseline(by_name[name])
        constant = unbounded.constant_floor / unbounded.peak_memory
        bottleneck = unbounded.bottleneck / unbounded.peak_memory
        ax.axvspan(0, constant, color="0.55", alpha=0.5, lw=0, label="constants")
        ax.axvspan(constant, bottleneck, color="0.8", alpha=0.5, lw=0, label="one op's needs")
        rows = [r for r in results if r.trace == name]
        for h in dict.fromkeys(r.heuristic for r in rows):
            # a failed budget (OOM, thrash) is a gap: the line does not bridge it
            points = sorted(
                (r.ratio, r.slowdown if r.status == "ok" else math.nan)
                for r in rows
                if r.heuristic == h
            )
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", ms=3, label=h)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(1.0, thrash if math.isfinite(thrash) else None)
        ax.invert_xaxis()
        ax.set_title(printable(name), parse_math=False)  # a file's name: never mathtext
        ax.set_xlabel("budget / unbounded peak")
        ax.set_ylabel("slowdown")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- DTR against the optimal schedule -----------------------------------------------------


def compare_with_optimal(
    trace: Trace,
    ratios: Sequence[float],
    heuristics: Sequence[str] = ("dtr",),
    time_limit: float = 60.0,
    jobs: int | None = 1,
    *,
    client: Any = None,
    executor: Executor | None = None,
    bound: bool = False,
) -> list[dict]:
    """At each budget ratio: each heuristic's slowdown, the optimal schedule's (the best
    found, an upper bound on the optimum unless ``status`` is ``optimal``; the solver's
    proven lower bound on it, ``lower``, and gap; the solver time) and their ratio.
    Slowdowns are (the trace's compute + recomputation) / the trace's compute for all.
    With ``bound``, also the linear relaxation's bound (``minidtr.sim.bound``), below
    every heuristic's slowdown and the optimum's alike, and its time. Each ratio is one
    task for ``minidtr.sim.parallel`` (``jobs``, ``client``, ``executor`` as in
    ``sweep``); rows come back in ratio order."""
    return optimal_rows(
        [trace], ratios, heuristics, time_limit, jobs, client, executor, bound=bound
    )


def optimal_rows(
    traces: Sequence[Trace],
    ratios: Sequence[float],
    heuristics: Sequence[str] = ("dtr",),
    time_limit: float = 60.0,
    jobs: int | None = None,
    client: Any = None,
    executor: Executor | None = None,
    progress: bool = False,
    on_row: Callable[[dict], None] | None = None,
    bound: bool = False,
) -> list[dict]:
    """``compare_with_optimal`` for several traces at once, every (trace, ratio) a task;
    ``on_row`` is called with each row as it finishes (a row can take the solver's whole
    time limit: an interrupted run keeps those done)."""
    options = (tuple(heuristics), time_limit, bound)
    tasks = [(i, (ratio, *options)) for i in range(len(traces)) for ratio in ratios]
    return task_rows(_optimal_row, traces, tasks, jobs, client, executor, progress, on_row)


def task_rows(
    fn: Callable[..., dict],
    traces: Sequence[Trace],
    tasks: Sequence[parallel.Task],
    jobs: int | None = None,
    client: Any = None,
    executor: Executor | None = None,
    progress: bool = False,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """The rows ``fn`` makes of each task through ``minidtr.sim.parallel``, in task
    order; ``on_row`` sees each as it finishes. Locally, in worker processes even for
    one job (``isolate``): a solve runs in C, which only stopping its process interrupts."""
    traces = list(traces)
    for trace in traces:
        baseline(trace)  # measured once here, shipped with the trace
    rows: list[dict | None] = [None] * len(tasks)
    bar = _progress(len(tasks), 0) if progress else None
    try:
        rows_made = parallel.run(
            fn, traces, tasks, jobs=jobs, client=client, executor=executor, isolate=True
        )
        for n, row in rows_made:
            rows[n] = row
            if on_row is not None:
                on_row(row)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return rows


def _optimal_row(
    trace: Trace, ratio: float, heuristics: Sequence[str], time_limit: float, bound: bool = False
) -> dict:
    from .checkmate import solve_optimal
    from .graph import graph_from_trace

    graph = graph_from_trace(trace)
    total = trace.total_compute
    budget = int(ratio * baseline(trace).peak_memory)
    opt = solve_optimal(graph, budget, time_limit=time_limit)
    upper = slowdown_of(opt.cost - graph.compute, total) if opt.found else math.nan
    lower = slowdown_of(opt.bound - graph.compute, total) if math.isfinite(opt.bound) else math.nan
    row = {
        "trace": trace.name,
        "nodes": len(graph),
        "ratio": ratio,
        "budget": budget,
        "status": opt.status,  # optimal, or incumbent: the best found in the time limit
        "best": upper,  # an upper bound on the optimum, the optimum when status is optimal
        "lower": lower,  # the solver's proven lower bound on the optimum
        "gap": opt.gap,
        "solve_time": opt.solve_time,
        "found_by": opt.source,
    }
    if bound:
        row.update(_bound_cells(trace, budget, time_limit))
    for h in heuristics:
        result = simulate(trace, budget=budget, heuristic=h, thrash=None)
        row[h] = result.slowdown if result.status == "ok" else math.nan
        row[f"{h}/best"] = row[h] / upper if opt.found else math.nan
    return row


def _bound_cells(trace: Trace, budget: int, time_limit: float) -> dict:
    """The linear relaxation's lower bound on every schedule's slowdown (NaN unless its
    status is ``ok``: ``infeasible``, or none proven in ``time_limit``) and its time."""
    from .bound import lower_bound

    found = lower_bound(trace, budget=budget, time_limit=time_limit)
    return {"bound": found.slowdown, "bound_status": found.status, "bound_time": found.solve_time}


def format_rows(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """A plain text table of dicts (floats to 3 decimals)."""
    if not rows:
        return "(nothing)"
    columns = list(columns or rows[0])

    def show(value) -> str:
        if isinstance(value, float):
            return "-" if math.isnan(value) else f"{value:.3f}"
        return "-" if value is None else str(value)

    cells = [[show(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
