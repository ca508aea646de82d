"""The explorer page (``minidtr explain --html``): the events it needs, its data, and the page
itself in a headless Chromium (skipped where Playwright or Chromium is missing)."""

import math
import re

import numpy as np
import pytest

import minidtr as md
from minidtr.cli import main
from minidtr.explain import ORPHAN_TRIGGER, explain, load_events, summarize, write_event_log
from minidtr.explorer import cascades, page_data, write_html
from minidtr.testing import browser


def chain_runtime(ratio: float = 0.8, steps: int = 3, record: bool = True) -> md.Runtime:
    """Six tanh layers trained for ``steps`` steps at ``ratio`` x their unbounded peak."""
    rng = np.random.default_rng(0)
    weights = [
        md.tensor(rng.normal(0, 0.3, (32, 32)).astype(np.float32), requires_grad=True)
        for _ in range(6)
    ]
    inputs = rng.normal(size=(128, 32)).astype(np.float32)

    def step():
        h = md.tensor(inputs)
        for w in weights:
            h = md.tanh(h @ w)
        (h * h).mean().backward()
        for w in weights:
            w.grad = None

    free = md.Runtime(cost="flops")
    with free:
        step()
    runtime = md.Runtime(
        budget=int(ratio * free.stats()["peak_memory"]), cost="flops", record_events=record
    )
    with runtime:
        for _ in range(steps):
            runtime.mark_step()
            step()
    return runtime


@pytest.fixture
def log(tmp_path, fresh_allocator):
    runtime = chain_runtime()
    path = tmp_path / "ev.jsonl"
    write_event_log(str(path), runtime)
    return runtime, str(path)


# ---- what the runtime records -----------------------------------------------------------


def test_budget_evictions_record_the_candidates_with_their_score_terms(log):
    runtime, _ = log
    evictions = [e for e in runtime.events if e["event"] == "evict" and "score" in e]
    assert evictions
    for e in evictions:
        candidates = e["candidates"]
        assert candidates[0]["id"] == e["id"] and candidates[0]["score"] == e["score"]
        assert [c["score"] for c in candidates] == sorted(c["score"] for c in candidates)
        if e["runner_up"] is not None:
            assert candidates[1]["id"] == e["runner_up"][0]
        for c in candidates:  # the terms give back the score: (c + c(e*)) / (m * s)
            rebuilt = (c["cost"] + c["neighbourhood"]) / (c["nbytes"] * max(c["staleness"], 1e-9))
            assert math.isclose(rebuilt, c["score"], rel_tol=1e-12)


def test_recording_changes_no_decision(monkeypatch):
    from minidtr.runtime import registry
    from minidtr.runtime.allocator import Allocator

    stats = []
    for record in (False, True):
        monkeypatch.setitem(registry.ALLOCATORS, "cpu", Allocator("cpu"))
        stats.append(chain_runtime(record=record).stats())
    for key in ("evictions", "dead_evictions", "remats", "orphan_remats", "peak_memory"):
        assert stats[0][key] == stats[1][key], key
    assert stats[0]["remat_cost"] == stats[1]["remat_cost"]


def test_terms_follow_the_heuristic(fresh_allocator):
    from minidtr.runtime.heuristics import make_heuristic

    assert make_heuristic("dtr").formula == "(c + c(e*)) / (m * s)"
    assert make_heuristic("msps").formula == "(c + c(evicted ancestors)) / m"
    assert make_heuristic("lru").formula == "1 / s"
    x = md.tensor(np.ones((4, 4), np.float32))
    with md.Runtime(cost="flops") as rt:
        y = md.tanh(x)
        terms = make_heuristic("dtr_local").terms(y.cell.storage, rt.allocator)
    assert set(terms) == {"cost", "nbytes", "staleness"} and terms["nbytes"] == 64


def test_remats_are_linked_into_cascades(log):
    runtime, _ = log
    remats = [e for e in runtime.events if e["event"] == "remat"]
    assert remats and all("cascade" in e and "trigger" in e for e in remats)
    # a remat's parent is rebuilt later in the same cascade
    for n, e in enumerate(remats):
        if e["parent"] is not None:
            later = [r for r in remats[n + 1 :] if r["cascade"] == e["cascade"]]
            assert e["parent"] in {r["id"] for r in later}
    assert any(e["parent"] is not None for e in remats)  # at least one cascade is deep
    orphans = sum(1 for e in remats if e["trigger"].startswith(ORPHAN_TRIGGER))
    stats = runtime.stats()
    assert summarize(runtime.events).orphan_remats == stats["orphan_remats"]
    assert orphans >= stats["orphan_remats"]


def test_steps_are_marked_and_counted(log):
    runtime, path = log
    steps = [e for e in runtime.events if e["event"] == "step"]
    assert [e["step"] for e in steps] == [0, 1, 2]
    assert [e["clock"] for e in steps] == sorted(e["clock"] for e in steps)
    s = summarize(load_events(path))
    assert len(s.step_clocks) == 3
    text = explain(s)
    assert "over 3 marked steps" in text and "estimated ns (cost=flops" in text


def test_the_plot_starts_at_zero_and_marks_the_steps(log, tmp_path):
    pytest.importorskip("matplotlib")
    from minidtr.explain import resident_timeline
    from minidtr.plots import memory_timeline

    runtime, path = log
    columns = resident_timeline(load_events(path))
    assert columns["step"] == [0, 1, 2] and len(columns["step_clock"]) == 3
    out = tmp_path / "timeline.png"
    memory_timeline(load_events(path), str(out), runtime.budget)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    no_steps = [e for e in runtime.events if e["event"] != "step"]
    memory_timeline(no_steps, str(out), runtime.budget, cost="flops")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_title_is_a_file_name_whatever_its_bytes(log, tmp_path):
    """A file name not UTF-8 (argv holds its byte as a lone surrogate) failed in the font
    code with a TypeError; it is shown as an escape, and $...$ as it is."""
    pytest.importorskip("matplotlib")
    from minidtr.plots import memory_timeline

    runtime, path = log
    out = tmp_path / "timeline.png"
    memory_timeline(load_events(path), str(out), runtime.budget, title="ev\udcff$x^2$.jsonl")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def two_output_replays(with_replay_field: bool = True) -> list[dict]:
    """Two rematerializations refilling three storages: a two-output op's replay refills
    both its outputs, then a second replay refills one (a log from before the ``replay``
    field marks a replay only by its events' shared clock)."""

    def event(kind: str, sid: int, clock: float, memory: int, **extra) -> dict:
        common = {"id": sid, "op": "split", "nbytes": 1024, "clock": clock, "memory": memory}
        return {"event": kind, **common, **extra}

    replay = (lambda n: {"replay": n}) if with_replay_field else (lambda n: {})
    return [
        {"event": "runtime", "budget": 4096, "cost": "flops"},
        event("alloc", 1, 10.0, 1024, cost=10.0),
        event("alloc", 2, 10.0, 2048, cost=10.0),
        event("evict", 1, 10.0, 1024, reason="budget"),
        event("evict", 2, 10.0, 0, reason="budget"),
        event("remat", 1, 20.0, 1024, cost=10.0, **replay(1)),
        event("remat", 2, 20.0, 2048, cost=10.0, **replay(1)),
        event("evict", 1, 20.0, 1024, reason="budget"),
        event("remat", 1, 30.0, 2048, cost=10.0, **replay(2)),
    ]


@pytest.mark.parametrize("with_replay_field", [True, False])
def test_the_plot_and_the_page_count_a_replay_of_several_outputs_once(with_replay_field):
    """explain said 967 rematerializations, the plot's legend and the page 1,024: they
    counted the storages refilled."""
    pytest.importorskip("matplotlib")
    from minidtr.explain import resident_timeline
    from minidtr.plots import timeline_figure

    events = two_output_replays(with_replay_field)
    assert summarize(events).remats == 2
    assert resident_timeline(events)["remat_clock"] == [20.0, 30.0]
    legend = timeline_figure(events).axes[0].get_legend()
    assert "rematerialization (2)" in [text.get_text() for text in legend.get_texts()]
    assert page_data(events)["replays"] == 2


def test_mark_step_records_nothing_without_events(fresh_allocator):
    runtime = md.Runtime()
    with runtime:
        runtime.mark_step()
    assert runtime.events is None


def test_page_data_joins_evictions_and_cascades(log):
    runtime, path = log
    data = page_data(load_events(path))
    columns = data["columns"]
    assert len(columns["t"]) == sum(1 for e in runtime.events if e["event"] != "step")
    assert columns["t"][0] == 0 and columns["t"] == sorted(columns["t"])
    assert [k for k, _ in data["steps"]] == [0, 1, 2]
    budget_evictions = [i for i, k in enumerate(columns["kind"]) if k == "evict"]
    assert sorted(data["evictions"]) == budget_evictions
    assert all("for" in data["evictions"][i] for i in budget_evictions[:-1])
    remats = [i for i, k in enumerate(columns["kind"]) if k == "remat"]
    in_nodes = sorted(
        i for c in data["cascades"].values() for node in c["nodes"] for i in node["events"]
    )
    assert in_nodes == remats
    for cascade in data["cascades"].values():
        nodes = cascade["nodes"]
        for n, node in enumerate(nodes):
            if node["up"] is not None:  # a replay's parent runs after it and rebuilt its parent
                assert node["up"] > n
                ids = {columns["id"][i] for i in nodes[node["up"]]["events"]}
                assert node["parent"] in ids
            else:
                assert node["parent"] is None


def test_interleaved_cascades_count_their_evictions_without_a_walk_each():
    """Each cascade counted the budget evictions in its span by walking it: cascades that
    interleave span most of the log each (20,000 of them: 28 s). The counts come from
    running totals now: the same numbers, the kinds read once."""
    cascade_order = [0, 1, 2, 2, 1, 0]
    kinds = ["remat", "evict", "remat", "remat", "remat", "evict", "evict", "remat", "remat"]
    rows = [i for i, k in enumerate(kinds) if k == "remat"]

    class CountedReads(list):
        reads = 0

        def __getitem__(self, index):
            CountedReads.reads += 1
            return super().__getitem__(index)

    columns = {"kind": CountedReads(kinds), "t": list(range(len(kinds))), "id": [7] * len(kinds)}
    remats = {
        row: {"cascade": number, "trigger": "read", "parent": None}
        for row, number in zip(rows, cascade_order, strict=True)
    }
    counted = {n: c["evictions"] for n, c in cascades(columns, remats).items()}
    assert counted == {0: 3, 1: 2, 2: 0}
    assert CountedReads.reads == 0


def test_explain_html_writes_a_self_contained_page(log, tmp_path, capsys):
    _, path = log
    out = tmp_path / "page.html"
    assert main(["explain", path, "--html", str(out)]) == 0
    assert "explorer page:" in capsys.readouterr().out
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<canvas" in html
    # nothing to fetch: no external scripts, styles, fonts or images
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html and "url(" not in html


def test_write_html_escapes_the_data(tmp_path):
    events = [
        {"event": "alloc", "id": 1, "op": "</script><b>", "nbytes": 4, "clock": 1.0, "memory": 4}
    ]
    path = tmp_path / "x.html"
    write_html(events, str(path), title="<odd & title>")
    html = path.read_text()
    assert html.count("</script>") == 2  # the data's own is escaped
    assert "&lt;odd &amp; title&gt;" in html


# ---- in a real browser ----------------------------------------------------------------------

needs_browser = pytest.mark.skipif(
    browser.unavailable() is not None, reason=str(browser.unavailable())
)


@pytest.fixture
def page_path(log, tmp_path):
    _, path = log
    out = tmp_path / "page.html"
    write_html(load_events(path), str(out), title="chain at 0.8")
    return str(out)


@needs_browser
def test_the_page_loads_and_draws_the_timeline(chromium, page_path):
    with browser.explorer_page(chromium, page_path) as (page, errors):
        inked = page.evaluate(
            """() => {
              const c = document.getElementById('chart');
              const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
              let n = 0;
              for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
              return n / (c.width * c.height);
            }"""
        )
        assert inked > 0.05  # the memory area, axes, lanes
        assert "3 steps marked" in page.inner_text("#meta")
        assert errors == []


@needs_browser
def test_clicking_an_eviction_shows_its_score_breakdown(chromium, page_path):
    with browser.explorer_page(chromium, page_path) as (page, errors):
        evictions = page.evaluate("explorer.evictions")
        browser.click_mark(page, evictions[0], "evict")
        assert page.evaluate("explorer.selected") in evictions
        details = page.inner_text("#details")
        assert details.startswith("Eviction of #")
        assert "c(e*)" in details and "staleness" in details and "runner-up" in details
        rows = page.locator("#details table.candidates tr")
        assert rows.count() >= 3  # header, victim, runner-up
        assert "evicted" in rows.nth(1).inner_text()
        assert errors == []


@needs_browser
def test_clicking_a_remat_shows_its_cascade(chromium, page_path):
    with browser.explorer_page(chromium, page_path) as (page, errors):
        remats = page.evaluate("explorer.remats")
        browser.click_mark(page, remats[len(remats) // 2], "remat")
        assert page.evaluate("explorer.selected") in remats
        details = page.inner_text("#details")
        assert details.startswith("Rematerialization of #") and "Cascade" in details
        assert page.locator("#details .cascade li").count() >= 2  # the trigger and a replay
        assert page.locator("#details .cascade span.sel").count() == 1
        # a remat that fed another replay shows nested under it
        deep = page.evaluate(
            """() => explorer.remats.find(i => {
              explorer.select(i);
              return document.querySelectorAll('#details .cascade ul ul ul li').length > 0;
            })"""
        )
        assert deep is not None
        assert page.locator("#details .cascade ul ul ul li").count() >= 1
        assert "needed the replays under it" in page.inner_text("#details")
        assert errors == []


@needs_browser
def test_the_page_counts_remats_as_explain_does(chromium, tmp_path):
    out = tmp_path / "page.html"
    write_html(two_output_replays(), str(out))
    with browser.explorer_page(chromium, str(out)) as (page, errors):
        assert "2 remats (refilling 3 storages)" in page.inner_text("#meta")
        assert errors == []


def synthetic_log(n: int) -> list[dict]:
    """``n`` events: allocations, budget evictions with candidates, two-level cascades."""
    events: list[dict] = [{"event": "runtime", "budget": 1 << 20, "cost": "flops"}]
    clock, memory, sid = 0.0, 0, 0
    while len(events) < n:
        if len(events) % 1000 == 1:
            events.append({"event": "step", "step": len(events) // 1000, "clock": clock})
        sid += 1
        clock += 10.0
        memory = (memory + 4096) % (1 << 20)
        base = {"id": sid, "op": "tanh", "nbytes": 4096, "clock": clock, "memory": memory}
        kind = sid % 4
        if kind == 0:
            events.append({"event": "alloc", **base, "cost": 10.0})
        elif kind == 1:
            terms = {"cost": 10.0, "neighbourhood": 5.0, "nbytes": 4096, "staleness": 7.0}
            candidates = [
                {"id": sid + k, "op": "tanh", "score": 0.1 * (k + 1), **terms} for k in range(5)
            ]
            events.append(
                {
                    "event": "evict",
                    **base,
                    "reason": "budget",
                    "score": 0.1,
                    "runner_up": [sid + 1, 0.2],
                    "candidates": candidates,
                }
            )
        elif kind == 2:
            link = {"cascade": sid, "trigger": "matmul"}
            events.append({"event": "remat", **base, "cost": 10.0, **link, "parent": sid + 1})
        else:
            link = {"cascade": sid - 1, "trigger": "matmul"}
            events.append({"event": "remat", **base, "cost": 10.0, **link, "parent": None})
    return events[:n]


@needs_browser
def test_a_20000_event_log_loads_and_stays_usable(chromium, tmp_path):
    """Timing is measured in benchmarks/explorer_load.py; this checks it works at that size."""
    path = tmp_path / "big.html"
    write_html(synthetic_log(20_000), str(path))
    with browser.explorer_page(chromium, str(path)) as (page, errors):
        assert page.evaluate("explorer.events") > 19_000
        page.evaluate("explorer.zoom(0.01, 1000)")
        remats = page.evaluate("explorer.remats")
        page.evaluate(f"explorer.select({remats[-1]})")
        assert page.locator("#details .cascade ul ul li").count() >= 1
        assert errors == []
