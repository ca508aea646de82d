"""Sweeps over budgets and heuristics (in parallel), their tables, CSV and the Figure 2 plot,
and DTR against the optimal schedule.

Each (trace, ratio, heuristic) replay is independent, so a sweep farms them out
to a process pool; the traces (with their unbounded baseline already measured)
are sent to each worker once.
"""

from __future__ import annotations

import csv
import math
import multiprocessing
import os
from collections.abc import Sequence

from .simulator import SimResult, simulate
from .trace import Trace

DEFAULT_RATIOS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
DEFAULT_HEURISTICS = ("dtr", "dtr_eq", "dtr_local", "msps", "lru", "size", "random")

_TRACES: list[Trace] = []


def _init(traces: list[Trace]) -> None:
    global _TRACES
    _TRACES = traces


def _run(task: tuple) -> SimResult:
    index, ratio, heuristic, options = task
    return simulate(_TRACES[index], ratio=ratio, heuristic=heuristic, **options)


def sweep(
    traces: Sequence[Trace],
    ratios: Sequence[float] = DEFAULT_RATIOS,
    heuristics: Sequence[str] = DEFAULT_HEURISTICS,
    jobs: int | None = None,
    **options,
) -> list[SimResult]:
    """Replay every trace at every ratio with every heuristic; ``jobs`` processes (default:
    all cores; 1 runs here). ``options`` go to ``simulate`` (dealloc, thrash, ...).
    Results come back in (trace, heuristic, ratio) order."""
    traces = list(traces)
    for trace in traces:
        trace.baseline()  # measured once, here, and shipped with the trace
    tasks = [
        (i, ratio, h, options) for i in range(len(traces)) for h in heuristics for ratio in ratios
    ]
    jobs = min(jobs or os.cpu_count() or 1, len(tasks))
    if jobs <= 1:
        _init(traces)
        return [_run(task) for task in tasks]
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with context.Pool(jobs, initializer=_init, initargs=(traces,)) as pool:
        return pool.map(_run, tasks, chunksize=1)


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


def write_csv(results: Sequence[SimResult], path: str | os.PathLike) -> None:
    rows = [r.row() for r in results]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


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
    by_name = {t.name: t for t in traces}
    names = list(dict.fromkeys(r.trace for r in results))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        baseline = by_name[name].baseline()
        constant = baseline.constant_floor / baseline.peak_memory
        bottleneck = baseline.bottleneck / baseline.peak_memory
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
        ax.set_title(name)
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
) -> list[dict]:
    """At each budget ratio: each heuristic's slowdown, the optimal schedule's (the best
    found, its proven lower bound and gap, the solver time) and their ratio. Slowdowns
    are (the trace's compute + recomputation) / the trace's compute for both."""
    from .checkmate import solve_optimal
    from .graph import graph_from_trace

    graph = graph_from_trace(trace)
    total = trace.total_compute
    peak = trace.baseline().peak_memory
    rows = []
    for ratio in ratios:
        budget = int(ratio * peak)
        opt = solve_optimal(graph, budget, time_limit=time_limit)
        upper = 1 + (opt.cost - graph.compute) / total if opt.found else math.nan
        lower = 1 + (opt.bound - graph.compute) / total if math.isfinite(opt.bound) else math.nan
        row = {
            "trace": trace.name,
            "nodes": len(graph),
            "ratio": ratio,
            "budget": budget,
            "opt_status": opt.status,
            "opt_slowdown": upper,
            "opt_lower": lower,
            "gap": opt.gap,
            "solve_time": opt.solve_time,
            "opt_source": opt.source,
        }
        for h in heuristics:
            result = simulate(trace, budget=budget, heuristic=h, thrash=None)
            row[h] = result.slowdown if result.status == "ok" else math.nan
            row[f"{h}/opt"] = row[h] / upper if opt.found else math.nan
        rows.append(row)
    return rows


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
