"""A headless Chromium driven by Playwright, for the explorer page's tests, benchmark and
screenshots. Uses the system's Chromium (Debian: ``apt-get install chromium``); never
downloads a browser."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def find_chromium() -> str | None:
    """The Chromium executable: ``$CHROMIUM``, else ``chromium`` or ``chromium-browser``."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def unavailable() -> str | None:
    """Why no browser can run here (a reason to skip), or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    if find_chromium() is None:
        return "no Chromium found (apt-get install chromium, or set CHROMIUM)"
    return None


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless browser (Playwright ``Browser``)."""
    from playwright.sync_api import sync_playwright

    executable = find_chromium()
    if executable is None:
        raise RuntimeError(unavailable())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class PageErrors(list):
    """Console errors and uncaught exceptions of a page, collected as they happen."""

    def __init__(self, page: Any):
        super().__init__()
        page.on("console", lambda m: self.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.append(str(e)))


@contextlib.contextmanager
def explorer_page(browser: Any, path: str, **size: int) -> Iterator[tuple]:
    """``open_explorer`` for a ``with`` block: (page, errors), the page closed after it."""
    page, errors = open_explorer(browser, path, **size)
    try:
        yield page, errors
    finally:
        page.close()


def open_explorer(browser: Any, path: str, width: int = 1200, height: int = 900) -> tuple:
    """Open an explorer page from a file; returns (page, errors) once it has drawn."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors = PageErrors(page)
    page.goto("file://" + os.path.abspath(path))
    page.wait_for_function("window.explorer && window.explorer.ready", timeout=30_000)
    return page, errors


def click_mark(page: Any, index: int, lane: str) -> None:
    """Click, with the mouse, event ``index``'s mark in the ``evict`` or ``remat`` lane."""
    x = page.evaluate(f"explorer.xOf({index})")
    y = page.evaluate(f"explorer.laneY({lane!r})")
    box = page.locator("#chart").bounding_box()
    page.mouse.click(box["x"] + x, box["y"] + y)
