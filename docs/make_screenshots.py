"""Screenshots of the explorer page for docs/tutorial.md (needs playwright and Chromium).

    python docs/make_screenshots.py

Runs ``minidtr train resnet --ratio 0.3 --steps 3 --events ev.jsonl`` and ``minidtr
explain ev.jsonl --html explorer.html`` in a temporary folder, opens the page in headless
Chromium and writes into docs/figures/:

- ``explorer_overview.png``: the timeline of the whole run.
- ``explorer_eviction.png``: an eviction clicked: its candidates, their score terms.
- ``explorer_cascade.png``: the remat with the deepest cascade, as a tree.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

from minidtr.cli import main as minidtr
from minidtr.testing import browser

FIGURES = Path(__file__).parent / "figures"
WIDTH = 1200


def make_page(folder: str) -> str:
    """The page, made in ``folder`` with the commands the tutorial shows."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            train = ["train", "resnet", "--ratio", "0.3", "--steps", "3", "--no-progress"]
            assert minidtr([*train, "--events", "ev.jsonl"]) == 0
            assert minidtr(["explain", "ev.jsonl", "--html", "explorer.html"]) == 0
    finally:
        os.chdir(here)
    return os.path.join(folder, "explorer.html")


def below(page, selector: str) -> float:
    box = page.locator(selector).bounding_box()
    return box["y"] + box["height"]


def main() -> None:
    reason = browser.unavailable()
    if reason:
        raise SystemExit(f"make_screenshots: {reason}")
    with tempfile.TemporaryDirectory() as folder, browser.chromium() as chromium:
        page, errors = browser.open_explorer(chromium, make_page(folder), WIDTH, 1000)
        page.mouse.move(600, 200)  # the hover readout
        page.screenshot(
            path=str(FIGURES / "explorer_overview.png"),
            clip={"x": 0, "y": 0, "width": WIDTH, "height": below(page, "#controls") + 4},
        )
        evictions = page.evaluate("explorer.evictions")
        browser.click_mark(page, evictions[len(evictions) // 3], "evict")
        top = page.locator("#chartbox").bounding_box()["y"] - 4
        page.screenshot(
            path=str(FIGURES / "explorer_eviction.png"),
            clip={"x": 0, "y": top, "width": WIDTH, "height": below(page, "#details") + 4 - top},
        )
        deepest = page.evaluate(
            """() => {
              let best = -1, deepest = 0;
              for (const i of explorer.remats) {
                explorer.select(i);
                const items = document.querySelectorAll('#details .cascade li');
                if (items.length > 12) continue;  // keep the figure small
                for (const li of items) {
                  let depth = 0;
                  for (let e = li; e; e = e.parentElement.closest('.cascade ul')) depth++;
                  if (depth > deepest) { deepest = depth; best = i; }
                }
              }
              return best;
            }"""
        )
        page.evaluate(f"explorer.select({deepest})")
        details = page.locator("#details").bounding_box()
        page.screenshot(
            path=str(FIGURES / "explorer_cascade.png"),
            clip={"x": 0, "y": details["y"] - 4, "width": WIDTH, "height": details["height"] + 8},
        )
        if errors:
            raise SystemExit(f"make_screenshots: the page logged errors: {errors}")
    for name in ("overview", "eviction", "cascade"):
        path = FIGURES / f"explorer_{name}.png"
        print(f"{path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
