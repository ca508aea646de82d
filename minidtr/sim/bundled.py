"""The traces that ship with minidtr: one training step of each bundled model.

They live in ``minidtr/sim/traces/`` (package data; ``traces/`` at the top of a
clone links there), gzip-compressed, and were recorded with
``minidtr train MODEL --steps 1 --trace minidtr/sim/traces/MODEL.log.gz``
(``cost="flops"``, so their TIME is the deterministic cost estimate).
``minidtr sim --bundled`` replays them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

TRACES_DIR = Path(__file__).resolve().parent / "traces"


def bundled_traces(names: Iterable[str] | None = None) -> list[Path]:
    """Paths of the shipped traces (all, sorted by name, or the ``names`` given:
    ``bundled_traces(["resnet", "unet"])``)."""
    available = {p.name.removesuffix(".log.gz"): p for p in TRACES_DIR.glob("*.log.gz")}
    if not available:
        raise FileNotFoundError(f"no bundled traces in {TRACES_DIR} (a broken installation?)")
    if names is None:
        return [available[n] for n in sorted(available)]
    paths = []
    for name in names:
        if name not in available:
            raise ValueError(f"no bundled trace {name!r}; expected one of {sorted(available)}")
        paths.append(available[name])
    return paths
