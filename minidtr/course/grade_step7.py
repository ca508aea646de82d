"""Step 7's grader: the student's sweep against the simulator's replays.

``slowdowns`` must give, for every ratio, the slowdown ``minidtr.sim.simulate``
gives (None where the replay does not finish within 2x); ``lowest_ratio`` the
reference's reading of a curve, on curves hypothesis draws; ``figure2`` the table
of both on two bundled traces and a PNG that reads back.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from .grading import Check, CheckFailed, needs, property_check

LIMIT = 2.0
TRACES = ("resnet", "lstm")
HEURISTICS = ("dtr", "dtr_eq", "lru", "size")
RATIOS = (0.9, 0.7, 0.5, 0.4, 0.3, 0.2)


def bundled(name: str) -> Any:
    from .. import sim

    return sim.load_log(sim.bundled_traces([name])[0])


def reference_curve(trace: Any, heuristic: str, ratios: Any) -> dict[float, float | None]:
    from .. import sim

    out: dict[float, float | None] = {}
    for ratio in ratios:
        result = sim.simulate(trace, ratio=ratio, heuristic=heuristic, thrash=LIMIT)
        out[ratio] = result.slowdown if result.status == "ok" else None
    return out


def reference_lowest(curve: dict[float, float | None], limit: float) -> float | None:
    lowest = None
    for ratio in sorted(curve, reverse=True):
        if curve[ratio] is None or curve[ratio] > limit:
            break
        lowest = ratio
    return lowest


def _same_curve(yours: Any, theirs: dict[float, float | None]) -> bool:
    if not isinstance(yours, dict) or set(yours) != set(theirs):
        return False
    for ratio, want in theirs.items():
        got = yours[ratio]
        if (got is None) != (want is None):
            return False
        if want is not None and not (isinstance(got, int | float) and math.isclose(got, want)):
            return False
    return True


def curves(module: ModuleType, case: tuple[str, str, tuple[float, ...]]) -> str | None:
    (slowdowns,) = needs(module, "slowdowns")
    name, heuristic, ratios = case
    trace = bundled(name)
    theirs = reference_curve(trace, heuristic, ratios)
    yours = slowdowns(trace, heuristic, ratios)
    if _same_curve(yours, theirs):
        return None
    return (
        f"slowdowns(the {name} trace, {heuristic!r}, {list(ratios)}) returned {yours!r}; "
        f"the simulator gives {theirs!r} (None: out of memory, or stopped past {LIMIT}x)"
    )


def readings(module: ModuleType, case: tuple[dict[float, float | None], float]) -> str | None:
    (lowest_ratio,) = needs(module, "lowest_ratio")
    curve, limit = case
    yours, theirs = lowest_ratio(curve, limit), reference_lowest(curve, limit)
    if yours == theirs:
        return None
    return (
        f"lowest_ratio({curve!r}, max_slowdown={limit}) returned {yours!r}; expected {theirs!r} "
        "(the lowest ratio from which this one and every higher ratio stay within the limit)"
    )


def the_figure(module: ModuleType, examples: int) -> None:
    (figure2,) = needs(module, "figure2")
    traces = {name: bundled(name) for name in TRACES}
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "figure2.png")
        table = figure2(traces, list(HEURISTICS), list(RATIOS), path)
        for name, trace in traces.items():
            for heuristic in HEURISTICS:
                theirs = reference_curve(trace, heuristic, RATIOS)
                got = table.get(name, {}).get(heuristic) if isinstance(table, dict) else None
                if not _same_curve(got, theirs):
                    raise CheckFailed(
                        f"figure2(...)[{name!r}][{heuristic!r}] is {got!r}; the simulator "
                        f"gives {theirs!r}"
                    )
        _reads_back(path)


def _reads_back(path: str) -> None:
    if not Path(path).is_file():
        raise CheckFailed(f"figure2(..., path) wrote no file at {path}")
    import matplotlib.pyplot as plt

    try:
        image = plt.imread(path)
    except Exception as error:  # noqa: BLE001 (a file that does not read back fails)
        raise CheckFailed(f"the figure does not read back as a PNG: {error}") from None
    if image.ndim != 3 or image.shape[0] < 50 or image.shape[1] < 50:
        raise CheckFailed(f"the figure is {image.shape}: not a picture of the curves")


def _curves_check(module: ModuleType, examples: int) -> None:
    from hypothesis import strategies as st

    cases = st.tuples(
        st.sampled_from(TRACES + ("densenet", "transformer")),
        st.sampled_from(HEURISTICS + ("msps", "dtr_local")),
        st.lists(st.sampled_from(RATIOS + (0.6, 0.25)), min_size=1, max_size=3, unique=True).map(
            tuple
        ),
    )
    fixed = [("resnet", "lru", (0.5,)), ("resnet", "dtr", (0.9, 0.2))]
    property_check(lambda c: curves(module, c), cases, max(1, examples // 6), fixed)


def _readings_check(module: ModuleType, examples: int) -> None:
    from hypothesis import strategies as st

    slowdown = st.one_of(st.none(), st.floats(1.0, 3.0))
    curve = st.dictionaries(st.sampled_from((0.9, 0.8, 0.6, 0.5, 0.4, 0.2)), slowdown, max_size=6)
    fixed = [({0.9: 1.0, 0.5: 1.5, 0.3: None}, 2.0), ({0.9: 2.5, 0.5: 1.2}, 2.0), ({}, 2.0)]
    property_check(
        lambda c: readings(module, c),
        st.tuples(curve, st.sampled_from((1.5, 2.0))),
        examples,
        fixed,
    )


CHECKS = [
    Check(
        "slowdowns", "each ratio's slowdown is the simulator's, None where it fails", _curves_check
    ),
    Check(
        "lowest_ratio",
        "the lowest ratio from which a curve stays within the limit",
        _readings_check,
    ),
    Check(
        "figure2",
        "the table for two traces and four heuristics, and a PNG that reads back",
        the_figure,
    ),
]
