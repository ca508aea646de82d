"""How fast the explorer page (``minidtr explain --html``) opens and reacts on a large log.

Records a real training log (the small ResNet at 0.3 of its peak, 8 steps: about 10,000
events), keeps at most its first ``--events`` events (default 20,000), writes the page
and opens it in headless Chromium (Debian's package; needs ``pip install playwright``),
then prints: the page's size, the time to write it, the time from navigation until it
has drawn, one full redraw
(one min-max bar per pixel column over every event), zooming in, and selecting an
eviction and a remat (rendering their details).

With ``--fit contiguous`` the run places every value in an arena (``Runtime(fit=
"contiguous")``), so the page also draws its address lane, and the redraw includes it.

Run: ``python benchmarks/explorer_load.py [--events 20000] [--log ev.jsonl] [--fit contiguous]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr.cli_args import input_file, whole_number
from minidtr.explain import load_events, write_event_log
from minidtr.explorer import write_html
from minidtr.runtime.options import FITS
from minidtr.testing import browser
from minidtr.training import TrainConfig, train


def record(path: str, fit: str = "bytes") -> None:
    config = TrainConfig("resnet", steps=8, ratio=0.3, record_events=True, fit=fit)
    write_event_log(path, train(config).runtime, model="resnet", size="small")


def in_page(page, script: str, repeat: int = 5) -> float:
    """Median milliseconds of ``script`` (a JS statement) run inside the page."""
    return page.evaluate(
        f"""() => {{
          const times = [];
          for (let k = 0; k < {repeat}; k++) {{
            const t = performance.now(); {script}; times.push(performance.now() - t);
          }}
          times.sort((a, b) => a - b);
          return times[times.length >> 1];
        }}"""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=whole_number(1), default=20_000)
    parser.add_argument(
        "--log", type=input_file, help="an event log to use instead of recording one"
    )
    parser.add_argument("--fit", choices=FITS, default="bytes")
    args = parser.parse_args()
    reason = browser.unavailable()
    if reason:
        raise SystemExit(f"explorer_load: {reason}")
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log or os.path.join(tmp, "ev.jsonl")
        if not args.log:
            record(log, args.fit)
        events = load_events(log)
        header = [e for e in events[:1] if e["event"] == "runtime"]
        events = header + [e for e in events if e["event"] != "runtime"][: args.events]
        page_path = os.path.join(tmp, "page.html")
        started = time.perf_counter()
        size = write_html(events, page_path, title="benchmark")
        written = time.perf_counter() - started
        with browser.chromium() as chromium:
            started = time.perf_counter()
            page, errors = browser.open_explorer(chromium, page_path)
            loaded = time.perf_counter() - started
            n = page.evaluate("explorer.events")
            blocks = page.evaluate("explorer.lane ? explorer.lane.blocks : 0")
            ready_ms = page.evaluate("explorer.readyMs")
            script_ms = page.evaluate("explorer.scriptMs")
            draw = in_page(page, "explorer.draw()")
            zoom = in_page(page, "explorer.zoom(0.5, 1e6); explorer.draw()")
            evict = in_page(page, "explorer.select(explorer.evictions[100])")
            remat = in_page(page, "explorer.select(explorer.remats[100])")
            page.close()
    print(f"events in the page          {n:,} (budget evictions and remats clickable)")
    if blocks:
        print(f"address lane blocks         {blocks:,}")
    print(f"page size                   {size / 2**20:.2f} MiB, written in {written:.2f} s")
    print(f"navigation until drawn      {ready_ms / 1000:.2f} s (the page's own clock)")
    print(f"  of which the script       {script_ms / 1000:.2f} s (parse the data, index, draw)")
    print(f"open a tab, load and draw   {loaded:.2f} s (headless Chromium, file://)")
    print(f"full redraw                 {draw:.1f} ms (median of 5)")
    print(f"zoom in and redraw          {zoom:.1f} ms")
    print(f"select an eviction          {evict:.1f} ms")
    print(f"select a remat (cascade)    {remat:.1f} ms")
    print(f"console errors              {len(errors)}")


if __name__ == "__main__":
    main()
