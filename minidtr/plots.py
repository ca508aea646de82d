"""Figures from an event log (matplotlib, imported only here and only when asked)."""

from __future__ import annotations

from typing import Any

from .explain import human_bytes, resident_timeline


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
    events: list[dict[str, Any]], path: str, budget: int | None = None, title: str = ""
) -> None:
    """Save a PNG of resident bytes over the logical clock, with the budget line and a
    mark at every budget eviction (red) and rematerialization (blue)."""
    plt = require_matplotlib()
    columns = resident_timeline(events)
    if not columns["clock"]:
        raise ValueError("the event log is empty: nothing to plot")
    scale = 1024.0
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.step(
        columns["clock"],
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
    if columns["evict_clock"]:
        ax.plot(
            columns["evict_clock"],
            [m / scale for m in columns["evict_memory"]],
            "v",
            color="tab:red",
            markersize=3,
            alpha=0.6,
            label=f"eviction ({len(columns['evict_clock']):,})",
        )
    if columns["remat_clock"]:
        ax.plot(
            columns["remat_clock"],
            [m / scale for m in columns["remat_memory"]],
            "^",
            color="tab:blue",
            markersize=3,
            alpha=0.6,
            label=f"rematerialization ({len(columns['remat_clock']):,})",
        )
    ax.set_xlabel("logical clock (accumulated op cost)")
    ax.set_ylabel("resident memory (KiB)")
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
