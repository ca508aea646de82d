"""The Python examples in the docs run as written (so they cannot go stale)."""

from __future__ import annotations

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


def python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), flags=re.S)


def test_design_examples_run(capsys):
    """docs/design.md: RuntimeOptions, the worked op (softplus) and the worked heuristic
    (dtr_down)."""
    from minidtr.runtime import heuristics

    blocks = python_blocks("design.md")
    assert len(blocks) == 4
    namespace: dict = {"__name__": "design_example"}
    try:
        for block in blocks:
            exec(compile(block, "docs/design.md", "exec"), namespace)
        out = capsys.readouterr().out.split("\n")
        rows = {tuple(line.split()[:2]): line.split()[2:] for line in out if line.strip()}
        assert len(rows) == 6
        # what the page says: all run at 0.5; at 0.4 the downward-looking one thrashes
        assert all(status == "ok" for (ratio, _), (status, _) in rows.items() if ratio == "0.5")
        assert rows[("0.4", "dtr")][0] == rows[("0.4", "msps")][0] == "ok"
        assert rows[("0.4", "dtr_down")][0] == "thrash"
        assert float(rows[("0.4", "dtr_down")][1]) > 1.5 * float(rows[("0.4", "dtr")][1])
    finally:
        heuristics.COST_TERMS.pop("descendants", None)
        heuristics.NAMED.pop("dtr_down", None)
    with pytest.raises(ValueError, match="unknown heuristic"):
        heuristics.make_heuristic("dtr_down")
