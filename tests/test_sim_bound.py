"""The lower bound (``minidtr.sim.bound``): never above what a schedule costs.

Random small traces exercise what the relaxation must get right to stay a bound:
multi-output ops (a replay keeps one output and drops the other), kernel workspaces,
views, mutations, constants made by a CALL or by ``ANNOTATE CONSTANT`` (``IF_RESIDENT``
too), accesses and outputs held at the end. On each, at a budget anywhere from below the
physical floor to the peak, the bound (exact and with blocks of stages) is at most every
heuristic's slowdown, under every deallocation policy, and the MILP's proven optimum; and
where it says infeasible, nothing fits.
"""

import csv
import math
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_baselines import diamond

import minidtr as md
from minidtr import sim
from minidtr.runtime import registry
from minidtr.runtime.allocator import Allocator
from minidtr.sim.bound import lower_bound, needed_until, relaxation_bound
from minidtr.sim.checkmate import solve_optimal
from minidtr.sim.cli import main
from minidtr.sim.experiments import chain_trace
from minidtr.sim.graph import Graph, graph_from_trace
from minidtr.sim.simulator import baseline
from minidtr.sim.trace import Call, Constant, Copy, MakeConstant, Mutate, Release, Result
from minidtr.testing.strategies import random_programs

pytest.importorskip("scipy")

HEURISTICS = ("dtr", "dtr_eq", "dtr_local", "msps", "lru", "size", "belady")
TOLERANCE = 1e-6  # HiGHS's feasibility tolerance, relative


@st.composite
def random_traces(draw, max_ops: int = 8) -> sim.Trace:
    """A forward pass of up to ``max_ops`` random ops on one or two constants, with every
    kind of instruction the graph folds or splits, then a backward pass that reads what
    the forward pass still holds in reverse, releasing it as it goes (what makes a tight
    budget recompute)."""
    ins: list = []
    held: list[str] = []
    for c in range(draw(st.integers(1, 2))):
        ins.append(Constant(f"w{c}", draw(st.integers(1, 3))))
        held.append(f"w{c}")
    for k in range(draw(st.integers(2, max_ops))):
        args = (held[-1], *draw(st.lists(st.sampled_from(held), max_size=2)))
        ins += draw(_instruction(k, tuple(dict.fromkeys(args)), held))
        if draw(st.integers(0, 4)) == 0 and len(held) > 1:
            ins.append(Release(held.pop(draw(st.integers(0, len(held) - 2)))))
    grad = "v0" if "v0" in held else held[-1]
    for k, name in enumerate(reversed(held[draw(st.integers(0, 2)) :])):
        ins.append(Call("grad", (grad, name), (Result(f"g{k}", draw(st.integers(1, 5))),), 1.0))
        ins.append(Release(name))
        grad = f"g{k}"
    return sim.make_trace(ins, "random")


@st.composite
def _instruction(draw, k: int, args: tuple[str, ...], held: list[str]) -> list:
    kind = draw(st.sampled_from(["op", "op", "pair", "view", "mutate", "read", "const", "make"]))
    size = st.integers(1, 8)
    cost = float(draw(st.integers(0, 4)))
    name = f"v{k}"
    if kind == "mutate":
        return [Mutate("add_", args, (0,), cost)]
    if kind == "read":
        return [Call("read", args, (), 0.0)]
    if kind == "make":
        made = [MakeConstant(args[0], if_resident=draw(st.booleans()))]
        return made if not args[0].startswith("w") else []
    if kind == "view":
        held.append(name)
        return [Call("view", args, (Result(name, 1, alias=0),), cost)]
    results = [Result(name, draw(size))]
    if kind == "pair":
        results.append(Result(f"{name}b", draw(size)))
    held.extend(r.name for r in results)
    workspace = draw(st.sampled_from([0, 0, 2, 5]))
    call = Call(kind, args, tuple(results), cost, constant=kind == "const", workspace=workspace)
    copies = [Copy(f"{name}c", name)] if draw(st.booleans()) else []
    held.extend(c.dst for c in copies)
    return [call, *copies]


def _budget(trace: sim.Trace, fraction: float) -> int:
    """From a little below the physical floor (fraction 0) to the peak (fraction 1)."""
    base = baseline(trace)
    low = max(1, base.bottleneck - 2)
    return int(low + fraction * (base.peak_memory - low))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(trace=random_traces(), fraction=st.floats(0.0, 1.0))
def test_the_bound_is_at_most_every_heuristic_and_the_optimum(trace, fraction):
    budget = _budget(trace, fraction)
    graph = graph_from_trace(trace)
    total = trace.total_compute
    bounds = [relaxation_bound(graph, budget, block=block, total=total) for block in (1, 2, 3)]
    replays = [
        sim.simulate(trace, budget=budget, heuristic=h, dealloc=d, thrash=None)
        for h in HEURISTICS
        for d in ("eager", "banish", "ignore")
    ]
    optimum = solve_optimal(graph, budget, time_limit=20)
    for bound in bounds:
        assert bound.status in ("ok", "infeasible"), bound
        if bound.status == "infeasible":  # then nothing fits
            assert all(r.status == "oom" for r in replays)
            assert optimum.status == "infeasible"
            continue
        for r in replays:
            if r.status == "ok":
                assert bound.slowdown <= r.slowdown * (1 + TOLERANCE), (bound, r.heuristic)
        if optimum.status == "optimal":
            assert bound.cost <= optimum.cost * (1 + TOLERANCE) + TOLERANCE, (bound, optimum)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(program=random_programs(max_ops=8), fraction=st.floats(0.0, 1.0))
def test_on_recorded_programs_the_bound_is_at_most_every_heuristic(program, fraction):
    """Live minidtr runs of random programs (views, reads, real kernels' workspaces),
    recorded with the flops cost, forward and backward."""
    saved = registry.ALLOCATORS.get("cpu")
    registry.ALLOCATORS["cpu"] = Allocator("cpu")  # nothing left over from other tests
    try:
        with md.Runtime(cost="flops"), sim.record() as recorder:
            program()
    finally:
        registry.ALLOCATORS.pop("cpu")
        if saved is not None:
            registry.ALLOCATORS["cpu"] = saved
    trace = recorder.trace()
    budget = _budget(trace, fraction)
    bound = lower_bound(trace, budget=budget)
    for h in HEURISTICS:
        replay = sim.simulate(trace, budget=budget, heuristic=h, thrash=None)
        if bound.status == "infeasible":
            assert replay.status == "oom"
        elif replay.status == "ok":
            assert bound.slowdown <= replay.slowdown * (1 + TOLERANCE), (bound, h)


@pytest.mark.parametrize("longest", [8, pytest.param(12, marks=pytest.mark.slow)])
@settings(max_examples=15, deadline=None, derandomize=True)
@given(data=st.data())
def test_on_a_chain_the_exact_bound_is_the_optimum_or_below(longest, data):
    """(Chains of up to 12 ops under -m slow: the MILP takes up to 20 s on one.)"""
    n = data.draw(st.integers(2, longest), label="n")
    fraction = data.draw(st.floats(0.0, 1.0), label="fraction")
    trace = chain_trace(n)
    budget = max(3, int(3 + fraction * (baseline(trace).peak_memory - 3)))
    graph = graph_from_trace(trace)
    bound = relaxation_bound(graph, budget, total=trace.total_compute)
    optimum = solve_optimal(graph, budget, time_limit=20)
    # a loaded machine may stop the solver at an incumbent: an upper bound on the optimum,
    # so still above the bound
    assert optimum.status in ("optimal", "incumbent")
    assert bound.cost <= optimum.cost + TOLERANCE


def test_the_bound_on_a_hand_built_graph():
    """a (2 bytes) feeds b -> c and, with c, d: within 3 bytes a must go while b and c run
    and come back for d (the optimum pays 1 more); the relaxation pays at least half of it,
    and nothing runs within 2 (b alone needs 3)."""
    graph = diamond()
    assert relaxation_bound(graph, 4).cost == 12.0
    tight = relaxation_bound(graph, 3)
    assert tight.found and 12.5 - TOLERANCE <= tight.cost <= 13.0
    assert relaxation_bound(graph, 2).status == "infeasible"


def test_workspaces_count_against_the_budget():
    """The same kernel with a workspace needs more room: what fitted no longer does."""
    plain, spacious = Graph(), Graph()
    for graph, workspace in ((plain, 0), (spacious, 2)):
        graph.add("a", 1.0, 2, ())
        graph.add("b", 1.0, 1, (0,), workspace=workspace)
    assert relaxation_bound(plain, 3).found
    assert relaxation_bound(spacious, 3).status == "infeasible"


def test_a_trace_of_empty_storages_is_bounded_within_a_zero_budget(tmp_path, capsys):
    """Every storage is 0 bytes, so any ratio's budget is 0 and nothing needs memory (the
    program is written in units of the budget: it was a division by zero)."""
    trace = sim.make_trace(
        [Constant("w", 0), Call("f", ("w",), (Result("a", 0),), 1.0)], "empty-storages"
    )
    bound = lower_bound(trace, 0.5)
    assert (bound.budget, bound.status, bound.slowdown) == (0, "ok", 1.0)
    sim.write_log(trace, tmp_path / "zs.log")
    argv = ["bound", str(tmp_path / "zs.log"), "--ratios", "0.5", "--jobs", "1"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[3:5] == ["ok", "1.000"]


def test_needed_until_follows_descendants_and_held_storages():
    graph = Graph()
    graph.add("a", 1.0, 1, ())
    graph.add("b", 1.0, 1, (0,))
    graph.add("c", 1.0, 1, ())
    graph.add("d", 1.0, 1, (1,))
    graph.outputs = {2}
    assert needed_until(graph) == [3, 3, 4, 3]


def test_lower_bound_takes_a_ratio_or_a_budget_and_checks_it():
    trace = chain_trace(6)
    peak = baseline(trace).peak_memory
    by_ratio = lower_bound(trace, 0.6)
    assert by_ratio.budget == int(0.6 * peak)
    assert lower_bound(trace, budget=by_ratio.budget).cost == by_ratio.cost
    assert lower_bound(trace, 1.0).slowdown == pytest.approx(1.0)
    with pytest.raises(ValueError, match="ratio"):
        lower_bound(trace, 1.5)
    with pytest.raises(ValueError, match="ratio or a budget"):
        lower_bound(trace)


def test_the_bound_is_at_most_dtr_on_a_bundled_trace():
    trace = sim.load_log(sim.bundled_traces(["unet"])[0])
    bound = lower_bound(trace, 0.3)
    dtr = sim.simulate(trace, 0.3, heuristic="dtr", thrash=None)
    assert bound.found and dtr.status == "ok"
    assert 1.0 < bound.slowdown <= dtr.slowdown
    assert bound.block == 1  # a small graph: the exact relaxation
    assert not math.isnan(bound.solve_time)


def test_the_command_prints_a_row_per_trace_and_ratio(tmp_path, capsys):
    sim.write_log(chain_trace(8), tmp_path / "c.log")
    argv = ["bound", str(tmp_path / "c.log"), "--ratios", "1,0.5,0.1", "--heuristics", "dtr"]
    assert main([*argv, "--jobs", "1", "--csv", str(tmp_path / "b.csv")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == [
        "trace", "nodes", "ratio", "status", "bound", "dtr", "block", "solve_time"
    ]  # fmt: skip
    assert lines[2].split()[3:5] == ["ok", "1.000"]
    assert lines[4].split()[3:5] == ["infeasible", "-"]  # below one op's needs
    with open(tmp_path / "b.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["ok", "ok", "infeasible"]
    assert float(rows[1]["bound"]) <= float(rows[1]["dtr"])


@pytest.mark.parametrize("command", ["bound", "optimal"])
def test_without_scipy_the_solver_commands_say_so_in_one_line(
    tmp_path, capsys, monkeypatch, command
):
    sim.write_log(chain_trace(4), tmp_path / "c.log")
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    assert main([command, str(tmp_path / "c.log")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "needs SciPy (pip install 'minidtr[scipy]')" in captured.err


def test_sim_optimal_shows_the_bound_beside_the_optimum(tmp_path, capsys):
    sim.write_log(chain_trace(6), tmp_path / "c.log")
    argv = ["optimal", str(tmp_path / "c.log"), "--ratios", "0.6", "--bound", "--jobs", "1"]
    assert main([*argv, "--csv", str(tmp_path / "o.csv")]) == 0
    out = capsys.readouterr().out
    assert "bound" in out.splitlines()[0] and "bound: at most every schedule's" in out
    with open(tmp_path / "o.csv") as f:
        (row,) = csv.DictReader(f)
    assert row["status"] == "optimal"
    assert float(row["bound"]) <= float(row["best"]) + TOLERANCE
    assert float(row["bound"]) <= float(row["dtr"]) + TOLERANCE


def test_an_incumbent_is_labelled_an_upper_bound():
    from minidtr.sim.solver_cli import _optimal_notes

    assert _optimal_notes([{"status": "optimal"}]) == ""
    note = _optimal_notes([{"status": "optimal"}, {"status": "incumbent"}])
    assert (
        note.startswith("incumbent:") and "an upper bound on the optimum, not the optimum" in note
    )
