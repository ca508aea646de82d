"""Files from anyone: event logs, traces and sweep CSVs that lie about their types, nest
too deeply, expand without end or hold one enormous line. Each ends in one line naming
the file and the line (exit 1 from the command), in bounded memory and time."""

import gzip
import json
import math
import time
import tracemalloc

import pytest

from minidtr import cli, sim
from minidtr.explain import EventLogError, explain, load_events, summarize
from minidtr.reading import (
    LINE_VARIABLE,
    RATIO_VARIABLE,
    SIZE_VARIABLE,
    printable,
    read_limits,
)
from minidtr.sim.sweep import read_csv, sweep
from minidtr.testing import isolated_allocator


@pytest.fixture(autouse=True)
def fresh_allocator():
    with isolated_allocator():
        yield


def run(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ---- event logs: every field checked ------------------------------------------------------

HEADER = {"event": "runtime", "budget": 4096, "heuristic": "dtr", "cost": "flops"}


def alloc(sid=1, **fields):
    event = {"event": "alloc", "id": sid, "op": "tanh", "nbytes": 64, "clock": 10.0}
    event["memory"] = 64
    return {**event, **fields}


def evict(**fields):
    candidate = {"id": 1, "op": "tanh", "score": 0.5, "cost": 1.0, "nbytes": 64}
    event = alloc(event="evict", reason="budget", score=0.5, runner_up=[2, 0.7])
    event["candidates"] = [candidate, {**candidate, "id": 2, "score": 0.7}]
    return {**event, **fields}


def write_events(path, events) -> str:
    with open(path, "w") as f:
        for event in events:
            f.write((event if isinstance(event, str) else json.dumps(event)) + "\n")
    return str(path)


def with_candidate(**fields):
    event = evict()
    event["candidates"][0].update(fields)
    return event


WRONG_FIELDS = [
    (alloc(nbytes="lots"), "'nbytes'"),
    (evict(score="high"), "'score'"),
    (alloc(clock=None), "'clock'"),
    (alloc(id="<img src=x onerror=alert(1)>"), "'id'"),
    (alloc(id=True), "'id'"),
    (alloc(id=-1), "'id'"),
    (alloc(id=2**64), "'id'"),
    (alloc(memory=1.5), "'memory'"),
    (alloc(op=["tanh"]), "'op'"),
    (alloc(cost="free"), "'cost'"),
    (alloc(event="remat", cascade="<b>1</b>"), "'cascade'"),
    (alloc(event="remat", parent="x"), "'parent'"),
    (alloc(event="remat", trigger=7), "'trigger'"),
    (evict(runner_up=["<img>", 0.7]), "'runner_up'"),
    (evict(runner_up=[2]), "'runner_up'"),
    (evict(runner_up=[2, "0.7"]), "'runner_up'"),
    (evict(candidates="many"), "'candidates'"),
    (evict(candidates=[1, 2]), "'candidates'"),
    (with_candidate(id="<svg onload=alert(1)>"), "'id'"),
    (with_candidate(score="Infinity"), "'score'"),
    (with_candidate(staleness=None), "'staleness'"),
    ({"event": "step", "step": "<img>", "clock": 0.0}, "'step'"),
    ({"event": "step", "clock": 0.0}, "'step'"),
    ({**HEADER, "budget": "4K"}, "'budget'"),
    ({**HEADER, "heuristic": {"name": "dtr"}}, "'heuristic'"),
    ({**HEADER, "model": ["a", "b"]}, "'model'"),
    ('{"event": "alloc", "id": 1, "op": "t", "nbytes": 4, "clock": NaN, "memory": 4}', "'clock'"),
    (
        '{"event": "evict", "id": 1, "op": "t", "nbytes": 4, "clock": 1, "memory": 0, '
        '"score": Infinity}',
        "'score'",
    ),
    ('{"event": "alloc", "id": 1, "op": "t", "nbytes": 4, "clock": 1e999, "memory": 4}', "clock"),
    (
        '{"event": "alloc", "id": 1, "op": "t", "nbytes": 4, "clock": 1, "memory": ' + "9" * 5000,
        "to increase the limit)",  # Python's message whole, not cut mid-word
    ),
    ("\ufeff" + json.dumps(alloc(3)), "starts with a byte order mark (U+FEFF)"),
    # explain said "-2400% fragmented"
    (json.dumps(evict(free_bytes=100, largest_free=2500)), "'largest_free' (2,500) is more than"),
    # a second header: explain read the last (a negative span), animate the first
    (json.dumps({**HEADER, "budget": 64}), "a runtime header after the first event"),
    ("[" * 100_000, "nested too deeply"),
    ('{"event": "alloc", "x": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
]


@pytest.mark.parametrize("bad, fragment", WRONG_FIELDS)
def test_a_wrong_field_is_one_line_naming_file_line_and_field(capsys, tmp_path, bad, fragment):
    path = write_events(tmp_path / "ev.jsonl", [HEADER, alloc(), bad, alloc(2)])
    for html in ([], ["--html", str(tmp_path / "page.html")]):
        code, out, err = run(capsys, "explain", path, *html)
        assert code == 1, (out, err)
        line = one_line(err)
        assert line.startswith(f"minidtr explain: {path}:3: ") and fragment in line
        assert len(line) < 400  # a long value is cut, not printed whole
    assert not (tmp_path / "page.html").exists()


def test_check_events_refuses_bad_events_built_in_memory(tmp_path):
    from minidtr.explorer import write_html

    with pytest.raises(EventLogError, match="event 2: the field 'id'"):
        write_html([alloc(), alloc(id="<b>x</b>")], str(tmp_path / "page.html"))


def test_costs_that_add_up_to_infinity_are_refused(tmp_path):
    path = write_events(tmp_path / "ev.jsonl", [alloc(cost=1e308), alloc(2, cost=1e308)])
    with pytest.raises(EventLogError, match=r"ev.jsonl:2: the costs add up"):
        load_events(path)


def test_a_null_score_is_no_score():
    events = [HEADER, alloc(), evict(score=None, runner_up=None, candidates=[])]
    assert summarize(events).decisions == []


def test_names_never_reach_the_terminal_raw(capsys, tmp_path):
    hostile = "\x1b[2J\x1b[31mred\x1b]0;title\x07\u202eevil\nline\ud800"
    events = [{**HEADER, "model": hostile}, alloc(op=hostile), evict(op=hostile)]
    path = write_events(tmp_path / "ev.jsonl", [*events, alloc(2, op=hostile, clock=11.0)])
    code, out, err = run(capsys, "explain", path)
    assert code == 0, err
    assert not any(c in out for c in "\x1b\x07\u202e\ud800")
    assert "\\x1b[2J\\x1b[31mred" in out and "\\u202eevil\\x0aline\\ud800" in out
    assert printable("plain name (ok)") == "plain name (ok)"


def test_room_was_made_for_says_how_many_more(tmp_path):
    events = [HEADER]
    for n in range(8):  # each eviction makes room for a different op
        events += [evict(id=100 + n, clock=n + 0.5), alloc(n, op=f"op{n}", clock=n + 1.0)]
    text = explain(summarize(events), top=3)
    room = next(line for line in text.splitlines() if line.startswith("Room was made for"))
    assert room.endswith(", and 5 more ops.")
    assert "  and 7 more ops" not in text  # the table of evictions has one op only


# ---- huge lines and bombs ---------------------------------------------------------------


def measured(function):
    """(what ``function`` raised, its peak traced memory in MiB, seconds)."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        function()
    except Exception as e:  # noqa: BLE001
        error = e
    else:
        error = None
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return error, peak, seconds


def zeros_bomb(path, mib: int) -> None:
    """A gzip file of ``mib`` MiB of zero bytes (a few tens of KiB on disk)."""
    block = bytes(2**20)
    with gzip.open(path, "wb", compresslevel=1) as f:
        for _ in range(mib):
            f.write(block)


def test_a_gzip_bomb_trace_is_refused_at_once_in_little_memory(tmp_path):
    bomb = tmp_path / "bomb.log.gz"
    zeros_bomb(bomb, 64)
    assert bomb.stat().st_size < 2**20
    error, peak, seconds = measured(lambda: sim.load_log(bomb, max_line=2**20))
    assert isinstance(error, sim.TraceError) and "a line longer than 1 MiB" in str(error)
    assert "bomb.log.gz:1:" in str(error)
    assert peak < 8 and seconds < 5


def lines_bomb(path, mib: int) -> None:
    """A gzip trace of a constant then ``mib`` MiB of one valid line, repeated: one
    compressed MiB written ``mib`` times (gzip reads concatenated members as one)."""
    line = b'{"INSTRUCTION": "ANNOTATE", "ANNOTATION": "BACKWARD"}\n'
    member = gzip.compress(line * (2**20 // len(line)))
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"INSTRUCTION": "CONSTANT", "NAME": "c"}\n'))
        f.write(gzip.compress(b'{"INSTRUCTION": "MEMORY", "NAME": "c", "MEMORY": "8"}\n'))
        f.write(member * mib)


def test_a_gzip_bomb_of_valid_lines_is_refused_by_its_ratio(tmp_path, monkeypatch):
    from minidtr import reading

    bomb = tmp_path / "lines.log.gz"
    lines_bomb(bomb, 1024)  # 1 GiB, in 3 MiB
    assert bomb.stat().st_size < 4 * 2**20
    monkeypatch.setattr(reading, "RATIO_SLACK", 2**20)  # checked from 1 MiB on, not 16
    error, peak, seconds = measured(lambda: sim.load_log(bomb))
    assert isinstance(error, sim.TraceError), error
    assert "more than 100 times: a decompression bomb?" in str(error)
    assert RATIO_VARIABLE in str(error) and peak < 64 and seconds < 10


def test_a_trace_of_valid_lines_past_the_size_limit_is_refused(tmp_path):
    bomb = tmp_path / "lines.log.gz"
    lines_bomb(bomb, 8)
    load = lambda: sim.load_log(bomb, max_bytes=4 * 2**20, max_ratio=math.inf)  # noqa: E731
    error, peak, seconds = measured(load)
    assert isinstance(error, sim.TraceError)
    assert "a trace of more than 4 MiB once decompressed" in str(error)
    assert SIZE_VARIABLE in str(error) and peak < 32 and seconds < 10


def test_blank_lines_count_against_the_size_limit_and_keep_line_numbers(tmp_path):
    path = tmp_path / "blank.log"
    with open(path, "wb") as f:
        f.write(b"\n" * (3 * 2**20 + 5) + b"{not json\n")
    with pytest.raises(sim.TraceError, match=f"blank.log:{3 * 2**20 + 6}: not valid JSON"):
        sim.load_log(path)
    error, peak, seconds = measured(lambda: sim.load_log(path, max_bytes=2**20))
    assert "a trace of more than 1 MiB:" in str(error) and seconds < 5


def test_one_huge_line_is_refused_by_the_commands(capsys, tmp_path, monkeypatch):
    log = tmp_path / "huge.jsonl"
    log.write_bytes(b'{"event": "alloc", "op": "' + b"x" * (3 * 2**20) + b'"}\n')
    trace = tmp_path / "huge.log"
    trace.write_bytes(log.read_bytes())
    monkeypatch.setenv(LINE_VARIABLE, "1M")
    code, _, err = run(capsys, "explain", str(log))
    assert code == 1 and "huge.jsonl:1: a line longer than 1 MiB" in one_line(err)
    assert LINE_VARIABLE in err
    code, _, err = run(capsys, "sim", "info", str(trace))
    assert code == 1 and "huge.log:1: a line longer than 1 MiB" in one_line(err)
    monkeypatch.setenv(LINE_VARIABLE, "8M")  # raised: the line is read, then found wrong
    code, _, err = run(capsys, "explain", str(log))
    assert code == 1 and "lacks the field 'id'" in one_line(err)


def test_the_limits_come_from_arguments_then_environment(monkeypatch):
    monkeypatch.setenv(SIZE_VARIABLE, "2G")
    monkeypatch.setenv(LINE_VARIABLE, "64K")
    assert read_limits() == read_limits(64 * 2**10, 2 * 2**30, 100)
    assert read_limits(max_bytes=10).max_bytes == 10
    monkeypatch.setenv(RATIO_VARIABLE, "inf")
    assert read_limits().max_ratio == math.inf
    monkeypatch.setenv(RATIO_VARIABLE, "0.5")
    with pytest.raises(ValueError, match=f"{RATIO_VARIABLE}: not a ratio >= 1"):
        read_limits()
    monkeypatch.setenv(SIZE_VARIABLE, "lots")
    with pytest.raises(ValueError, match=f"{SIZE_VARIABLE}: not a byte count"):
        read_limits()
    with pytest.raises(ValueError, match="max_line must be"):
        read_limits(max_line=0, max_bytes=1, max_ratio=2)


def test_deep_nesting_in_a_trace_is_one_line(tmp_path):
    path = tmp_path / "deep.log"
    path.write_text("[" * 200_000 + "\n")
    with pytest.raises(sim.TraceError, match="deep.log:1: JSON nested too deeply"):
        sim.load_log(path)


# ---- traces whose numbers overflow, or whose names are not text --------------------------------


def trace_rows(time_a="5", time_b="5", memory="8"):
    return [
        {"INSTRUCTION": "CONSTANT", "NAME": "c"},
        {"INSTRUCTION": "MEMORY", "NAME": "c", "MEMORY": memory},
        {"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["c"], "RESULT": ["a"], "TIME": time_a},
        {"INSTRUCTION": "MEMORY", "NAME": "a", "MEMORY": memory},
        {"INSTRUCTION": "ALIAS", "NAME": "a", "ALIAS": "-1"},
        {"INSTRUCTION": "CALL", "NAME": "g", "ARGS": ["a"], "RESULT": ["b"], "TIME": time_b},
        {"INSTRUCTION": "MEMORY", "NAME": "b", "MEMORY": memory},
        {"INSTRUCTION": "ALIAS", "NAME": "b", "ALIAS": "-1"},
    ]


@pytest.mark.parametrize(
    "rows, line, fragment",
    [
        (trace_rows("1e308", "1e308"), 6, "the TIMEs add up past the largest float"),
        (trace_rows(time_a="1e999"), 3, "TIME must be a finite number"),
        (trace_rows(time_a="NaN"), 3, "TIME must be a finite number"),
        (trace_rows(time_a="-Infinity"), 3, "TIME must be a finite number"),
        (trace_rows(time_a="-1"), 3, "TIME must be a finite number"),
        (trace_rows(memory=str(2**63)), 2, "MEMORY must be an integer from 0"),
        (trace_rows(memory=str(2**62)), 3, "adds up past 9,223,372,036,854,775,807 bytes"),
        (trace_rows(memory="9" * 5000), 2, "MEMORY must be an integer"),
    ],
)
def test_a_trace_whose_numbers_overflow_is_refused(capsys, tmp_path, rows, line, fragment):
    path = tmp_path / "t.log"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(sim.TraceError) as info:
        sim.load_log(path)
    assert info.value.line == line and fragment in str(info.value)
    code, out, err = run(capsys, "sim", str(path), "--ratios", "0.5", "--heuristics", "dtr")
    assert code == 1 and "nan" not in out and fragment in one_line(err)


def test_big_but_finite_times_still_give_a_finite_slowdown(tmp_path):
    path = tmp_path / "t.log"
    path.write_text("".join(json.dumps(r) + "\n" for r in trace_rows("1e307", "1e307")))
    result = sim.simulate(sim.load_log(path), ratio=1.0)
    assert math.isfinite(result.slowdown)


def test_huge_times_evict_without_numpy_warnings(tmp_path):
    """A score past the largest float is inf, as the loop's; the table's search warned
    "overflow encountered in divide" on stderr (a cost of 1e307 over the staleness of a
    storage read at this very tick, 1e-9)."""
    import gzip
    import re
    import warnings

    from minidtr.sim.bundled import bundled_traces

    (source,) = bundled_traces(["mlp"])
    with gzip.open(source, "rt") as file:
        text = file.read()
    path = tmp_path / "t.log"
    first_linear = r'("NAME": ?"linear", ?"RESULT": ?\[[^]]*\], ?"TIME": ?)"[^"]*"'
    path.write_text(re.sub(first_linear, r'\1"1e307"', text, count=1))
    trace = sim.load_log(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = sim.simulate(trace, ratio=0.5, heuristic="dtr")
    assert result.evictions > 0


# ---- sweep CSVs ----------------------------------------------------------------------------


@pytest.fixture
def sweep_csv(tmp_path):
    from test_sim_parallel import chain_trace

    trace = chain_trace(8)
    path = tmp_path / "sweep.csv"
    sweep([trace], [0.9, 0.7], ["dtr"], jobs=1, csv_path=path)
    sim.write_log(trace, tmp_path / "c.log")
    return path, tmp_path / "c.log"


def spoil(path, row: int, column: str, value: str) -> None:
    import csv

    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    rows[row][rows[0].index(column)] = value
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


@pytest.mark.parametrize(
    "column, value, fragment",
    [
        ("error", "x" * 200_000, "field larger than field limit"),
        ("remats", "many", "the field 'remats' must be a number, got 'many'"),
        ("ratio", "\x00", "the field 'ratio' must be a number"),
    ],
)
def test_a_bad_resume_csv_is_one_line(capsys, sweep_csv, column, value, fragment):
    path, log = sweep_csv
    spoil(path, 2, column, value)
    with pytest.raises(ValueError, match="sweep.csv:3: ") as info:
        read_csv(path)
    assert fragment in str(info.value) and len(str(info.value)) < 400
    code, out, err = run(capsys, "sim", str(log), "--ratios", "0.9,0.7", "--heuristics", "dtr",
                         "--csv", str(path), "--resume")  # fmt: skip
    assert code == 1 and fragment in one_line(err) and "_csv.Error" not in err


def test_a_short_or_long_row_is_named(sweep_csv):
    path, _ = sweep_csv
    text = path.read_text().splitlines()
    path.write_text("\n".join([*text, text[-1] + ",extra", "a,b"]) + "\n")
    with pytest.raises(ValueError, match="sweep.csv:4: a row with more or fewer fields"):
        read_csv(path)
    path.write_text("name,size\nx,1\n")
    with pytest.raises(ValueError, match="sweep.csv:1: not a sweep CSV"):
        read_csv(path)


@pytest.mark.parametrize("field", ["NAME", "ARGS"])
def test_a_trace_name_with_control_characters_is_refused(capsys, tmp_path, field):
    rows = trace_rows()
    rows[2][field] = "\x1b[2Jf" if field == "NAME" else ["c", "\x1b[31m"]
    path = tmp_path / "t.log"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, out, err = run(capsys, "sim", "info", str(path))
    assert code == 1 and "t.log:3: " in one_line(err) and "printable text" in err
    assert "\x1b" not in out + err and "\\x1b" in err


def test_a_trace_file_name_is_shown_escaped(tmp_path):
    path = tmp_path / "a\x1b[31mb.log"
    path.write_text("".join(json.dumps(row) + "\n" for row in trace_rows()))
    assert sim.load_log(path).name == "a\\x1b[31mb"


def test_the_error_cli_md_shows_is_the_one_printed(capsys, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    write_events(tmp_path / "ev.jsonl", [HEADER, alloc(), alloc(2, nbytes="lots")])
    code, _, err = run(capsys, "explain", "ev.jsonl")
    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    assert code == 1 and one_line(err) in docs


def test_a_trace_error_comes_back_whole_from_a_worker_process():
    """A bad trace read in a pool's worker (benchmarks/fragmentation.py) broke the pool:
    TraceError could not be unpickled."""
    import pickle

    from minidtr.sim.instructions import TraceError

    error = TraceError("step.log", 3, "not valid JSON")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == "step.log:3: not valid JSON" and (again.source, again.line) == (
        "step.log",
        3,
    )
