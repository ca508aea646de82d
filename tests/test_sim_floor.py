"""The physical floor of a trace (``sim.floor``) and the simulator's out-of-memory message."""

from minidtr import sim
from minidtr.sim.simulator import baseline
from minidtr.sim.trace import Call, Constant, Release, Result


def small_trace():
    # constants: w (10) alive throughout, then v (30) joins; the op "big" needs its input a
    # (100) and its output b (200) at once, with only w alive: 10 + 300 = 310.
    return sim.make_trace(
        [
            Constant("w", 10),
            Call("f", ("w",), (Result("a", 100),), 1.0),
            Call("big", ("a",), (Result("b", 200),), 1.0),
            Release("a"),
            Call("g", ("b",), (Result("c", 50),), 1.0),
            Release("b"),
            Constant("v", 30),
            Call("h", ("c", "v"), (Result("d", 50),), 1.0),
            Release("c"),
        ]
    )


def test_floor_parts_on_a_hand_built_trace():
    trace = small_trace()
    f = sim.floor(trace)
    assert f.peak == baseline(trace).peak_memory == 310
    assert f.constants == 40
    assert (f.working_set, f.working_set_op) == (300, "big")
    assert (f.bytes, f.op) == (310, "big")
    assert f.ratio == 1.0
    assert "floor 310 B" in f.describe()


def test_no_budget_below_the_floor_runs_and_the_error_says_so():
    trace = small_trace()
    f = sim.floor(trace)
    for heuristic in ("dtr", "lru", "msps"):
        below = sim.simulate(trace, budget=f.bytes - 1, heuristic=heuristic)
        assert below.status == "oom"
        assert "below the trace's floor 310 B" in below.error
        assert sim.simulate(trace, budget=f.bytes, heuristic=heuristic).status == "ok"


def test_oom_above_the_floor_does_not_blame_the_floor():
    # two outputs must both stay resident (pinned at the end) beyond the floor of one op
    trace = sim.make_trace(
        [
            Constant("w", 10),
            Call("f", ("w",), (Result("a", 100),), 1.0),
            Call("g", ("w",), (Result("b", 100),), 1.0),
        ]
    )
    f = sim.floor(trace)
    assert f.bytes == 110 and f.constants == 10
    result = sim.simulate(trace, budget=150)
    assert result.status == "oom"
    assert "floor" not in result.error


def test_floor_of_the_shared_logs(shared_traces):
    trace = sim.load_log(shared_traces / "resnet32-56.log")
    f = sim.floor(trace)
    assert f.constants < f.bytes < f.peak
    assert f.constants_ratio < 0.01 and 0.03 < f.ratio < 0.1
    assert f.working_set_op == "cudnn_convolution_backward"


def test_the_floor_is_claimed_as_one_only_where_it_is_one():
    """The floor is measured with eager deallocation (a floor for ignore too); under banish
    a run can fit below it, so the message does not claim that no policy can."""
    from minidtr.cli_report import floor_verdict
    from minidtr.sim.floors import below_floor_message

    trace = small_trace()
    assert "no eviction policy can run it" in below_floor_message(trace, 300)
    banish = below_floor_message(trace, 300, "banish")
    assert "no eviction policy" not in banish and "under eager deallocation" in banish
    assert below_floor_message(trace, 310, "banish") is None

    class Floors:
        floor, floor_ratio = 310, 0.9

    assert floor_verdict(300, Floors()).endswith("no policy can fit it; give it 310 bytes or more")
    assert "banish may fit lower" in floor_verdict(300, Floors(), "banish")
