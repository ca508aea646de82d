"""The static baselines: revolve and Chen's sqrt(N) for chains, the optimal schedule (MILP)."""

import math
import os

import numpy as np
import pytest

from minidtr import sim
from minidtr.sim.chain import (
    chen_schedule,
    optimal_forward_steps,
    revolve_forward_steps,
    revolve_schedule,
    run_schedule,
)
from minidtr.sim.checkmate import check_schedule, greedy_schedule, solve_optimal
from minidtr.sim.experiments import chain_trace
from minidtr.sim.graph import Graph, graph_from_trace
from minidtr.sim.simulator import baseline
from minidtr.sim.trace import Call, Constant, Copy, MakeConstant, Release, Result

pytest.importorskip("scipy")

# ---- revolve and Chen -----------------------------------------------------------------------


def test_revolve_closed_form_matches_dynamic_programming_and_the_schedule():
    for slots in range(1, 7):
        for length in range(1, 61):
            best = revolve_forward_steps(length, slots)
            assert best == optimal_forward_steps(length, slots), (length, slots)
            run = run_schedule(length, revolve_schedule(length, slots), slots=slots)
            assert run.forward_steps == best, (length, slots)
            assert run.max_slots <= slots


def test_revolve_known_values():
    assert revolve_forward_steps(10, 1) == 45  # l(l-1)/2: restart from x_0 every time
    assert revolve_forward_steps(10, 10) == 9  # one sweep, everything stored
    assert revolve_forward_steps(10, 3) == 15  # beta(3,1)=4 < 10 <= beta(3,2)=10: 2*10-5
    # many slots and a long chain: the schedule is built without recursion
    run = run_schedule(3000, revolve_schedule(3000, 3000), slots=3000)
    assert run.forward_steps == 2999


def test_chen_sqrt_n_counts():
    for n, k in ((100, 10), (400, 20), (97, 10), (10, 3)):
        run = run_schedule(n, chen_schedule(n, k))
        starts = list(range(0, n, k))
        expected = starts[-1] + sum(min(a + k, n) - 1 - a for a in starts)
        assert run.forward_steps == expected
        # reversing segment m holds checkpoints 0..m and the segment's other states
        assert run.max_slots == max(m + 1 + min(a + k, n) - 1 - a for m, a in enumerate(starts))
    assert run_schedule(100, chen_schedule(100)).forward_steps == 180  # default k = 10


@pytest.mark.parametrize(
    "function, args, got",
    [
        (optimal_forward_steps, (5, 0), "5 and 0"),  # returned 4 (one slot takes 10)
        (optimal_forward_steps, (5, -1), "5 and -1"),
        (optimal_forward_steps, (0, 3), "0 and 3"),  # was min() of an empty sequence
        (revolve_forward_steps, (2.5, 2), "2.5 and 2"),  # returned 1.5
        (revolve_forward_steps, (5, 0), "5 and 0"),
        (revolve_schedule, (4, True), "4 and True"),
        (chen_schedule, (3, -1), "3 and -1"),  # returned []
        (chen_schedule, (5, 0), "5 and 0"),  # used the default segment
        (chen_schedule, (0,), "got 0"),
        (run_schedule, (0, []), "got 0"),
        (run_schedule, (3, [], 0), "3 and 0"),
    ],
)
def test_chain_functions_refuse_what_is_not_a_chain(function, args, got):
    with pytest.raises(ValueError) as info:
        function(*args)
    message = str(info.value)
    assert message.startswith(f"{function.__name__}: need integers length >= 1")
    assert message.endswith(got) and "\n" not in message


def test_run_schedule_rejects_bad_schedules():
    with pytest.raises(ValueError, match="expected step 3"):
        run_schedule(3, [("advance", 1), ("reverse", 2)])
    with pytest.raises(ValueError, match="only 1"):
        run_schedule(3, [("advance", 1), ("store", 1)], slots=1)
    with pytest.raises(ValueError, match="not reversed"):
        run_schedule(2, [("advance", 1), ("reverse", 2)])


# ---- the graph of a trace -------------------------------------------------------------------


def test_graph_from_trace_folds_views_merges_tuples_and_drops_constants():
    trace = sim.make_trace(
        [
            Constant("w", 8),
            Call("f", ("w",), (Result("a", 10),), 3.0),
            Call("view", ("a",), (Result("v", 10, 0),), 0.5),
            Call("pair", ("v", "w"), (Result("p", 4), Result("q", 6)), 2.0),
            Copy("q2", "q"),
            Release("a"),
            Call("read", ("q2",), (), 0.0),
            Call("g", ("p", "v"), (Result("b", 1),), 1.0),
            Call("grad", ("b",), (Result("gw", 8),), 1.0),
            MakeConstant("gw"),
            Release("v"),
            Release("p"),
            Release("q"),
            Release("q2"),
        ]
    )
    graph = graph_from_trace(trace)
    assert graph.labels == ["f", "pair", "read", "g", "grad"]
    assert graph.size == [10, 10, 0, 1, 8]
    assert graph.deps == [(), (0,), (1,), (0, 1), (3,)]
    assert graph.folded_cost == 0.5
    assert graph.compute + graph.folded_cost == trace.total_compute
    assert graph.outputs == {3}  # b; gw became a constant
    # w; gw, made a constant after the last node (grad) that computed it, is in that
    # stage's size already, and is not charged again as a constant
    assert graph.constants == [8, 8, 8, 8, 8]
    # storage by storage, for the lower bound: pair's two outputs, who reads which
    assert graph.parts == [(10,), (4, 6), (), (1,), (8,)]
    assert graph.reads == [(), ((0, 0),), ((1, 1),), ((0, 0), (1, 0)), ((3, 0),)]
    assert graph.held == {(3, 0)}
    assert graph.sure_constants == [8, 8, 8, 8, 8] and graph.end_constants == 16


def test_sure_constants_are_those_a_name_refers_to():
    """A released constant can outlive its name while a recipe needs it (the unbounded
    replay keeps it), not under every policy; a value made constant IF_RESIDENT may never
    be one. Neither counts as a sure constant."""
    trace = sim.make_trace(
        [
            Constant("w", 8),
            Call("f", ("w",), (Result("a", 2),), 1.0),
            Release("w"),
            Call("g", ("a",), (Result("b", 4),), 1.0),
            MakeConstant("b", if_resident=True),
            Call("h", ("a",), (Result("c", 1),), 1.0),
        ]
    )
    graph = graph_from_trace(trace)
    assert graph.constants == [8, 8, 12]
    assert graph.sure_constants == [8, 0, 0] and graph.stage_constants == [0, 0, 0]
    assert graph.end_constants == 0


def test_the_optimal_schedule_counts_kernel_workspaces():
    """b's kernel reserves its workspace with its output, a (2 bytes) as its input: within
    5 bytes that leaves room for a workspace of 2, not 3; the peak counts it."""
    for workspace, status in ((0, "optimal"), (2, "optimal"), (3, "infeasible")):
        graph = Graph()
        graph.add("a", 1.0, 2, ())
        graph.add("b", 1.0, 1, (0,), workspace=workspace)
        graph.outputs = {1}
        result = solve_optimal(graph, 5)
        assert result.status == status, workspace
        if result.found:
            assert result.peak == 3 + workspace


# ---- the optimal schedule --------------------------------------------------------------------


def diamond() -> Graph:
    """a (size 2) feeds b -> c (expensive) and, with c, d (size 0): at a budget of 3 the
    best schedule drops a while b and c run and recomputes it (cost 1) for d."""
    graph = Graph()
    graph.add("a", 1.0, 2, ())
    graph.add("b", 5.0, 1, (0,))
    graph.add("c", 5.0, 1, (1,))
    graph.add("d", 1.0, 0, (0, 2))
    graph.outputs = {3}
    return graph


def test_optimal_schedule_on_a_hand_built_graph():
    graph = diamond()
    roomy = solve_optimal(graph, 4)
    assert roomy.status == "optimal" and roomy.cost == 12.0 and roomy.peak <= 4
    tight = solve_optimal(graph, 3)
    assert tight.status == "optimal" and tight.cost == 13.0 and tight.gap == 0.0
    R, S = tight.schedule
    assert R[:, 0].sum() == 2  # a computed twice
    assert R.sum() == 5
    assert check_schedule(graph, R, S) == (13.0, 3)
    assert solve_optimal(graph, 2).status == "infeasible"


def test_constants_count_against_the_budget():
    graph = diamond()
    graph.constant_bytes = 1
    assert solve_optimal(graph, 4).cost == 13.0
    assert solve_optimal(graph, 5).cost == 12.0


def test_greedy_schedule_is_feasible_and_no_better_than_the_optimum():
    graph = graph_from_trace(chain_trace(12))
    for budget in (4, 5, 7, 12):
        schedule = greedy_schedule(graph, budget)
        assert schedule is not None
        cost, peak = check_schedule(graph, *schedule)
        assert peak <= budget and cost >= graph.compute
    best = solve_optimal(graph, 7, time_limit=30)
    assert best.found and best.cost <= check_schedule(graph, *greedy_schedule(graph, 7))[0]
    assert best.bound <= best.cost


def test_time_limit_bounds_the_whole_solve():
    """The limit covers building, the solver and the relaxation's fallback: on a graph too
    large to solve in time, the call ends a little after it (it took over twice as long
    when each solver call got the whole limit)."""
    import time
    from pathlib import Path

    import minidtr.sim

    trace = sim.load_log(Path(minidtr.sim.__file__).parent / "traces" / "mlp.log.gz")
    graph = graph_from_trace(trace)
    started = time.perf_counter()
    result = solve_optimal(graph, int(0.7 * baseline(trace).peak_memory), time_limit=4)
    elapsed = time.perf_counter() - started
    assert result.status == "incumbent" and result.found  # an upper bound, not the optimum
    assert elapsed < 4 + 3.5, f"solve_optimal ran {elapsed:.1f} s at a limit of 4 s"


def test_check_schedule_rejects_a_missing_dependency():
    graph = diamond()
    R = np.eye(4, dtype=np.int8)
    S = np.zeros((4, 4), dtype=np.int8)
    with pytest.raises(AssertionError, match="runs before"):
        check_schedule(graph, R, S)


def test_optimal_is_no_worse_than_dtr_on_a_chain():
    trace = chain_trace(8)
    graph = graph_from_trace(trace)
    for budget in (4, 6):
        dtr = sim.simulate(trace, budget=budget, thrash=None)
        opt = solve_optimal(graph, budget, time_limit=30)
        assert opt.status == "optimal"
        assert opt.cost <= dtr.compute + dtr.remat_cost
    assert solve_optimal(graph, 8).cost == graph.compute  # enough memory: no recompute


def test_compare_with_optimal_rows():
    from minidtr.sim.sweep import compare_with_optimal

    rows = compare_with_optimal(chain_trace(8), [1.0, 0.5], ["dtr", "lru"], time_limit=20)
    assert [r["ratio"] for r in rows] == [1.0, 0.5]
    full = rows[0]
    assert full["status"] == "optimal" and full["best"] == 1.0 and full["dtr"] == 1.0
    half = rows[1]
    assert half["best"] <= half["dtr"] + 1e-12
    assert half["lower"] <= half["best"]
    assert math.isclose(half["dtr/best"], half["dtr"] / half["best"])


def test_compare_with_optimal_on_a_trace_that_computes_nothing():
    """Every TIME is 0: no schedule slows it down, the convention ``simulate`` and
    ``lower_bound`` share (it was a division by zero)."""
    from minidtr.sim.sweep import compare_with_optimal

    trace = sim.make_trace([Constant("w", 4), Call("f", ("w",), (Result("a", 4),), 0.0)])
    (row,) = compare_with_optimal(trace, [1.0], ["dtr"], time_limit=20)
    assert (row["status"], row["best"], row["lower"], row["dtr"]) == ("optimal", 1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    "instructions",
    [
        [Constant("w", 4)],
        [Constant("w", 4), Call("view", ("w",), (Result("v", 4, alias=0),), 1.0)],
        [Constant("w", 4), Call("read", ("w",), (), 0.0)],
    ],
    ids=["a constant", "a view of it", "an access to it"],
)
def test_a_graph_without_nodes_is_optimal_when_its_constants_fit(instructions):
    """Nothing to schedule: the empty schedule is optimal within the constants' 4 bytes
    (it was called infeasible at every budget), and nothing fits below them, as dtr and
    the bound say too."""
    from minidtr.sim.bound import lower_bound
    from minidtr.sim.sweep import compare_with_optimal

    trace = sim.make_trace(instructions)
    graph = graph_from_trace(trace)
    assert len(graph) == 0
    fits = solve_optimal(graph, 4)
    assert (fits.status, fits.cost, fits.peak) == ("optimal", 0.0, 4)
    assert solve_optimal(graph, 3).status == "infeasible"
    assert lower_bound(trace, budget=3).status == "infeasible"
    full, half = compare_with_optimal(trace, [1.0, 0.5], ["dtr"], time_limit=20)
    assert (full["status"], full["best"], full["dtr"]) == ("optimal", 1.0, 1.0)
    assert half["status"] == "infeasible" and math.isnan(half["dtr"])


def test_an_empty_trace_is_optimal():
    from minidtr.sim.sweep import compare_with_optimal

    (row,) = compare_with_optimal(sim.make_trace([]), [1.0], ["dtr"], time_limit=20)
    assert (row["status"], row["best"], row["dtr"]) == ("optimal", 1.0, 1.0)


@pytest.mark.parametrize(
    "made_constant", [("y",), ("x", "y")], ids=["its output", "its input and output"]
)
def test_values_made_constant_after_the_last_node_are_charged_once(made_constant):
    """The last stage holds its node's output and inputs; the end-constants charge counted
    them again once made constant, so a trace whose only node's value becomes a constant
    was infeasible at ratio 1 (its unbounded peak), which dtr and the bound run in."""
    from minidtr.sim.bound import lower_bound
    from minidtr.sim.sweep import compare_with_optimal

    trace = sim.make_trace(
        [
            Constant("w", 100),
            Call("f", ("w",), (Result("x", 300),), 10.0),
            Call("g", ("x",), (Result("y", 400),), 10.0),
            *[MakeConstant(name) for name in made_constant],
        ]
    )
    assert baseline(trace).peak_memory == 800
    graph = graph_from_trace(trace)
    assert graph.constants == [100, 100]
    (row,) = compare_with_optimal(trace, [1.0], ["dtr"], time_limit=20)
    assert (row["status"], row["best"], row["dtr"]) == ("optimal", 1.0, 1.0)
    assert lower_bound(trace, budget=800).status == "ok"
    assert solve_optimal(graph, 799).status == "infeasible"


def test_highs_prints_nothing_to_standard_output():
    """Some HiGHS versions print debugging lines from C++ to the process's standard output
    (``disp=False`` does not silence them): solve_optimal sends descriptor 1 to the null
    device while HiGHS runs, C's buffers included (a process of its own, so that what C
    buffered would show at its exit), and gives it back afterwards."""
    import subprocess
    import sys

    program = (
        "import ctypes, os\n"
        "from minidtr.sim.checkmate import _quiet_c_stdout\n"
        "print('before', flush=True)\n"
        "with _quiet_c_stdout():\n"
        "    os.write(1, b'from a descriptor\\n')\n"
        "    ctypes.CDLL(None).printf(b'from C stdio, buffered\\n')\n"
        "print('after', flush=True)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
        check=True,
    )
    assert result.stdout == "before\nafter\n"
