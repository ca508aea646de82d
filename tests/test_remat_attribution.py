"""benchmarks/remat_attribution.py: its groups account for every rematerialization."""

import importlib.util
import math
import pathlib
import sys

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
