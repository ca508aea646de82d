"""docs/tutorial.md shows what docs/tutorial_example.py prints (its output blocks are
filled by docs/refresh_tutorial.py; the prose around them reads those numbers)."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


def test_every_output_block_of_the_tutorial_is_what_the_example_prints():
    spec = importlib.util.spec_from_file_location("refresh_tutorial", DOCS / "refresh_tutorial.py")
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    printed = subprocess.run(
        [sys.executable, str(DOCS / "tutorial_example.py")],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    page = (DOCS / "tutorial.md").read_text()
    for name, body in refresh.sections(printed).items():
        shown = re.search(rf"<!-- output:{name} -->\n```\n(.*?)\n```\n<!-- /output -->", page, re.S)
        assert shown is not None, f"tutorial.md has no output block {name!r}"
        assert shown.group(1) == body, (
            f"tutorial.md's {name!r} block is stale: run python docs/refresh_tutorial.py, "
            "then reread the prose around it"
        )
