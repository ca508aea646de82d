"""The trace heuristic ``belady`` (knows each next use)."""

import math

import pytest

import minidtr as md
from minidtr import sim
from minidtr.sim.clairvoyant import Belady, next_uses, parse_variant
from minidtr.sim.experiments import chain_trace, sqrt_budget
from minidtr.sim.simulator import Replayer, baseline
from minidtr.sim.trace import (
    Annotate,
    Call,
    Constant,
    Copy,
    MakeConstant,
    Mutate,
    Release,
    Result,
)


def hand_trace():
    return sim.make_trace(
        [
            Annotate("START"),  # 0
            Constant("w", 8),  # 1: key 0
            Call("f", ("w",), (Result("a", 16),), 2.0),  # 2: key 1
            Call("view", ("a",), (Result("av", 16, alias=0),), 0.0),  # 3: av is a's storage
            Copy("b", "av"),  # 4
            Call("g", ("a", "w"), (Result("c", 16),), 3.0),  # 5: key 2
            Mutate("add_", ("c", "b"), (0,), 1.0),  # 6: c -> key 3
            Release("a"),  # 7
            Release("av"),  # 8
            MakeConstant("c"),  # 9
            Call("h", ("b",), (Result("d", 4),), 1.0),  # 10: key 4
            Release("b"),  # 11
        ]
    )


def test_next_uses_follow_views_copies_mutations_and_outputs():
    trace = hand_trace()
    uses = next_uses(trace)
    end = len(trace.instructions)
    assert uses.uses == [
        [2, 5, end],  # w: read by f and g, an output
        [3, 5, 6, 10],  # a (and its view av, and b): view, g, add_, h; released before the end
        [6],  # c before add_
        [9, end],  # c after add_: made a constant, an output
        [end],  # d
    ]
    assert uses.created == {
        1: [("w", 0)],
        2: [("a", 1)],
        5: [("c", 2)],
        6: [("c", 3)],
        10: [("d", 4)],
    }
    assert uses.clock[:7] == [0, 0, 0, 2.0, 2.0, 2.0, 5.0]
    assert uses.clock[end] == 7.0
    assert uses.next_use(1, 6) == 6 and uses.next_use(1, 7) == 10 and uses.next_use(1, 11) is None


def test_belady_knows_the_distance_to_each_next_use():
    trace = hand_trace()
    replayer = Replayer(None, "belady+none+nosize+ops", trace=trace)
    belady = replayer.informed
    assert isinstance(belady, Belady)
    for ins in trace.instructions[:6]:  # up to and including g
        replayer.step(ins)
    a = replayer.cells["a"].storage
    assert belady.position == 5
    belady.position = 6  # as while instruction 6 (add_, which reads a through b) runs
    assert belady.until_needed(a, replayer.allocator.eviction.context) == 1.0
    replayer.close()


def test_variant_names():
    assert parse_variant("belady") == ("belady", ("estar", True, "ops"))
    assert parse_variant("belady+none+nosize+time") == ("belady", ("none", False, "time"))
    for bad in ("belady+x+size+time", "belady+none+size", "learned"):
        with pytest.raises(ValueError, match="unknown heuristic"):
            parse_variant(bad)


@pytest.mark.parametrize("name", ["belady", "belady+none+nosize+ops"])
def test_the_live_runtime_refuses_trace_heuristics(name):
    with pytest.raises(ValueError, match="runs only in the simulator"):
        md.Runtime(heuristic=name)


@pytest.mark.parametrize("n", [64, 200])
def test_belady_on_a_chain_is_never_worse_than_dtr(n):
    trace = chain_trace(n)
    budget = sqrt_budget(n)
    dtr = sim.simulate(trace, budget=budget, heuristic="dtr", thrash=None)
    belady = sim.simulate(trace, budget=budget, heuristic="belady", thrash=None)
    assert dtr.status == belady.status == "ok"
    assert belady.remat_cost <= dtr.remat_cost


@pytest.mark.parametrize("heuristic", ["belady", "learned", "belady+none+nosize+ops"])
def test_trace_heuristics_stay_in_budget_and_repeat_exactly(heuristic):
    trace = chain_trace(48)
    peak = baseline(trace).peak_memory
    for ratio in (0.6, 0.4, 0.3):
        first = sim.simulate(trace, ratio=ratio, heuristic=heuristic, thrash=None)
        again = sim.simulate(trace, ratio=ratio, heuristic=heuristic, thrash=None)
        assert first.status == "ok"
        assert first.peak_memory <= int(ratio * peak)
        assert (first.remats, first.remat_cost, first.evictions) == (
            again.remats,
            again.remat_cost,
            again.evictions,
        )


def test_simulate_names_the_trace_heuristic():
    result = sim.simulate(chain_trace(16), ratio=0.5, heuristic="belady")
    assert result.heuristic == "belady" and not math.isnan(result.slowdown)
