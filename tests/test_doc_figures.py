"""The measured figures of the docs are what the scripts that measure them print now.

docs/refresh_figures.py rewrites every block of a page marked ``<!-- figures:NAME -->``
from the command that measures it; these tests measure each again and compare, leaving
out only what varies from run to run (wall times, a time-limited solver's incumbents,
losses and accuracies that depend on the processor's kernels). A failure means that a
change moved a figure: run ``python docs/refresh_figures.py NAME``, then reread the prose
around the block. The slow figures (minutes each) run under ``-m slow``, with those in
``SLOW_HERE``.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from doc_commands import ROOT, pages

spec = importlib.util.spec_from_file_location(
    "refresh_figures", ROOT / "docs" / "refresh_figures.py"
)
refresh = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = refresh  # its dataclasses look their module up
spec.loader.exec_module(refresh)


# Quick to refresh but long for the default run; what they show is checked there otherwise.
SLOW_HERE = {
    "models-readme": "11 s: seven scripts (tests/test_model_scripts.py trains each one)",
}


def _params():
    return [
        pytest.param(
            f.name, id=f.name, marks=[pytest.mark.slow] if f.slow or f.name in SLOW_HERE else []
        )
        for f in refresh.FIGURES
    ]


@pytest.mark.parametrize("name", _params())
def test_the_docs_show_the_figure_as_measured_now(name):
    figure = refresh.BY_NAME[name]
    if name == "explorer-load":
        from minidtr.testing import browser

        reason = browser.unavailable()
        if reason:
            pytest.skip(reason)
    diff = refresh.stale(figure, figure.measure())
    assert diff is None, (
        f"{figure.page}: the {name!r} figure is stale; run python docs/refresh_figures.py "
        f"{name} and reread the prose around it:\n{diff}"
    )


def test_every_marked_block_is_a_figure_and_every_figure_has_one_block():
    marked = {}
    for path in pages():
        for name in re.findall(r"<!-- figures:([a-z0-9-]+) -->", path.read_text()):
            marked.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert set(marked) == set(refresh.BY_NAME), "blocks without a figure, or figures without one"
    for name, where in marked.items():
        assert where == [refresh.BY_NAME[name].page], f"{name}: {where}"
        refresh.shown(refresh.BY_NAME[name])  # one block, closed


def test_only_what_varies_is_left_out_of_the_comparison():
    train = refresh.BY_NAME["train"]
    shown = refresh.shown(train)
    timed = re.sub(r"steps/s +\S+", "steps/s               99.99", shown)
    assert timed != shown and refresh.comparable(train, timed) == refresh.comparable(train, shown)
    moved = re.sub(r"(slowdown +)\d\.\d+x", r"\g<1>9.999x", shown, count=1)
    assert moved != shown and refresh.comparable(train, moved) != refresh.comparable(train, shown)
    optimal = refresh.BY_NAME["optimal"]
    shown = refresh.shown(optimal)
    proven = re.search(r"\| 1\.111 \| 1\.111 \| [\d.]+ \|", shown).group(0)
    assert refresh.comparable(optimal, shown.replace(proven, "| 1.112 | 1.111 | 0.1 |")) != (
        refresh.comparable(optimal, shown)
    )
    incumbent = re.search(r"\| [\d.]+\* \| \S+ \| [\d.]+ \|", shown).group(0)
    assert refresh.comparable(optimal, shown.replace(incumbent, "| 9.999* | 1.000 | 60.0 |")) == (
        refresh.comparable(optimal, shown)
    )
