"""Figures from an event log (matplotlib, imported only here and only when asked)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .explain import human_bytes, resident_timeline
from .reading import printable

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

DPI = 120
KIB = 1024.0
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
    """Save a PNG of resident bytes over the logical clock (the runtime's, as the log and
    ``minidtr explain`` give it), with the budget line, step boundaries
    (``Runtime.mark_step``) and a mark at every budget eviction (red) and
    rematerialization (blue). ``cost`` names the cost model for the clock's unit
    (default: the log's header, if any)."""
    plt = require_matplotlib()
    fig = timeline_figure(events, budget, title, cost)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def timeline_figure(
    events: list[dict[str, Any]],
    budget: int | None = None,
    title: str = "",
    cost: str | None = None,
) -> Figure:
    """The figure ``memory_timeline`` saves (a matplotlib ``Figure``, laid out)."""
    plt = require_matplotlib()
    columns = resident_timeline(events)
    if not columns["clock"]:
        raise ValueError("the event log is empty: nothing to plot")
    if cost is None:
        cost = next((e.get("cost") for e in events if e["event"] == "runtime"), None)
    start = min([columns["clock"][0], *columns["step_clock"][:1]])
    fig, ax = plt.subplots(figsize=(9, 4), dpi=DPI)
    _draw_memory(ax, columns, budget)
    labels = _draw_steps(ax, columns)
    unit = CLOCK_UNITS.get(cost, "accumulated op cost")
    ax.set_xlabel(f"logical clock ({unit})")
    ax.set_ylabel("resident memory (KiB)")
    ax.set_xlim(left=start)
    ax.set_ylim(bottom=0)
    ax.ticklabel_format(axis="x", useOffset=False)  # the clocks as they are, no offset
    if title:
        # a file name is text: never mathtext, and a byte not UTF-8 shown as an escape
        ax.set_title(printable(title), parse_math=False)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    thin_labels(fig, labels)
    return fig


def _draw_memory(ax, columns: dict[str, list], budget: int | None) -> None:
    """Resident memory as a step line, the budget, and the eviction and remat marks."""
    ax.step(
        columns["clock"],
        [m / KIB for m in columns["memory"]],
        where="post",
        color="0.25",
        linewidth=1.0,
        label="resident memory",
    )
    if budget is not None:
        ax.axhline(
            budget / KIB,
            color="tab:orange",
            linestyle="--",
            linewidth=1.2,
            label=f"budget {human_bytes(budget)}",
        )
    for kind, marker, color, label in (
        ("evict", "v", "tab:red", "eviction"),
        ("remat", "^", "tab:blue", "rematerialization"),
    ):
        clocks = columns[f"{kind}_clock"]
        if clocks:
            ax.plot(
                clocks,
                [m / KIB for m in columns[f"{kind}_memory"]],
                marker,
                color=color,
                markersize=3,
                alpha=0.6,
                label=f"{label} ({len(clocks):,})",
            )


def _draw_steps(ax, columns: dict[str, list]) -> list[Annotation]:
    """A dotted line at each step boundary, and its label (``thin_labels`` hides those
    that would overprint another)."""
    labels = []
    for n, (step, at) in enumerate(zip(columns["step"], columns["step_clock"], strict=True)):
        ax.axvline(
            at,
            color="tab:purple",
            linestyle=":",
            linewidth=0.9,
            label="step boundary" if n == 0 else None,
        )
        labels.append(
            ax.annotate(
                f"step {step}",
                (at, 0.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, 3),
                textcoords="offset points",
                fontsize=7,
                color="tab:purple",
            )
        )
    return labels


def thin_labels(fig: Figure, labels: list[Annotation], gap: float = 4.0) -> None:
    """Hide every label that would touch the last one kept (left to right, ``gap`` pixels
    apart), stick out of its axes or hide under the legend, so the ones shown stay
    legible at any step count."""
    renderer = fig.canvas.get_renderer()
    axes = fig.axes[0]
    right = axes.get_window_extent(renderer).x1
    legend = axes.get_legend()
    legend_box = legend.get_window_extent(renderer) if legend is not None else None
    last = -float("inf")
    for label in sorted(labels, key=lambda text: text.xy[0]):
        box = label.get_window_extent(renderer)
        keep = box.x0 >= last + gap and box.x1 <= right
        keep = keep and (legend_box is None or not box.overlaps(legend_box))
        label.set_visible(keep)
        if keep:
            last = box.x1
