"""The trace format: reading the prototype's logs, writing them back, and clear errors."""

import json
import math

import pytest

from minidtr import sim
from minidtr.sim.simulator import baseline
from minidtr.sim.trace import Call, Constant, Copy, MakeConstant, Mutate, Release, Result


def write_rows(path, rows) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")


def const(name, nbytes):
    return [
        {"INSTRUCTION": "CONSTANT", "NAME": name},
        {"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": str(nbytes)},
    ]


def call(op, args, results, time="10"):
    rows = [
        {
            "INSTRUCTION": "CALL",
            "NAME": op,
            "ARGS": args,
            "RESULT": [r[0] for r in results],
            "TIME": time,
        }
    ]
    for name, nbytes, alias in results:
        rows.append({"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": str(nbytes)})
        rows.append({"INSTRUCTION": "ALIAS", "NAME": name, "ALIAS": str(alias)})
    return rows


START = {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"}


def small_log(path):
    rows = [
        *const("early", 4),  # before START: skipped, and its RELEASE is ignored
        START,
        *const("w", 100),
        *call("mm", ["w"], [("a", 200, -1)], "1000"),
        *call("view", ["a"], [("v", 200, 0)], "5"),
        {"INSTRUCTION": "COPY", "DST": "v2", "SRC": "v"},
        *call("split", ["a", "w"], [("s0", 0, 0), ("s1", 0, 0)], "7"),
        {"INSTRUCTION": "MUTATE", "NAME": "relu_", "ARGS": ["a"], "MUTATE": [0], "TIME": "30"},
        {"INSTRUCTION": "COPY_FROM", "DST": "v2", "SRC": "a"},
        {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "BACKWARD"},
        {"INSTRUCTION": "RELEASE", "NAME": "early"},
        {"INSTRUCTION": "RELEASE", "NAME": "v"},
        {"INSTRUCTION": "RELEASE", "NAME": "s0"},
        {"INSTRUCTION": "RELEASE", "NAME": "s1"},
    ]
    write_rows(path, rows)


def test_load_log_reads_every_instruction(tmp_path):
    small_log(tmp_path / "small.log")
    trace = sim.load_log(tmp_path / "small.log")
    kinds = [type(i).__name__ for i in trace.instructions]
    assert kinds[0] == "Annotate" and "Constant" in kinds and "Mutate" in kinds
    assert "early" not in {getattr(i, "name", None) for i in trace.instructions[:2]}
    calls = [i for i in trace.instructions if isinstance(i, Call)]
    assert calls[0] == Call("mm", ("w",), (Result("a", 200, -1),), 1000.0, line=calls[0].line)
    assert calls[2].results == (Result("s0", 0, 0), Result("s1", 0, 0))
    assert trace.ops == 4  # mm, view, split, relu_
    assert trace.total_compute == 1000 + 5 + 7 + 30
    assert trace.constant_bytes == 100
    assert trace.outputs == ("w", "a", "v2")
    assert trace.name == "small"


def test_write_then_load_round_trips(tmp_path):
    small_log(tmp_path / "small.log")
    trace = sim.load_log(tmp_path / "small.log")
    sim.write_log(trace, tmp_path / "again.log")
    again = sim.load_log(tmp_path / "again.log")
    strip = [dict((k, v) for k, v in vars_of(i).items() if k != "line") for i in trace.instructions]
    assert strip == [
        dict((k, v) for k, v in vars_of(i).items() if k != "line") for i in again.instructions
    ]
    a, b = sim.simulate(trace, ratio=0.8), sim.simulate(again, ratio=0.8)
    assert (a.slowdown, a.peak_memory, a.evictions) == (b.slowdown, b.peak_memory, b.evictions)


def vars_of(ins):
    return {k: getattr(ins, k) for k in ins.__slots__}


def test_fractional_time_survives_writing(tmp_path):
    trace = sim.make_trace([Constant("c", 8), Call("f", ("c",), (Result("r", 8),), 1234.5625)])
    sim.write_log(trace, tmp_path / "t.log")
    assert sim.load_log(tmp_path / "t.log").instructions[-1].time == 1234.5625
    text = (tmp_path / "t.log").read_text()
    assert '"TIME":"1234.5625"' in text and text.startswith('{"ANNOTATION":"START"')


def test_numbers_may_be_json_numbers(tmp_path):
    write_rows(
        tmp_path / "n.log",
        [
            {"INSTRUCTION": "CONSTANT", "NAME": "c"},
            {"INSTRUCTION": "MEMORY", "NAME": "c", "MEMORY": 16},
            {"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["c"], "RESULT": ["r"], "TIME": 2.5},
            {"INSTRUCTION": "MEMORY", "NAME": "r", "MEMORY": 16},
            {"INSTRUCTION": "ALIAS", "NAME": "r", "ALIAS": -1},
        ],
    )
    trace = sim.load_log(tmp_path / "n.log")
    assert trace.total_compute == 2.5 and trace.outputs == ("c", "r")


@pytest.mark.parametrize(
    "rows, line, fragment",
    [
        (
            [*const("c", 8), "{not json"],
            3,
            "not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        ),
        (["# a markdown file"], 1, "not valid JSON (Expecting value at column 1)"),
        (
            [*const("c", 8), '{"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["c"], "RES'],
            3,
            "not valid JSON (Unterminated string starting at column 53); truncated?",
        ),
        ([*const("c", 8), '{"INSTRUCTION": "CALL"'], 3, "delimiter at column 23); truncated?"),
        ([*const("c", 8), *call("f", ["c"], [("r", 8, -1)])[:2]], 4, "truncated"),
        ([{"INSTRUCTION": "CONSTANT", "NAME": "c"}], 1, "truncated"),
        (
            [
                *const("c", 8),
                *call("f", ["c"], [("r", 8, -1)])[:1],
                {"INSTRUCTION": "RELEASE", "NAME": "c"},
            ],
            4,
            "expected a MEMORY line",
        ),
        ([*const("c", "eight")], 2, "MEMORY must be an integer"),
        ([*const("c", -3)], 2, "MEMORY must be an integer"),
        ([*const("c", 8), *call("f", ["c"], [("r", 8, -1)], time="soon")], 3, "TIME"),
        ([*const("c", 8), *call("f", ["c"], [("r", 8, 3)])], 5, "not an argument index"),
        ([*const("c", 8), *call("f", ["nope"], [("r", 8, -1)])], 3, "'nope' is not a live"),
        (
            [
                *const("c", 8),
                {"INSTRUCTION": "RELEASE", "NAME": "c"},
                {"INSTRUCTION": "RELEASE", "NAME": "c"},
            ],
            4,
            "RELEASE of 'c'",
        ),
        ([*const("c", 8), *const("c", 8)], 3, "defined again"),
        ([*const("c", 8), {"INSTRUCTION": "COPY", "DST": "d"}], 3, "missing the key 'SRC'"),
        ([*const("c", 8), {"INSTRUCTION": "JUMP"}], 3, "unknown INSTRUCTION"),
        ([*const("c", 8), {"INSTRUCTION": "ALIAS", "NAME": "c", "ALIAS": "0"}], 3, "must follow"),
        (
            [
                *const("c", 8),
                {"INSTRUCTION": "MUTATE", "NAME": "f_", "ARGS": ["c"], "MUTATE": [1], "TIME": "1"},
            ],
            3,
            "MUTATE must list",
        ),
        (["[1, 2]"], 1, "INSTRUCTION key"),
        ([{"event": "runtime", "budget": 10}], 1, "INSTRUCTION key: this is an event log"),
    ],
)
def test_malformed_logs_name_the_line(tmp_path, rows, line, fragment):
    path = tmp_path / "bad.log"
    write_rows(path, rows)
    with pytest.raises(sim.TraceError) as info:
        sim.load_log(path)
    assert info.value.line == line
    assert fragment in str(info.value)
    assert f"bad.log:{line}:" in str(info.value)


W = Constant("w", 4)


@pytest.mark.parametrize(
    "bad, fragment",
    [
        (Call("f", ("w",), (Result("a", 8, alias=1),), 1.0), "ALIAS 1 of 'a' is not an argument"),
        (Call("f", ("w",), (Result("a", -8),), 1.0), "MEMORY must be an integer from 0"),
        (Call("f", ("w",), (Result("a", 8.5),), 1.0), "got 8.5"),
        (Call("f", ("w",), (Result("a", 8),), -1.0), "TIME must be a finite number"),
        (Call("f", ("w",), (Result("a", 8),), math.nan), "got nan"),
        (Call("f", ("w",), (Result("a", 8),), 1.0, workspace=-2), "WORKSPACE must be"),
        (Call("f", ("w",), (Result("a", 8, 0),), 1.0, constant=True), "cannot alias"),
        (Call("f\n", ("w",), (Result("a", 8),), 1.0), "NAME must be a non-empty string"),
        (Mutate("add_", ("w",), (1,), 1.0), "distinct argument indices below 1, got (1,)"),
        (Mutate("add_", ("w",), (0, 0), 1.0), "distinct argument indices below 1, got (0, 0)"),
        (Mutate("add_", ("w", "w"), (0, 1), 1.0), "the same handle twice ('w')"),
        (Mutate("add_", ("a", "b", "b", "a"), (0, 1, 2, 3), 1.0), "the same handle twice ('a')"),
    ],
)
def test_make_trace_checks_values_as_load_log_does(tmp_path, bad, fragment):
    """make_trace (a "checked Trace") ran only the name checks: an ALIAS out of range was
    an IndexError in a replay, a negative MEMORY replayed with wrong peaks, and write_log
    wrote logs load_log refuses. The error names the instruction and the value, in the
    words of load_log's, which share the checks."""
    with pytest.raises(sim.TraceError) as info:
        sim.make_trace([W, bad], "made")
    label = type(bad).__name__ + " " + repr(bad.op)
    assert str(info.value).startswith(f"made: instruction 1 ({label}): ")
    assert fragment in str(info.value)


def test_the_log_reader_words_a_bad_value_as_make_trace_does(tmp_path):
    write_rows(tmp_path / "bad.log", [*const("w", 4), *call("f", ["w"], [("a", 8, 1)])])
    with pytest.raises(sim.TraceError) as read:
        sim.load_log(tmp_path / "bad.log")
    with pytest.raises(sim.TraceError) as made:
        sim.make_trace([W, Call("f", ("w",), (Result("a", 8, alias=1),), 10.0)])
    assert read.value.line == 5
    assert read.value.message == made.value.message.split(": ", 1)[1]


def test_what_make_trace_accepts_write_log_reads_back(tmp_path):
    trace = sim.make_trace(
        [W, Call("f", ("w",), (Result("a", 8), Result("v", 4, alias=0)), 2, workspace=3)]
    )
    sim.write_log(trace, tmp_path / "t.log")
    again = sim.load_log(tmp_path / "t.log")
    assert [vars_of(i) | {"line": 0} for i in again.instructions[1:]] == [
        vars_of(i) for i in trace.instructions
    ]


def test_names_can_be_reused_after_release():
    trace = sim.make_trace(
        [
            Constant("c", 8),
            Call("f", ("c",), (Result("r", 8),), 1.0),
            Release("r"),
            Call("f", ("c",), (Result("r", 8),), 1.0),
            Copy("q", "r"),
            Mutate("g_", ("q", "c"), (0,), 1.0),
        ]
    )
    assert trace.outputs == ("c", "r", "q")
    assert trace.ops == 3


def test_shared_logs_load(shared_traces):
    for name, ops in (("unet-6", 247), ("resnet32-56", 286)):
        trace = sim.load_log(shared_traces / f"{name}.log")
        assert trace.ops == ops
        assert trace.total_compute > 0 and trace.constant_bytes > 0
        assert len(trace.outputs) > 0
        unbounded = baseline(trace)
        assert unbounded.constant_floor <= unbounded.bottleneck <= unbounded.peak_memory
        assert not math.isnan(unbounded.peak_memory)


def test_constant_annotation_round_trips_and_pins_the_value(tmp_path):
    trace = sim.make_trace(
        [
            Constant("x", 10),
            Call("f", ("x",), (Result("a", 100),), 1.0),
            MakeConstant("a"),
            Call("g", ("x",), (Result("b", 100),), 1.0),
            Release("b"),
            Call("h", ("x",), (Result("c", 100),), 1.0),
        ]
    )
    sim.write_log(trace, tmp_path / "k.log")
    assert (
        '{"ANNOTATION":"CONSTANT","INSTRUCTION":"ANNOTATE","NAME":"a"}'
        in (tmp_path / "k.log").read_text()
    )
    again = sim.load_log(tmp_path / "k.log")
    assert again.instructions[3] == MakeConstant("a", line=again.instructions[3].line)
    assert baseline(trace).constant_floor == 110
    # a is a constant now: at 209 bytes, computing b cannot evict it
    assert sim.simulate(trace, budget=209).status == "oom"
    assert sim.simulate(trace, budget=209, outputs=False).status == "oom"
    plain = sim.make_trace([i for i in trace.instructions if not isinstance(i, MakeConstant)])
    assert sim.simulate(plain, budget=209, outputs=False).status == "ok"
