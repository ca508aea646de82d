"""benchmarks/remat_attribution.py: its groups account for every rematerialization."""

import importlib.util
import math
import pathlib
import sys

import numpy as np
import pytest

import minidtr as md
from minidtr import sim
from minidtr.sim.experiments import UNIT, chain_trace, sqrt_budget

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_benchmark():
    """The script as a module; its folder on the path, as when it runs (it imports
    ``interrupts`` from there)."""
    path = ROOT / "benchmarks" / "remat_attribution.py"
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location("remat_attribution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("heuristic", ["dtr", "belady"])
def test_groups_add_up_to_the_replays_recomputation(heuristic):
    attribute = load_benchmark().attribute
    trace = chain_trace(60)
    options = md.RuntimeOptions(budget=sqrt_budget(60) * UNIT)
    status, slowdown, groups = attribute(trace, options, heuristic)
    plain = sim.simulate(trace, options=options, heuristic=heuristic, thrash=None, outputs=False)
    assert status == plain.status == "ok"
    assert slowdown == pytest.approx(plain.slowdown) and slowdown > 1.2
    assert math.isclose(sum(groups.values()), slowdown - 1.0, rel_tol=1e-9)
    # every rebuild in a chain's backward is asked for by the gradient op reading a layer
    assert all(key.endswith("<- layer_grad") or "orphans" in key for key in groups), groups


def test_a_multi_output_replay_counts_once():
    """Recomputing ``lstm_cell`` refills its two outputs in one replay, one event each:
    the groups count the op's cost once, so they still add up to the slowdown. Recorded
    under the ``flops`` cost model: measured times make the slowdown the machine's load's."""
    attribute = load_benchmark().attribute
    rng = np.random.default_rng(0)
    with md.Runtime(cost="flops"), sim.record() as rec:
        x = md.tensor(rng.random((64, 64)), dtype=md.float32, requires_grad=True)
        h, c = md.tanh(x[:, :16]), x[:, 16:32]
        for _ in range(8):
            h, c = md.lstm_cell(md.concat([h, h, h, h], axis=1) * x, c)
        (h * c).sum().backward()
    trace = rec.trace()
    peak = sim.simulate(trace, outputs=False).peak_memory
    options = md.RuntimeOptions(budget=int(0.45 * peak))
    status, slowdown, groups = attribute(trace, options, "dtr")
    assert status == "ok" and slowdown > 1.05
    assert math.isclose(sum(groups.values()), slowdown - 1.0, rel_tol=1e-9)
