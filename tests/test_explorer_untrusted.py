"""The explorer page on crafted logs, in a headless Chromium: markup in every string a log
can hold is shown as text, never run, whatever is clicked or selected; and the page,
the embedded summary and ``minidtr explain`` give the same clocks."""

import json
import re

import pytest

from minidtr import cli
from minidtr.explain import explain, load_events, summarize
from minidtr.explorer import _script_safe, page_data, write_html
from minidtr.explorer_page import PAGE, SCRIPT
from minidtr.testing import browser

PAYLOADS = (
    "<img src=x onerror=alert(1)>",
    "<!--<script>",
    "</script><script>alert(2)</script>",
    '"><svg onload=alert(3)>',
    "<iframe srcdoc='<script>parent.alert(4)</script>'></iframe>",
    "&lt;b&gt;&amp; ${alert(5)} `\u2028\u2029",
    "__proto__",
    "constructor",
    "\x1b[31mred",
)
INJECTED = "img, svg, iframe, object, embed, b > script, #details script, #nearby script"


def hostile_log(start: float = 1000.0, p: tuple[str, ...] = PAYLOADS) -> list[dict]:
    """A valid log (every number a number) whose every string is markup (from ``p``): op
    names, reasons, triggers, candidates, the header; first clock ``start``."""
    header = {"event": "runtime", "budget": 3000, "heuristic": p[0], "dealloc": p[1]}
    header.update(score=p[2] + " (c + c(e*)) / (m * s)", cost=p[3], model=p[4])
    events: list[dict] = [header]
    clock, sid = start, 0
    for step in range(2):
        events.append({"event": "step", "step": step, "clock": clock})
        for k, name in enumerate(p):
            sid += 1
            clock += 10.0
            base = {"id": sid, "op": name, "nbytes": 512, "clock": clock, "memory": 1024 + k}
            events.append({"event": "alloc", **base, "cost": 10.0})
            candidate = {"id": sid, "op": name, "score": 0.5, "cost": 10.0, "neighbourhood": 1.0}
            candidate.update(nbytes=512, staleness=3.0)
            runner = {**candidate, "id": sid + 1, "op": p[(k + 1) % len(p)], "score": 0.75}
            reason = "budget" if k % 2 else p[k]
            events.append(
                {**base, "event": "evict", "reason": reason, "score": 0.5, "clock": clock + 1}
                | {"runner_up": [sid + 1, 0.75], "candidates": [candidate, runner]}
            )
            trigger = p[k] if k % 2 else "orphans of " + p[k]
            link = {"cascade": sid, "trigger": trigger, "replay": sid, "cost": 10.0}
            events.append({**base, "event": "remat", "clock": clock + 2, **link, "parent": None})
            events.append({**base, "event": "evict", "reason": "dead", "clock": clock + 3})
        events.append({**base, "event": "banish", "clock": clock + 4})
        events.append({**base, "event": "free", "clock": clock + 5})
        clock += 5.0  # (a log's clock never goes back)
    return events


def write_log(path, events) -> str:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(path)


def test_the_page_script_never_parses_data_as_html():
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in SCRIPT, sink


def test_the_data_holds_no_angle_bracket_or_ampersand(tmp_path):
    events = hostile_log()
    html = _script_safe(json.dumps(page_data(events), allow_nan=False))
    assert not set("<>&") & set(html)
    assert json.loads(html) == json.loads(json.dumps(page_data(events)))  # same data


# ---- in a real browser ----------------------------------------------------------------------

needs_browser = pytest.mark.skipif(
    browser.unavailable() is not None, reason=str(browser.unavailable())
)


def open_page(chromium, path):
    """(page, errors, dialogs): the page opened, its errors and every dialog it opened."""
    page = chromium.new_page(viewport={"width": 1200, "height": 900})
    errors = browser.PageErrors(page)
    dialogs: list[str] = []

    def dismiss(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.goto("file://" + str(path))
    page.wait_for_function("window.explorer && window.explorer.ready", timeout=15_000)
    return page, errors, dialogs


def exercise(page) -> None:
    """Click every button, select every event, click every linked row and tree node, hover,
    zoom, pan and step with the keyboard."""
    for button in ("reset", "next-evict", "prev-evict", "next-remat", "prev-remat"):
        for _ in range(3):
            page.click(f"#{button}")
    page.evaluate("for (let i = 0; i < explorer.events; i++) explorer.select(i)")
    for i in range(0, page.evaluate("explorer.events"), 5):
        page.evaluate(f"explorer.select({i})")
        if page.evaluate("document.querySelectorAll('#details [data-event]').length"):
            page.locator("#details [data-event]").first.click()
        page.locator("#nearby tr[data-event]").last.click()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowLeft")
    box = page.locator("#chart").bounding_box()
    for x in range(5, int(box["width"]), 37):
        for lane in ("evict", "remat"):
            y = page.evaluate(f"explorer.laneY({lane!r})")
            page.mouse.click(box["x"] + x, box["y"] + y)
        page.mouse.move(box["x"] + x, box["y"] + 100)
    page.mouse.wheel(0, -300)
    page.mouse.dblclick(box["x"] + 200, box["y"] + 100)


def assert_nothing_ran(page, errors, dialogs) -> None:
    page.wait_for_timeout(100)  # an onerror handler runs after the image fails to load
    assert dialogs == []
    assert errors == []
    assert page.evaluate(f"document.querySelectorAll({INJECTED!r}).length") == 0
    assert page.evaluate("document.scripts.length") == 2  # the data and the page's own


@needs_browser
def test_markup_in_every_string_of_a_log_is_shown_never_run(chromium, tmp_path, capsys):
    log = write_log(tmp_path / "<img src=x onerror=alert(7)>.jsonl", hostile_log())
    out = tmp_path / "page.html"
    assert cli.main(["explain", log, "--html", str(out)]) == 0
    capsys.readouterr()
    page, errors, dialogs = open_page(chromium, out)
    try:
        assert page.inner_text("h1").endswith("<img src=x onerror=alert(7)>.jsonl")
        meta = page.inner_text("#meta")
        assert "Heuristic <img src=x onerror=alert(1)>, score </script><script>" in meta
        assert "[object" not in meta
        exercise(page)
        page.evaluate(f"explorer.select({page.evaluate('explorer.evictions')[0]})")
        details = page.inner_text("#details")
        assert "<!--<script>" in details and "Score = </script><script>alert(2)" in details
        page.evaluate(f"explorer.select({page.evaluate('explorer.remats')[3]})")
        assert '"><svg onload=alert(3)>' in page.inner_text("#details")
        assert "#2 <!--<script>" in page.inner_text("#nearby")
        assert_nothing_ran(page, errors, dialogs)
    finally:
        page.close()


def bypassed_page(tmp_path, number: str | None = None) -> str:
    """A page whose data did not come through the loader's checks: strings (markup) where
    the page expects numbers, in every such place the issue found; with ``number``, also
    in the sizes and the budget, which the page does arithmetic on."""
    data = page_data(hostile_log())
    if number is not None:
        data["columns"]["nbytes"] = [number] * len(data["columns"]["nbytes"])
        data["header"]["budget"] = number
    payload = PAYLOADS[0]
    columns = data["columns"]
    columns["id"] = [f"{payload}{i}" for i in range(len(columns["id"]))]
    for eviction in data["evictions"].values():
        eviction.update(score=payload, runner_up=[payload, PAYLOADS[3]], reason=payload)
        for candidate in eviction["candidates"]:
            candidate.update(id=payload, score=PAYLOADS[2], staleness=payload)
    for index, remat in data["remats"].items():
        remat.update(cost=payload)
        data["cascades"][payload + str(index)] = data["cascades"].pop(remat["cascade"])
        remat["cascade"] = payload + str(index)
    data["steps"] = [[payload, t] for _, t in data["steps"]]
    data["header"].update(cost="constructor")
    data["unit"] = payload
    path = tmp_path / "bypassed.html"
    html = PAGE.replace("<!--TITLE-->", "bypassed").replace(
        "/*DATA*/", _script_safe(json.dumps(data))
    )
    path.write_text(html)
    return str(path)


@needs_browser
@pytest.mark.parametrize("number", [None, PAYLOADS[0]])
def test_the_page_escapes_even_data_the_loader_did_not_check(chromium, tmp_path, number):
    page, errors, dialogs = open_page(chromium, bypassed_page(tmp_path, number))
    try:
        exercise(page)
        first = page.evaluate("explorer.evictions")[0]
        page.evaluate(f"explorer.select({first})")
        assert "<img src=x onerror=alert(1)>" in page.inner_text("#details table.candidates")
        assert_nothing_ran(page, errors, dialogs)
    finally:
        page.close()


@needs_browser
def test_a_log_with_nan_is_refused_not_a_dead_page(tmp_path, capsys):
    text = write_log(tmp_path / "ev.jsonl", hostile_log()[:4])
    with open(text, "a") as f:
        f.write(
            '{"event": "evict", "id": 1, "op": "t", "nbytes": 4, "clock": 2000, "memory": 0, '
            '"score": NaN}\n'
        )
    code = cli.main(["explain", text, "--html", str(tmp_path / "page.html")])
    assert code == 1 and "ev.jsonl:5: the field 'score'" in capsys.readouterr().err
    assert not (tmp_path / "page.html").exists()


# ---- one clock ----------------------------------------------------------------------------------


@needs_browser
def test_page_summary_and_explain_give_the_same_absolute_clocks(chromium, tmp_path):
    events = hostile_log(start=123_456.0, p=tuple(f"op{k}" for k in range(9)))
    path = write_log(tmp_path / "ev.jsonl", events)
    out = tmp_path / "page.html"
    cli.main(["explain", path, "--html", str(out)])
    text = explain(summarize(load_events(path)))
    first = next(e for e in events if e["event"] == "evict" and "score" in e)
    assert f"clock    {first['clock']:,.0f}: evicted #{first['id']}" in text
    assert f"runs from clock {123_456:,}" in text
    page, errors, _ = open_page(chromium, out)
    try:
        page.evaluate(f"explorer.select({page.evaluate('explorer.evictions')[0]})")
        assert f"At clock {first['clock']:,.0f} (step 0)" in page.inner_text("#details")
        nearby = page.inner_text("#nearby")
        assert f"{first['clock']:,.0f}" in nearby and "\n10\t" not in nearby
        assert f"runs from clock {123_456:,}" in page.inner_text("#meta")
        assert page.text_content("#summary") == text
        assert "since the start" not in page.content()
        assert errors == []
    finally:
        page.close()


def test_plot_step_labels_never_overlap(tmp_path):
    pytest.importorskip("matplotlib")
    from minidtr.plots import timeline_figure

    events = hostile_log()[:1]
    clock = 0.0
    for step in range(300):
        events.append({"event": "step", "step": step, "clock": clock})
        for k in range(3):
            clock += 5.0
            events.append(
                {"event": "alloc", "id": k, "op": "x", "nbytes": 8, "clock": clock, "memory": 8}
            )
    fig = timeline_figure(events, budget=16, title="$\\frac{a}{")  # mathtext-looking title
    renderer = fig.canvas.get_renderer()
    shown = [t for t in fig.axes[0].texts if t.get_visible() and t.get_text().startswith("step")]
    boxes = sorted((t.get_window_extent(renderer) for t in shown), key=lambda b: b.x0)
    assert 5 <= len(boxes) < 300
    assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:], strict=False))
    assert re.match(r"step \d+", shown[0].get_text())
    fig.savefig(tmp_path / "t.png")


def test_a_runtimes_own_events_pass_the_checks(tmp_path, fresh_allocator):
    """Events in memory (a runner-up is a tuple there) are checked as a log's are."""
    from test_explorer import chain_runtime

    from minidtr.explain import check_events, runtime_header
    from minidtr.explorer import write_html

    runtime = chain_runtime(steps=2)
    assert any(isinstance(e.get("runner_up"), tuple) for e in runtime.events)
    check_events([runtime_header(runtime), *runtime.events])
    assert write_html(runtime.events, str(tmp_path / "page.html")) > 0


def test_a_bidi_override_in_a_name_is_shown_escaped_and_data_stays_out_of_the_title(tmp_path):
    """A right-to-left override in an op's name turned the page's own text around it
    backwards; a file named ``/*DATA*/`` put the page's data into its title."""
    from minidtr.explorer import write_html

    events = hostile_log(p=("\u202erelu", "b", "c", "d", "e"))
    out = tmp_path / "page.html"
    write_html(events, str(out), title="p/*DATA*/ev.jsonl")
    html = out.read_text()
    assert "\u202e" not in html and "\\\\u202erelu" in html  # the escape, as the terminal shows it
    title = html[html.index("<title>") : html.index("</title>")]
    assert title == "<title>p/*DATA*/ev.jsonl - minidtr explorer"


def test_numbers_past_what_the_page_holds_exactly_are_refused(tmp_path):
    """Ids past 2**53 all showed as #9223372036854776000, and a cascade's number lost its
    link; a negative memory was drawn over the lanes."""
    from minidtr.event_log import EventLogError

    base = {"event": "alloc", "id": 1, "op": "x", "nbytes": 8, "clock": 1.0, "memory": 8}
    for bad in ({"id": 2**53}, {"memory": -8}):
        path = write_log(tmp_path / "ev.jsonl", [{**base, **bad}])
        with pytest.raises(EventLogError, match=r"ev.jsonl:1: .*a whole number >= 0"):
            load_events(path)
    back = [base, {**base, "id": 2, "clock": 5.0}, {**base, "id": 3, "clock": 4.0}]
    with pytest.raises(EventLogError, match=r"ev.jsonl:3: the clock goes back, from 5.0 to 4.0"):
        load_events(write_log(tmp_path / "ev.jsonl", back))  # (drew a flat timeline)


def deep_cascade(depth: int) -> list[dict]:
    """``depth`` storages, all evicted, then rebuilt as one chain: each replay needed the
    one before it (``parent``)."""
    events: list[dict] = [{"event": "runtime", "budget": 10 * depth}]
    clock = 0.0
    for sid in range(1, depth + 1):
        clock += 1.0
        events.append({"event": "alloc", "id": sid, "op": "tanh", "nbytes": 8, "clock": clock,
                       "memory": 8 * sid, "cost": 1.0})  # fmt: skip
    for sid in range(1, depth + 1):
        clock += 1.0
        events.append({"event": "evict", "id": sid, "op": "tanh", "nbytes": 8, "clock": clock,
                       "memory": 8 * (depth - sid), "reason": "budget", "score": 1.0})  # fmt: skip
    for sid in range(1, depth + 1):
        clock += 1.0
        parent = sid + 1 if sid < depth else None
        events.append({"event": "remat", "id": sid, "op": "tanh", "nbytes": 8, "clock": clock,
                       "memory": 8 * sid, "cost": 1.0, "cascade": 1, "replay": sid,
                       "trigger": "read", "parent": parent})  # fmt: skip
    return events


@needs_browser
def test_a_cascade_thousands_deep_and_a_clock_of_1e22_draw(chromium, tmp_path):
    """Selecting a remat of a 1,500-deep cascade crashed the tab (a nested list per level,
    built by recursion); a clock of 1e22 looped forever making ticks finer than its floats."""
    from minidtr.explorer import write_html

    out = tmp_path / "deep.html"
    write_html(deep_cascade(3000), str(out))
    page, errors, dialogs = open_page(chromium, out)
    try:
        page.evaluate(f"explorer.select({page.evaluate('explorer.remats')[0]})")
        details = page.inner_text("#details")
        assert "Rebuilding took 3000 replays" in details and "listed flat" in details
        assert_nothing_ran(page, errors, dialogs)
    finally:
        page.close()
    far = [{**e, "clock": e["clock"] + 1e22} if "clock" in e else e for e in hostile_log()]
    write_html(far, str(out))
    page, errors, dialogs = open_page(chromium, out)
    try:
        box = page.locator("#chart").bounding_box()
        for _ in range(40):  # zoomed in past the floats' resolution near 1e22
            page.mouse.wheel(0, -300)
        page.mouse.move(box["x"] + 100, box["y"] + 100)
        assert_nothing_ran(page, errors, dialogs)
    finally:
        page.close()


def test_an_eviction_names_the_row_it_made_room_for_not_a_copy_of_its_op(tmp_path):
    """300 evictions waiting for one allocation whose op had a 1 MiB name copied the name
    into each: a 309 MiB page from a 1 MiB log."""
    name = "n" * 100_000
    events: list[dict] = [{"event": "runtime", "budget": 2400}]
    for sid in range(300):
        events.append({"event": "alloc", "id": sid, "op": "a", "nbytes": 8, "clock": sid,
                       "memory": 8 * sid + 8, "cost": 1})  # fmt: skip
    for sid in range(300):
        events.append({"event": "evict", "id": sid, "op": "a", "nbytes": 8,
                       "clock": 300 + sid, "memory": 2392 - 8 * sid, "score": 1.0})  # fmt: skip
    events.append({"event": "alloc", "id": 300, "op": name, "nbytes": 8, "clock": 600,
                   "memory": 8, "cost": 1})  # fmt: skip
    data = page_data(events)
    last_row = len(data["columns"]["kind"]) - 1
    assert {e.get("for") for e in data["evictions"].values()} == {last_row}
    assert write_html(events, str(tmp_path / "page.html")) < 20 * len(name)
    assert "madeRoomFor(e.for)" in SCRIPT


@pytest.mark.parametrize("extra", ["NaN", "[" * 500 + "]" * 500])
def test_unknown_fields_of_a_candidate_stay_off_the_page(tmp_path, capsys, extra):
    """A candidate's fields beyond those the page shows are not checked, and went onto the
    page: a NaN stopped it with a JSON error naming no line, 500 nested lists overflowed
    the stack. The page takes only the fields it shows."""
    log = tmp_path / "ev.jsonl"
    log.write_text(
        '{"event":"alloc","id":1,"op":"x","nbytes":8,"clock":1,"memory":8,"cost":1}\n'
        '{"event":"evict","id":1,"op":"x","nbytes":8,"clock":2,"memory":0,"score":1.0,'
        f'"candidates":[{{"id":1,"op":"x","score":1.0,"cost":2.0,"junk":{extra}}}]}}\n'
    )
    page = tmp_path / "page.html"
    assert cli.main(["explain", str(log), "--html", str(page)]) == 0, capsys.readouterr().err
    assert page_data(load_events(str(log)))["evictions"][1]["candidates"] == [
        {"id": 1, "op": "x", "score": 1.0, "cost": 2.0}
    ]


def test_a_runner_up_with_a_null_score_is_said_to_have_no_finite_score():
    """The page showed the log's null (an infinite score) as 'scored - = 0.00x the
    victim's'; it says the runner-up had no finite score, as explain does."""
    runner_up = SCRIPT[SCRIPT.index("if (e.runner_up)") :]
    assert 'scored ? " scored " + sci(rscore) + ratio : " with no finite score"' in runner_up
