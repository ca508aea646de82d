"""RuntimeOptions: one object for a runtime's settings, taken by the Runtime, TrainConfig,
the simulator and both command lines, with the keyword forms still working."""

import dataclasses
import math
import warnings

import numpy as np
import pytest

import minidtr as md
from minidtr import sim
from minidtr.cli import build_parser, runtime_options
from minidtr.runtime.options import OPTION_NAMES, SWITCHES, RuntimeOptions
from minidtr.sim.experiments import chain_trace
from minidtr.sim.simulator import Replayer
from minidtr.training import ConfigError, TrainConfig


def test_options_check_and_normalize_as_the_runtime_did():
    options = RuntimeOptions(budget=1000.7, max_slowdown=3)
    assert options.budget == 1000 and isinstance(options.max_slowdown, float)
    with pytest.raises(ValueError, match="budget must be >= 0"):
        RuntimeOptions(budget=-1)
    with pytest.raises(TypeError, match="budget must be a number"):
        RuntimeOptions(budget="1M")
    with pytest.raises(ValueError, match="budget is a number of bytes, got 0.3: for a fraction"):
        md.Runtime(budget=0.3)  # a ratio where bytes were meant
    assert md.Runtime(budget=1.5).budget == 1  # whole bytes, rounded down (documented)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a float16 compared with 2**63 overflowed in NumPy
        assert RuntimeOptions(budget=np.float16(1000.0)).budget == 1000
    assert RuntimeOptions(budget=np.int64(2**62)).budget == 2**62
    with pytest.raises(ValueError, match="unknown device 'gpu'; expected one of"):
        md.Runtime(device="gpu")
    with pytest.raises(ValueError, match="max_wall_slowdown must be > 1"):
        RuntimeOptions(max_wall_slowdown=1.0)
    with pytest.raises(ValueError, match="unknown dealloc 'lazy'"):
        RuntimeOptions(dealloc="lazy")
    with pytest.raises(ValueError, match="unknown cost 'ops'"):
        RuntimeOptions(cost="ops")
    with pytest.raises(ValueError, match="min_size is a fraction"):
        RuntimeOptions(min_size=1.0)
    with pytest.raises(ValueError, match="placement='best' acts only with fit=\"contiguous\""):
        RuntimeOptions(placement="best")  # was ignored
    assert RuntimeOptions(placement="first", fit="contiguous").placement == "first"
    for heuristic in (None, 3):  # neither a name nor an object with score()
        with pytest.raises(TypeError, match="heuristic must be a name .* got (NoneType|int)"):
            md.Runtime(heuristic=heuristic)

    class Nameless:  # a score but no name: the stats and repr would need one
        def score(self, storage, context):
            return 0.0

    with pytest.raises(TypeError, match=r"an object with a name \(a string\) .* got Nameless"):
        md.Runtime(heuristic=Nameless())
    with pytest.raises(ValueError, match="budget must be >= 0"):
        options.replace(budget=-5)  # a copy is checked again
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.budget = 5


@pytest.mark.parametrize("name", SWITCHES)
def test_a_switch_is_true_or_false(name):
    """Not any truthy value: record_events="no" turned the event log on."""
    for value in ("no", 1, None):
        with pytest.raises(TypeError, match=f"^{name} must be True or False, got {value!r}$"):
            RuntimeOptions(**{name: value})


def test_seed_and_min_size_are_numbers():
    """seed=None seeded the random heuristic from the clock; min_size="0.1" failed in a
    comparison naming neither."""
    for seed in (None, 1.5, "3", True):
        with pytest.raises(TypeError, match=f"seed must be an integer, got {seed!r}"):
            md.Runtime(seed=seed)
    assert md.Runtime(seed=-3).options.seed == -3
    with pytest.raises(TypeError, match="min_size must be a number, got '0.1'"):
        md.Runtime(min_size="0.1")


def test_runtime_keywords_and_options_are_one_thing():
    keywords = dict(budget=10**6, heuristic="lru", dealloc="banish", cost="flops", sample=True)
    made = md.Runtime(**keywords, min_size=0.1, seed=3, max_slowdown=None)
    options = RuntimeOptions(**keywords, min_size=0.1, seed=3, max_slowdown=None)
    assert made.options == options
    taken = md.Runtime.from_options(options)
    assert taken.options == options
    for name in OPTION_NAMES:  # the allocator reads the settings as plain attributes
        if name not in ("budget", "heuristic", "record_events"):
            assert getattr(taken, name) == getattr(options, name)
    assert taken.budget == 10**6 and taken.heuristic.name == "lru" and taken.events is None
    with pytest.raises(ValueError, match="unknown dealloc"):
        md.Runtime(dealloc="lazy")


def test_runtime_options_follow_the_attributes():
    rt = md.Runtime(budget=100, record_events=True)
    rt.budget = 50
    rt.max_slowdown = 3.0
    assert rt.options == RuntimeOptions(budget=50, record_events=True, max_slowdown=3.0)


def test_a_runtime_from_options_trains_as_one_from_keywords():
    def losses(runtime):
        md.manual_seed(0)
        w = md.randn((8, 8), requires_grad=True)
        x = md.randn((4, 8))
        with runtime:
            h = x
            for _ in range(6):
                h = md.tanh(h @ w)
            loss = h.sum()
            loss.backward()
            return loss.item(), w.grad.numpy().copy(), runtime.stats()["evictions"]

    keywords = losses(md.Runtime(budget=4000, heuristic="dtr", cost="flops"))
    options = losses(md.Runtime.from_options(RuntimeOptions(budget=4000, cost="flops")))
    assert keywords[0] == options[0] and (keywords[1] == options[1]).all()
    assert keywords[2] == options[2] > 0


def test_train_config_takes_options_or_their_fields():
    config = TrainConfig("mlp", size="tiny", budget=10**6, heuristic="lru", seed=2)
    assert config.options == RuntimeOptions(budget=10**6, heuristic="lru", seed=2, cost="flops")
    assert (config.heuristic, config.cost, config.seed, config.budget) == ("lru", "flops", 2, 10**6)
    given = TrainConfig("mlp", size="tiny", options=config.options)
    assert given == config
    assert TrainConfig("mlp", options=config.options, dealloc="banish").dealloc == "banish"
    probe = dataclasses.replace(config, ratio=0.5, budget=None, evaluate=False)
    assert probe.ratio == 0.5 and probe.budget is None and probe.heuristic == "lru"
    with pytest.raises(ConfigError, match="max_slowdown must be > 1"):
        TrainConfig("mlp", max_slowdown=0.5)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['budjet'\\]"):
        TrainConfig("mlp", budjet=10)
    with pytest.raises(AttributeError):
        config.nothing  # noqa: B018


def test_train_command_builds_one_options_object():
    args = build_parser().parse_args(
        ["train", "mlp", "--budget", "2M", "--heuristic", "lru", "--no-orphan-rebuild"]
        + ["--cost", "time", "--max-wall-slowdown", "none", "--seed", "4"]
    )
    options = runtime_options(args, max_slowdown=2.0)
    assert options == RuntimeOptions(
        budget=2 * 1024**2,
        heuristic="lru",
        cost="time",
        seed=4,
        max_slowdown=2.0,
        max_wall_slowdown=None,
        rebuild_orphans=False,
    )


def test_simulate_takes_options_or_keywords_alike():
    trace = chain_trace(24)
    keywords = sim.simulate(trace, ratio=0.4, heuristic="lru", sample=True, thrash=None)
    options = RuntimeOptions(heuristic="lru", sample=True)
    given = sim.simulate(trace, ratio=0.4, thrash=None, options=options)
    over = sim.simulate(trace, ratio=0.4, heuristic="lru", thrash=None, options=options)
    assert keywords.remats > 0
    for result in (given, over):
        assert (result.heuristic, result.remats, result.remat_cost, result.evictions) == (
            keywords.heuristic,
            keywords.remats,
            keywords.remat_cost,
            keywords.evictions,
        )
    budget = sim.simulate(trace, options=RuntimeOptions(budget=keywords.budget), thrash=None)
    assert budget.budget == keywords.budget
    with pytest.raises(ValueError, match="not both"):
        sim.simulate(trace, ratio=0.5, options=RuntimeOptions(budget=100))
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['cost'\\]"):
        sim.simulate(trace, cost="flops")


def test_a_replay_fixes_the_settings_it_owns():
    replayer = Replayer(100, "lru", options=RuntimeOptions(cost="flops", max_slowdown=2.0))
    try:
        runtime = replayer.runtime
        assert (runtime.budget, runtime.heuristic.name) == (100, "lru")
        assert runtime.max_slowdown is None and runtime.max_wall_slowdown is None
        assert callable(runtime.cost)  # the trace's TIME
    finally:
        replayer.close()


def test_sim_command_takes_trace_heuristics(tmp_path, capsys):
    from minidtr.sim.cli import main
    from minidtr.sim.trace import write_log

    path = tmp_path / "chain.log"
    write_log(chain_trace(16), path)
    status = main([str(path), "--ratios", "0.5", "--heuristics", "belady,dtr", "--jobs", "1"])
    assert status == 0
    out = capsys.readouterr().out
    assert "belady" in out and "dtr" in out
    assert main([str(path), "--heuristics", "belady+x"]) == 2
    assert "unknown heuristic 'belady+x'" in capsys.readouterr().err
    assert not math.isnan(sim.simulate(chain_trace(16), ratio=0.5, heuristic="belady").slowdown)
