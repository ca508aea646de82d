"""The classic animation of checkpointing, drawn from real event logs (``minidtr animate``).

Each storage of a log is a node, placed in the order the run made it: the forward
pass on the top rows, left to right, and, when the log has a backward pass (ops
named ``*_grad``), the backward pass below it, right to left as it runs (in a
chain, each gradient under the activation it goes back through). Frame by frame, one
event a frame, each node is coloured by what it is at that moment:

    not yet made    resident      evicted (may be recomputed)    being recomputed
    freed for good (dead: evicted, freed or banished)            a constant

and a bar under the nodes shows resident memory against the budget. Several logs
(``minidtr animate A.jsonl B.jsonl C.jsonl out.gif``) are drawn side by side, each
advancing one of its own events a frame; one that ends first holds its last frame.

The logs are untrusted input: they are read with ``minidtr.event_log.load_events``,
which checks every field; the GIF is written with matplotlib's Pillow writer.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .event_log import STORAGE_KINDS, load_events
from .reading import printable

WAITING, RESIDENT, EVICTED, RECOMPUTING, FREED, CONSTANT = range(6)
LABELS = ("not yet made", "resident", "evicted", "being recomputed", "freed", "constant")
FACES = ("#ffffff", "#4c72b0", "#f4c2c2", "#55a868", "#e6e6e6", "#555555")
EDGES = ("#d0d0d0", "#2a4a80", "#c44e52", "#1d6b33", "#bbbbbb", "#333333")
DEAD_REASONS = ("dead",)  # evictions of storages the program no longer references
MAX_FRAMES = 5000  # a GIF of more frames is not a picture anyone watches
DEFAULT_LIMIT = 400
DPI = 72


class AnimationError(ValueError):
    """The logs cannot be animated as asked; the message says why in one line."""


@dataclass
class Panel:
    """One log as drawn: its title, the events shown, its nodes' places, its budget."""

    title: str
    events: list[dict[str, Any]]
    places: dict[int, tuple[float, float]]
    budget: int | None
    peak: int

    @property
    def ids(self) -> list[int]:
        return list(self.places)


def shown_events(events: list[dict[str, Any]], start: int = 0, limit: int | None = None) -> list:
    """The storage events of a log (no header, no step marks), from ``start``, at most
    ``limit``: one frame each."""
    storage = [e for e in events if e["event"] in STORAGE_KINDS]
    end = None if limit is None else start + limit
    return storage[start:end]


def is_backward(op: str) -> bool:
    return op.endswith("_grad") or op.endswith("_backward")


def places(events: list[dict[str, Any]], columns: int | None = None) -> dict[int, tuple]:
    """Each storage's (x, y): in the order first made, the forward pass's on the top rows,
    left to right, and the backward pass's (from the first ``*_grad`` op on) below them,
    right to left as it runs; ``columns`` to a row (default: a row per pass up to 24
    nodes, wider passes wrapped)."""
    order: dict[int, bool] = {}
    backward = False
    for e in events:
        if e["event"] == "alloc" and e["id"] not in order:
            backward = backward or is_backward(e["op"])
            order[e["id"]] = backward
    passes = [[i for i, b in order.items() if b is side] for side in (False, True)]
    passes = [p for p in passes if p]
    width = columns or min(max((len(p) for p in passes), default=1), 24)
    out: dict[int, tuple[float, float]] = {}
    row = 0.0
    for side, ids in enumerate(passes):
        for n, storage_id in enumerate(ids):
            column = n % width
            if side == 1:  # backward runs right to left, under what it differentiates
                column = width - 1 - column
            out[storage_id] = (column, -(row + n // width))
        row += math.ceil(len(ids) / width) + 0.6
    return out


def states(panel: Panel) -> Iterator[tuple[list[int], dict[str, Any]]]:
    """After each event of the panel: every node's state (in ``panel.ids`` order) and the
    event. A remat shows its node as being recomputed for that frame only."""
    index = {storage_id: n for n, storage_id in enumerate(panel.ids)}
    now = [WAITING] * len(index)
    constants: set[int] = set()
    for event in panel.events:
        n = index.get(event["id"])
        if n is not None:
            now[n] = _after(event, constants)
        yield list(now), event
        if n is not None and now[n] == RECOMPUTING:
            now[n] = RESIDENT


def _after(event: dict[str, Any], constants: set[int]) -> int:
    kind = event["event"]
    if kind == "alloc":
        if event["op"] == "constant" or "cost" not in event:
            constants.add(event["id"])
            return CONSTANT
        return RESIDENT
    if kind == "remat":
        return RECOMPUTING
    if kind == "evict":
        return FREED if event.get("reason") in DEAD_REASONS else EVICTED
    return FREED  # free, banish


def load_panels(
    paths: Sequence[str],
    titles: Sequence[str] | None = None,
    start: int = 0,
    limit: int | None = DEFAULT_LIMIT,
    columns: int | None = None,
) -> list[Panel]:
    """The logs at ``paths`` as panels (``load_events`` checks each; an empty selection
    of events is refused)."""
    panels = []
    for n, path in enumerate(paths):
        events = load_events(str(path))
        shown = shown_events(events, start, limit)
        if not shown:
            raise AnimationError(f"{printable(str(path))}: no event to show from event {start} on")
        nodes = places(shown, columns)
        if not nodes:
            raise AnimationError(
                f"{printable(str(path))}: no allocation to draw among its {len(shown):,} events "
                f"from event {start} on"
            )
        header = next((e for e in events if e["event"] == "runtime"), {})
        peak = max(e["memory"] for e in shown)
        title = titles[n] if titles else str(path)
        panels.append(Panel(title, shown, nodes, header.get("budget"), peak))
    return panels


def frame_count(panels: Sequence[Panel]) -> int:
    """One frame per event of the longest panel."""
    return max(len(p.events) for p in panels)


def animate(
    paths: Sequence[str],
    out: str,
    titles: Sequence[str] | None = None,
    fps: float = 4.0,
    start: int = 0,
    limit: int | None = DEFAULT_LIMIT,
    columns: int | None = None,
) -> int:
    """Draw the logs at ``paths`` side by side into the GIF ``out``; returns its frames."""
    if not str(out).lower().endswith(".gif"):
        raise AnimationError(f"{out}: the animation is a GIF; give a name ending in .gif")
    if titles is not None and len(titles) != len(paths):
        raise AnimationError(f"{len(titles)} titles for {len(paths)} logs")
    panels = load_panels(paths, titles, start, limit, columns)
    frames = frame_count(panels)
    if frames > MAX_FRAMES:
        raise AnimationError(f"{frames} frames is too many (at most {MAX_FRAMES}): lower --limit")
    write_gif(panels, out, fps)
    return frames


def write_gif(panels: Sequence[Panel], out: str, fps: float) -> None:
    """Write the animation to ``out`` whole or not at all: the frames go to a temporary
    file beside it, which replaces ``out`` once complete (matplotlib's writer saves the
    frames drawn so far when interrupted, which replaced a complete GIF with a few)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation, PillowWriter

    figure, drawers = _figure(panels, plt)
    frames = frame_count(panels)
    sequences = [list(states(p)) for p in panels]

    def draw(f: int) -> list:
        artists = []
        for drawer, sequence in zip(drawers, sequences, strict=True):
            now, event = sequence[min(f, len(sequence) - 1)]
            artists += drawer(now, event, f, len(sequence))
        return artists

    animation = FuncAnimation(figure, draw, frames=frames, blit=False)
    folder, name = os.path.split(out)
    partial = os.path.join(folder, f".{name}.{os.getpid()}.partial.gif")  # (the umask's mode)
    try:
        animation.save(partial, writer=PillowWriter(fps=fps), dpi=DPI)
        os.replace(partial, out)
    finally:
        plt.close(figure)
        if os.path.exists(partial):
            os.remove(partial)


def _figure(panels: Sequence[Panel], plt: Any) -> tuple[Any, list]:
    rows = max(1.0 - min(y for _, y in p.places.values()) for p in panels)
    width = max(max(x for x, _ in p.places.values()) + 1 for p in panels)
    size = (max(3.2, 0.28 * width + 0.6) * len(panels), 1.9 + 0.3 * rows)
    figure, axes = plt.subplots(1, len(panels), figsize=size, squeeze=False)
    scale = max(p.budget or p.peak for p in panels) or 1  # a log of empty tensors draws
    drawers = [_panel(ax, p, scale, width, rows) for ax, p in zip(axes[0], panels, strict=True)]
    handles = [
        plt.Line2D([], [], ls="", marker="o", mfc=FACES[s], mec=EDGES[s], label=LABELS[s])
        for s in (RESIDENT, EVICTED, RECOMPUTING, FREED, CONSTANT)
    ]
    figure.legend(handles=handles, loc="lower center", ncol=5, fontsize=7, frameon=False)
    figure.subplots_adjust(left=0.02, right=0.98, top=0.82, bottom=0.16, wspace=0.08)
    return figure, drawers


def _panel(ax: Any, panel: Panel, scale: int, width: int, rows: float) -> Any:
    xs = [panel.places[i][0] for i in panel.ids]
    ys = [panel.places[i][1] for i in panel.ids]
    nodes = ax.scatter(xs, ys, s=90, linewidths=1.2)
    ax.set_xlim(-0.8, width - 0.2)
    ax.set_ylim(-rows - 0.9, 0.8)
    ax.axis("off")
    # names from a log and file names are text: never mathtext ($x^2$), never obeyed (ESC)
    ax.set_title(printable(panel.title), fontsize=9, parse_math=False)
    bar_y = -rows - 0.5
    ax.plot([-0.5, width - 0.5], [bar_y, bar_y], color="#eeeeee", lw=6, solid_capstyle="butt")
    (bar,) = ax.plot([], [], color="#4c72b0", lw=6, solid_capstyle="butt")
    if panel.budget is not None:
        limit = -0.5 + width * panel.budget / scale
        ax.plot([limit, limit], [bar_y - 0.25, bar_y + 0.25], color="#c44e52", lw=1.5)
    caption = ax.text(-0.5, 0.55, "", fontsize=7, color="#333333", parse_math=False, usetex=False)

    def draw(now: list[int], event: dict[str, Any], frame: int, total: int) -> list:
        nodes.set_facecolors([FACES[s] for s in now])
        nodes.set_edgecolors([EDGES[s] for s in now])
        bar.set_data([-0.5, -0.5 + width * event["memory"] / scale], [bar_y, bar_y])
        step = min(frame, total - 1) + 1
        what = event["event"] + (f" ({event['reason']})" if "reason" in event else "")
        caption.set_text(
            f"event {step}/{total}: {what} #{event['id']} {printable(event['op'])}, "
            f"memory {event['memory']:,} B"
        )
        return [nodes, bar, caption]

    return draw
