"""Floors, the budget search and the live runtime against the simulator on model traces."""

import dataclasses
import gc
import math

import pytest

from minidtr import sim
from minidtr.budget_search import find_budget, probe, record_trace, simulate_probe
from minidtr.models import MODELS
from minidtr.sim.trace import STEP, Annotate
from minidtr.testing import isolated_allocator
from minidtr.training import TrainConfig, measure_unbounded

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def fresh_allocator():
    with isolated_allocator():
        yield
    gc.collect()


def test_floors_of_the_live_run_match_the_simulators():
    """The meter on the live run and the simulator's unbounded replay of its trace find the
    same constants and the same one-op floor."""
    config = TrainConfig("lstm", size="tiny", steps=2, cost="flops")
    floors = measure_unbounded(config)
    assert 0 < floors.constants <= floors.floor < floors.peak
    unbounded = sim.baseline(record_trace(config))
    assert unbounded.peak_memory == pytest.approx(floors.peak, rel=0.01)
    assert unbounded.constant_floor == pytest.approx(floors.constants, rel=0.01)
    assert unbounded.bottleneck == pytest.approx(floors.floor, rel=0.01)


@pytest.mark.parametrize("name", ["lstm", "resnet"])
def test_live_runtime_and_simulator_agree(name):
    """Same budget in bytes, halfway between the floor and the peak: the same status, and
    slowdowns within 2%, with rematerialization actually happening; below the floor the
    search does not run it and the simulator cannot fit it either."""
    config = TrainConfig(name, size="tiny", steps=2, cost="flops", max_slowdown=4.0)
    floors = measure_unbounded(config)
    trace = record_trace(config)
    ratio = (1.0 + floors.floor_ratio) / 2
    live = probe(config, ratio, floors)
    replay = simulate_probe(trace, config, ratio, floors)
    assert live.status == replay.status == "ok"
    assert live.remats > 0
    assert replay.slowdown == pytest.approx(live.slowdown, rel=0.02)
    below = 0.95 * floors.floor_ratio
    assert probe(config, below, floors).status == "below floor"
    assert simulate_probe(trace, config, below, floors).status in ("oom", "thrash")


def test_the_guard_expects_each_steps_compute_live_and_in_the_simulator(
    monkeypatch, replay_slowdowns
):
    """A run whose slowdown so far passes the limit only inside a step (here the tiny
    MLP near its floor, over 2% higher mid-run than at the end) trains with a limit
    between the two, live and replayed alike: both measure recomputation against the
    compute expected by the end of the step (the first step's from the unbounded run,
    marked ANNOTATE STEP in the trace). Without the marks the replay stops it, as the
    guard used to."""
    config = TrainConfig("mlp", size="tiny", steps=2, cost="flops")
    floors = measure_unbounded(config)
    trace = record_trace(config)
    assert len(trace.step_costs) == 2 and trace.step_costs[0] == floors.first_step_cost
    assert sum(trace.step_costs) == trace.total_compute
    seen = replay_slowdowns
    for share in (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4):  # the tightest that shows it
        seen.clear()
        budget = int((floors.floor_ratio + share * (1 - floors.floor_ratio)) * floors.peak)
        free = sim.simulate(trace, budget=budget, thrash=None, outputs=False)
        if free.status == "ok" and max(seen) > free.slowdown * 1.02:
            break
    monkeypatch.undo()
    worst, final = max(seen), free.slowdown
    assert free.status == "ok" and worst > final * 1.02
    config = dataclasses.replace(config, max_slowdown=(worst + final) / 2)
    ratio = budget / floors.peak
    live = probe(config, ratio, floors)
    replayed = simulate_probe(trace, config, ratio, floors)
    assert live.status == replayed.status == "ok"
    assert live.slowdown == pytest.approx(final) and replayed.slowdown == pytest.approx(final)
    unmarked = sim.make_trace([i for i in trace.instructions if i != Annotate(STEP)])
    assert simulate_probe(unmarked, config, ratio, floors).status == "thrash"


def test_find_budget_brackets_the_lowest_ratio():
    config = TrainConfig("mlp", size="tiny", steps=2, cost="flops")
    search = find_budget(config, max_slowdown=2.0)
    best = search.lowest
    assert best is not None and best.slowdown <= 2.0
    assert best.budget >= search.unbounded.floor
    lower = [p for p in search.probes if p.ratio < best.ratio]
    assert lower and all(p.status != "ok" for p in lower)
    assert best.ratio - max(p.ratio for p in lower) <= 0.011  # bisected to 0.01
    ratios = [p.ratio for p in search.probes]
    assert ratios == sorted(ratios, reverse=True) and len(set(ratios)) == len(ratios)
    skipped = [p for p in search.probes if p.status == "below floor"]
    assert all(math.isnan(p.slowdown) and p.budget < search.unbounded.floor for p in skipped)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_small_presets_are_in_the_papers_regime(name):
    """Constants at most ~10% of the unbounded peak and the floor (constants plus the largest
    op) at most a quarter of it."""
    floors = measure_unbounded(TrainConfig(name, size="small", cost="flops"))
    assert floors.constant_ratio <= 0.10, floors
    assert floors.floor_ratio <= 0.25, floors
