"""The explorer page's address lane (``minidtr/explorer_lane.py``): its blocks from a
contiguous-fit log, none for a byte-fit log, and the lane in a headless Chromium
(skipped where Playwright or Chromium is missing): positions, clicks, markup as text."""

import json

import numpy as np
import pytest

import minidtr as md
from minidtr.event_log import EventLogError
from minidtr.explain import load_events, write_event_log
from minidtr.explorer import page_data, write_html
from minidtr.explorer_lane import LANE_SCRIPT
from minidtr.runtime.arena import aligned
from minidtr.testing import browser

KiB = 1024
MARKUP = "<img src=x onerror=alert(1)>"


def crafted_log(op: str = "tanh") -> list[dict]:
    """An 8 KiB arena: a block from before the log, three values placed, one evicted by
    the budget, one dropped, a fourth placed, the evicted one rebuilt by a remat."""
    events: list[dict] = [
        {"event": "runtime", "budget": 8 * KiB, "cost": "flops", "fit": "contiguous"}
    ]
    rows = [  # kind, id, nbytes, address, extra fields
        ("free", 9, 512, 7 * KiB, {}),
        ("alloc", 1, 2 * KiB, 0, {}),
        ("alloc", 2, 2 * KiB, 2 * KiB, {}),
        ("alloc", 3, 1000, 4 * KiB, {}),
        ("evict", 1, 2 * KiB, 0, {"reason": "budget", "score": 1.0, "runner_up": None}),
        ("evict", 2, 2 * KiB, 2 * KiB, {"reason": "dead"}),
        ("alloc", 4, 3000, 5 * KiB, {}),
        ("remat", 1, 2 * KiB, 0, {"cost": 5.0}),
        ("free", 3, 1000, 4 * KiB, {}),
        ("evict", 4, 3000, 5 * KiB, {"reason": "budget", "score": 2.0, "runner_up": None}),
    ]
    for n, (kind, sid, nbytes, address, extra) in enumerate(rows):
        event = {"event": kind, "id": sid, "op": op, "nbytes": nbytes, "clock": 10.0 * (n + 1)}
        events.append({**event, "memory": 4 * KiB, "address": address, **extra})
    events[5].update(free_bytes=3 * KiB, largest_free=3 * KiB, extra=True)
    return events


# expected blocks: (start row, end row, address, size); row -1: before the log / to its end
EXPECTED = [
    (-1, 0, 7 * KiB, 512),
    (1, 4, 0, 2 * KiB),
    (2, 5, 2 * KiB, 2 * KiB),
    (3, 8, 4 * KiB, 1024),
    (6, 9, 5 * KiB, 3072),
    (7, -1, 0, 2 * KiB),
]


def blocks_of(data: dict) -> list[tuple]:
    b = data["blocks"]
    return list(zip(b["start"], b["end"], b["address"], b["size"], strict=True))


def test_blocks_run_from_placement_to_eviction_or_free():
    data = page_data(crafted_log())
    assert blocks_of(data) == EXPECTED
    assert data["blocks"]["top"] == 8 * KiB
    assert data["evictions"][4]["largest_free"] == 3 * KiB  # row 4: id 1's eviction


def test_a_byte_fit_log_has_no_blocks():
    events = [{k: v for k, v in e.items() if k != "address"} for e in crafted_log()]
    assert page_data(events)["blocks"] is None


@pytest.mark.parametrize("address", ["12", -512, 1.5, True, [0], 2**64])
def test_an_address_that_is_not_a_whole_number_is_refused(address):
    events = crafted_log()
    events[3]["address"] = address
    with pytest.raises(EventLogError, match="'address'"):
        page_data(events)


@pytest.mark.parametrize("field, value", [("largest_free", "3"), ("extra", 1)])
def test_the_arena_fields_of_an_eviction_are_checked(field, value):
    events = crafted_log()
    events[5][field] = value
    with pytest.raises(EventLogError, match=repr(field)):
        page_data(events)


def test_null_addresses_make_no_blocks():
    events = crafted_log()
    for e in events[1:]:
        e["address"] = None
    assert page_data(events)["blocks"] is None


def contiguous_log(path, budget: int = 28 * KiB) -> list[dict]:
    """A real log: four tanh layers, forward and backward, in an arena of ``budget``."""
    rng = np.random.default_rng(0)
    weights = [
        md.tensor(rng.normal(size=(16, 16)).astype(np.float32), requires_grad=True)
        for _ in range(4)
    ]
    with md.Runtime(budget=budget, cost="flops", fit="contiguous", record_events=True) as rt:
        for _ in range(2):
            h = md.tensor(rng.normal(size=(64, 16)).astype(np.float32))
            for w in weights:
                h = md.tanh(h @ w)
            (h * h).mean().backward()
            for w in weights:
                w.grad = None
    write_event_log(str(path), rt)
    return load_events(str(path))


def test_a_runtimes_blocks_are_its_events_and_never_overlap(tmp_path, fresh_allocator):
    events = contiguous_log(tmp_path / "ev.jsonl")
    data = page_data(events)
    assert any(e["event"] == "evict" and e.get("reason") == "budget" for e in events)
    rows = [e for e in events if e["event"] not in ("runtime", "step")]
    placed = [r for r, e in enumerate(rows) if e["event"] in ("alloc", "remat")]
    blocks = blocks_of(data)
    assert [b[0] for b in blocks if b[0] >= 0] == placed  # one block per placement
    for start, end, address, size in blocks:
        row = rows[start if start >= 0 else end]
        assert address == row["address"] and size == aligned(row["nbytes"])
        if end >= 0:  # the value's next eviction, free or banishment
            assert rows[end]["id"] == row["id"]
            assert rows[end]["event"] in ("evict", "free", "banish")
    for r in range(len(rows)):  # what is resident after each event lies side by side
        live = sorted((a, a + s) for s0, e0, a, s in blocks if s0 <= r and (e0 < 0 or e0 > r))
        assert all(x[1] <= y[0] for x, y in zip(live, live[1:], strict=False))
        assert all(y <= data["blocks"]["top"] for _, y in live)


def test_the_lane_script_never_parses_data_as_html():
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in LANE_SCRIPT, sink


# ---- in a real browser ----------------------------------------------------------------------

needs_browser = pytest.mark.skipif(
    browser.unavailable() is not None, reason=str(browser.unavailable())
)


def open_page(chromium, tmp_path, events):
    """The explorer page of ``events``, for a ``with`` block: (page, errors)."""
    path = tmp_path / "page.html"
    write_html(events, str(path))
    return browser.explorer_page(chromium, str(path))


def click_block(page, k: int) -> None:
    x, y = page.evaluate(f"explorer.lane.centre({k})")
    box = page.locator("#lane").bounding_box()
    page.mouse.click(box["x"] + 1 + x, box["y"] + 1 + y)  # offsets count from inside the border


def pixel(page, x: float, y: float) -> list[int]:
    return page.evaluate(
        f"""() => {{
          const c = document.getElementById('lane'), r = window.devicePixelRatio || 1;
          return Array.from(c.getContext('2d').getImageData(
            Math.floor({x} * r), Math.floor({y} * r), 1, 1).data);
        }}"""
    )


@needs_browser
def test_no_lane_for_a_byte_fit_log(chromium, tmp_path):
    events = [{k: v for k, v in e.items() if k != "address"} for e in crafted_log()]
    with open_page(chromium, tmp_path, events) as (page, errors):
        assert page.evaluate("explorer.lane") is None
        assert page.locator("#lane").count() == 0
        assert page.locator("#chart").count() == 1 and errors == []


@needs_browser
def test_the_lane_draws_each_block_where_its_events_put_it(chromium, tmp_path):
    with open_page(chromium, tmp_path, crafted_log()) as (page, errors):
        lane = page.evaluate("[explorer.lane.blocks, explorer.lane.top, explorer.lane.marks]")
        assert lane == [len(EXPECTED), 8 * KiB, [2, 1]]  # budget evictions, remats
        xs = {i: page.evaluate(f"explorer.xOf({i})") for i in range(10)}
        for k, (start, end, address, size) in enumerate(EXPECTED):
            x, y = page.evaluate(f"explorer.lane.centre({k})")
            x0 = xs[start] if start >= 0 else xs[0] - 1e9
            x1 = xs[end] if end >= 0 else 1e9
            assert max(x0, xs[0]) - 1 <= x <= min(x1, 1e4) + 1
            middle = page.evaluate(f"explorer.lane.yOf({address + size / 2})")
            assert abs(y - middle) < 1
            assert pixel(page, x, y)[:3] != [0xF1, 0xF3, 0xF5]  # drawn over the free space
        # between id 2's drop (row 5) and id 4's placement (row 6), 2-4 KiB is free
        free_x = (xs[5] + xs[6]) / 2
        free_y = page.evaluate(f"explorer.lane.yOf({3 * KiB})")
        assert pixel(page, free_x, free_y)[:3] == [0xF1, 0xF3, 0xF5]
        assert errors == []


@needs_browser
def test_clicking_a_block_shows_its_value(chromium, tmp_path):
    with open_page(chromium, tmp_path, crafted_log()) as (page, errors):
        for k, (start, end, address, _) in enumerate(EXPECTED):
            click_block(page, k)
            assert page.evaluate("explorer.selected") == (start if start >= 0 else end)
            details = page.inner_text("#details")
            assert f"lay at address {address:,} to" in details
        click_block(page, 1)  # id 1, evicted by the budget at row 4
        assert page.inner_text("#details").startswith("Allocation of #1 tanh")
        page.evaluate("explorer.select(4)")
        details = page.inner_text("#details")
        assert details.startswith("Eviction of #1") and "largest free block 3.0 KiB" in details
        assert "an extra eviction" in details
        assert page.locator("#nearby tr.sel").count() == 1
        assert errors == []


@needs_browser
def test_markup_in_a_contiguous_log_stays_text(chromium, tmp_path):
    with open_page(chromium, tmp_path, crafted_log(op=MARKUP)) as (page, errors):
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        for k in range(len(EXPECTED)):
            click_block(page, k)
            box = page.locator("#lane").bounding_box()
            x, y = page.evaluate(f"explorer.lane.centre({k})")
            page.mouse.move(box["x"] + 1 + x, box["y"] + 1 + y)
            assert MARKUP in page.inner_text("#details")
            assert MARKUP in page.inner_text("#lanehover")
        assert page.locator("img, #details script, #lanebox script").count() == 0
        assert dialogs == [] and errors == []


def large_log(n: int) -> list[dict]:
    """``n`` events of a 1 MiB arena cycling 64 blocks of 4 KiB: alloc, evict, remat, free."""
    events: list[dict] = [{"event": "runtime", "budget": 1 << 20, "fit": "contiguous"}]
    sid = 0
    while len(events) < n:
        sid += 1
        address = (sid % 64) * 16 * KiB
        base = {"id": sid, "op": "tanh", "nbytes": 4 * KiB, "memory": 0, "address": address}
        for k, kind in enumerate(("alloc", "evict", "remat", "free")):
            extra = {"reason": "budget"} if kind == "evict" else {}
            events.append({"event": kind, **base, "clock": 4.0 * sid + k, **extra})
    return events[:n]


@needs_browser
def test_a_50000_event_contiguous_log_loads(chromium, tmp_path):
    with open_page(chromium, tmp_path, large_log(50_000)) as (page, errors):
        assert page.evaluate("explorer.lane.blocks") > 20_000
        click_block(page, 10)
        assert page.evaluate("explorer.selected") >= 0
        page.evaluate("explorer.zoom(0.01, 1000)")
        page.evaluate("explorer.lane.draw()")
        assert errors == []


def test_the_page_data_is_json(tmp_path):
    assert json.loads(json.dumps(page_data(crafted_log()), allow_nan=False))["blocks"]
