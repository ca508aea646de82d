"""Figures from an event log (matplotlib, imported only here and only when asked)."""

from __future__ import annotations

from typing import Any

from .explain import human_bytes, resident_timeline

CLOCK_UNITS = {
    "flops": "estimated ns: flops/32 + bytes/8 per op, cost=flops",
    "time": "measured ns, cost=time",
}


def require_matplotlib():
    """pyplot on the non-interactive Agg backend, or an ImportError that says what to install."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "plotting needs matplotlib, which is not installed: pip install 'minidtr[plots]' "
            "(or pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def memory_timeline(
    events: list[dict[str, Any]],
    path: str,
    budget: int | None = None,
    title: str = "",
    cost: str | None = None,
) -> None:
    """Save a PNG of resident bytes over the logical clock (from the log's first event),
    with the budget line, step boundaries (``Runtime.mark_step``) and a mark at every budget
    eviction (red) and rematerialization (blue). ``cost`` names the cost model for the
    clock's unit (default: the log's header, if any)."""
    plt = require_matplotlib()
    columns = resident_timeline(events)
    if not columns["clock"]:
        raise ValueError("the event log is empty: nothing to plot")
    if cost is None:
        cost = next((e.get("cost") for e in events if e["event"] == "runtime"), None)
    start = min([columns["clock"][0], *columns["step_clock"][:1]])
    scale = 1024.0

    def since_start(clocks: list[float]) -> list[float]:
        return [c - start for c in clocks]

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.step(
        since_start(columns["clock"]),
        [m / scale for m in columns["memory"]],
        where="post",
        color="0.25",
        linewidth=1.0,
        label="resident memory",
    )
    if budget is not None:
        ax.axhline(
            budget / scale,
            color="tab:orange",
            linestyle="--",
            linewidth=1.2,
            label=f"budget {human_bytes(budget)}",
        )
    step_starts = since_start(columns["step_clock"])
    for n, (step, at) in enumerate(zip(columns["step"], step_starts, strict=True)):
        ax.axvline(
            at,
            color="tab:purple",
            linestyle=":",
            linewidth=0.9,
            label="step boundary" if n == 0 else None,
        )
        ax.annotate(
            f"step {step}",
            (at, 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, 3),
            textcoords="offset points",
            fontsize=7,
            color="tab:purple",
        )
    if columns["evict_clock"]:
        ax.plot(
            since_start(columns["evict_clock"]),
            [m / scale for m in columns["evict_memory"]],
            "v",
            color="tab:red",
            markersize=3,
            alpha=0.6,
            label=f"eviction ({len(columns['evict_clock']):,})",
        )
    if columns["remat_clock"]:
        ax.plot(
            since_start(columns["remat_clock"]),
            [m / scale for m in columns["remat_memory"]],
            "^",
            color="tab:blue",
            markersize=3,
            alpha=0.6,
            label=f"rematerialization ({len(columns['remat_clock']):,})",
        )
    unit = CLOCK_UNITS.get(cost, "accumulated op cost")
    ax.set_xlabel(f"logical clock since the start of the run ({unit})")
    ax.set_ylabel("resident memory (KiB)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
