"""``sim.frontier`` and ``minidtr sim frontier``: the lowest ratio within a slowdown."""

import math

import pytest

from minidtr import sim
from minidtr.sim.cli import main
from minidtr.sim.experiments import chain_trace
from minidtr.sim.frontier import frontier


def test_frontier_finds_the_lowest_passing_ratio_of_a_chain():
    trace = chain_trace(64)
    result = frontier(trace, max_slowdown=2.0, step=0.1, tolerance=0.01)
    best = result.lowest
    assert best is not None and best.ok and best.slowdown <= 2.0
    # every probe at or above the best ratio that was replayed agrees with simulate
    for p in result.probes:
        if p.status != "below floor":
            again = sim.simulate(trace, budget=p.budget, thrash=2.0)
            assert again.status == p.status
    # the search is tight: a probe within the tolerance below the best one failed
    failed_below = [p.ratio for p in result.probes if not p.ok and p.ratio < best.ratio]
    assert failed_below and best.ratio - max(failed_below) <= 0.01 + 1e-9
    # bisection, not a full scan: far fewer probes than 100 ratios
    assert len(result.probes) < 20


def test_probes_below_the_floor_are_not_replayed():
    trace = chain_trace(16)
    result = frontier(trace, max_slowdown=100.0, step=0.5, tolerance=0.01)
    floor = sim.floor(trace)
    for p in result.probes:
        if p.ratio * floor.peak < floor.bytes:
            assert p.status == "below floor" and math.isnan(p.slowdown) and p.remats == 0
    assert result.lowest.budget >= floor.bytes


def test_frontier_rejects_bad_arguments():
    trace = chain_trace(8)
    with pytest.raises(ValueError, match="max_slowdown"):
        frontier(trace, max_slowdown=0.5)
    with pytest.raises(ValueError, match="tolerance"):
        frontier(trace, step=0.1, tolerance=0.2)


def test_frontier_command_prints_the_table(tmp_path, capsys):
    path = tmp_path / "chain.log"
    sim.write_log(chain_trace(32), path)
    assert main(["frontier", str(path), "--max-slowdown", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "heuristic dtr, max slowdown 1.5" in out
    assert "lowest ratio within 1.5x:" in out
    assert " ok " in out
    assert main(["frontier", str(path), "--heuristic", "nope"]) == 2
    assert "unknown heuristic 'nope'" in capsys.readouterr().err
    assert main(["frontier", str(path), "--max-slowdown", "0.5"]) == 2


def test_info_states_the_floor(tmp_path, capsys):
    path = tmp_path / "chain.log"
    sim.write_log(chain_trace(8), path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "physical floor" in out and "largest single-op working set" in out
