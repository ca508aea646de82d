"""The window's slide, readable and accelerated (runtime/arena.py, runtime/fast/windows.py),
and the ``split`` placement (small values from the arena's top end).

Both slides must choose the same window, so float costs with many exact and near ties
are drawn (sums of tenths, which round differently in different orders); both against
a brute force over every run. The split placement against a brute-force model of where
a request goes, with the arena's invariants after every step; the runtime under it
deciding the same with and without the accelerator."""

import math
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from decision_check import checked_decisions
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_arena import HEURISTICS, PROGRAMS, PROPERTY, against_model, both_policies, free_gaps

import minidtr as md
from minidtr import sim
from minidtr.runtime.arena import ALIGNMENT, SMALL_SHARE, Arena, shortest_runs_cheapest
from minidtr.runtime.fast import addresses, windows
from minidtr.runtime.fast.addresses import BlockColumns
from minidtr.runtime.fast.windows import cheapest_run
from minidtr.runtime.heuristics import WindowHeuristic
from minidtr.testing import isolated_allocator
from minidtr.testing.strategies import unbounded_peak

KB = 1024
COSTS = [0.0, 0.1, 0.2, 0.3, 0.7, 1e-9, 3.0, math.inf]  # inf: a wall


def brute_force_window(sizes: list[int], costs: list[float], need: int):
    """Every run of blocks without a wall that holds ``need``: the cheapest by exact sum,
    the lowest start among equals (the shortest run from a start is never dearer)."""
    best = None
    for i in range(len(sizes)):
        for j in range(i + 1, len(sizes) + 1):
            if math.inf in costs[i:j] or sum(sizes[i:j]) < need:
                continue
            total = math.fsum(costs[i:j])
            if best is None or total < best[0]:
                best = (total, i, j)
            break  # longer runs from i cost at least as much
    return best


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.sampled_from(COSTS)), max_size=40),
    st.integers(1, 30),
)
def test_both_slides_choose_the_same_window_as_every_window(blocks, units):
    sizes = [n * ALIGNMENT for n, _ in blocks]
    costs = [c for _, c in blocks]
    need = units * ALIGNMENT
    expected = brute_force_window(sizes, costs, need)
    assert shortest_runs_cheapest(sizes, costs, need) == expected
    assert cheapest_run(np.array(sizes, np.int64), np.array(costs), need) == expected


def test_the_accelerated_slide_on_a_large_arena_of_near_ties():
    """10^4 blocks, costs that differ in their last bits: the same run as the loop."""
    rng = np.random.default_rng(5)
    for trial in range(20):
        n = 10_000
        sizes = rng.integers(1, 9, n) * ALIGNMENT
        costs = rng.choice([0.1, 0.2, 0.3, 0.1 + 0.2], n) * rng.choice([1.0, 1 + 2**-50], n)
        costs[rng.random(n) < 0.05] = math.inf
        need = int(rng.integers(1, 40)) * ALIGNMENT
        expected = shortest_runs_cheapest(sizes.tolist(), costs.tolist(), need)
        assert cheapest_run(sizes, costs, need) == expected, trial


def test_no_run_and_an_empty_arena():
    assert cheapest_run(np.zeros(0, np.int64), np.zeros(0), 512) is None
    walls = np.array([math.inf, math.inf])
    assert cheapest_run(np.array([512, 512]), walls, 512) is None
    assert shortest_runs_cheapest([512, 512], walls.tolist(), 512) is None
    assert cheapest_run(np.array([512, 512]), np.array([1.0, 2.0]), 2048) is None


# ---- the split placement -------------------------------------------------------------------


def test_split_places_small_requests_at_the_top_and_large_ones_at_the_bottom():
    size = 256 * 4 * KB + 100  # a small request: at most 4 KiB (and the 100 B left over)
    arena = Arena(size, "split")
    small, large = arena.place(100), arena.place(8 * KB)
    assert (small.start, small.end) == ((size - 512) // 512 * 512, (size - 512) // 512 * 512 + 512)
    assert large.start == 0
    assert arena.place(4 * KB).end == small.start  # the next small one just below it
    assert arena.place(4 * KB + 1).start == 8 * KB  # not small: from the bottom
    forced = arena.place(8 * KB, high=True)  # a constant laid out: the top, whatever its size
    assert forced.end <= small.start - 4 * KB and forced.start > 16 * KB
    arena.check()
    assert SMALL_SHARE == 1 / 256


def brute_force_split(used: dict, size: int, need: int, high: bool) -> int | None:
    gaps = free_gaps(used, size)
    if not high:
        fitting = [(length, start) for start, length in gaps if length >= need]
        return min(fitting)[1] if fitting else None
    for start, length in reversed(gaps):
        top = (start + length - need) // ALIGNMENT * ALIGNMENT
        if top >= start:
            return top
    return None


@settings(max_examples=80, deadline=None)
@given(
    st.integers(8, 60),
    st.lists(
        st.tuples(st.booleans(), st.integers(1, 6 * ALIGNMENT), st.integers(0, 99)), max_size=80
    ),
)
def test_split_against_a_brute_force_model(units, steps):
    size = units * ALIGNMENT + 77
    against_model(
        Arena(size, "split"),
        steps,
        lambda used, need: brute_force_split(used, size, need, need <= size * SMALL_SHARE),
    )


def test_split_lays_constants_out_at_the_top():
    with isolated_allocator():
        c = md.tensor(np.ones(64 * KB, np.float32))  # 256 KiB: not small
        with md.Runtime(budget=KB * KB, fit="contiguous", placement="split") as rt:
            a = md.tanh(c)
            where = {
                "constant": rt.allocator.addresses.address(c.storage),
                "value": rt.allocator.addresses.address(a.storage),
            }
    assert where == {"constant": KB * KB - 256 * KB, "value": 0}


@PROPERTY
@given(PROGRAMS, HEURISTICS, st.floats(0.5, 0.95))
def test_the_accelerator_decides_as_the_reference_under_split(program, heuristic, ratio):
    budget = int(ratio * unbounded_peak(program))
    fast, reference = both_policies(program, budget, heuristic, "split")
    assert fast[1] == reference[1]  # the events, addresses included
    for key in ("evictions", "remats", "extra_evictions", "placement_failures"):
        assert fast[2][key] == reference[2][key], key


@pytest.mark.parametrize("placement", ["best", "split"])
def test_a_bundled_trace_replays_identically_under_the_window(placement):
    trace = sim.load_log(next(p for p in sim.bundled_traces() if p.name.startswith("unet")))
    runs = [
        sim.simulate(
            trace, ratio=0.3, heuristic="window", record_events=True, reference=reference,
            fit="contiguous", placement=placement,
        )
        for reference in (False, True)
    ]  # fmt: skip
    assert runs[0].status == runs[1].status
    assert runs[0].extra == runs[1].extra
    assert repr(runs[0].slowdown) == repr(runs[1].slowdown)  # nan when out of memory


# ---- a neighbourhood counted once ------------------------------------------------------------


def neighbourhood_costs(blocks: list) -> tuple:
    """For blocks (size in alignments, c or None when free, staleness s, neighbour ids):
    their sizes, each block's cost with its whole neighbourhood ((c + 0.1 k summed) / s)
    and without (c / s), and a run's cost with each neighbour ``k`` counted once, over the
    least staleness among the values that have it (as ``WindowCosts.run_cost``)."""
    sizes = [n * ALIGNMENT for n, *_ in blocks]
    upper, lower = [], []
    for _, c, s, hood in blocks:
        if c is None or c == math.inf:
            upper.append(0.0 if c is None else math.inf)
            lower.append(0.0)
        else:
            upper.append((c + sum(0.1 * k for k in hood)) / s)
            lower.append(c / s)

    def run_cost(first: int, end: int) -> float:
        own, rate = [], {}
        for _, c, s, hood in blocks[first:end]:
            if c is not None:
                own.append(c / s)
                for k in hood:
                    rate[k] = max(rate.get(k, -1.0), 0.1 * k / s)
        return math.fsum([*own, *rate.values()])

    return sizes, upper, lower, run_cost


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 6),  # size in alignments
            st.sampled_from([None, 0.0, 0.1, 0.3, 1.0, math.inf]),  # c (None: free)
            st.sampled_from([1.0, 2.0, 3.0]),  # staleness
            st.sets(st.integers(0, 5), max_size=3),  # the evicted neighbours' ids
        ),
        max_size=30,
    ),
    st.integers(1, 20),
)
def test_both_slides_choose_the_same_window_when_a_neighbourhood_counts_once(blocks, units):
    """Neighbour ``k`` costs ``0.1 * k``; a run costs its values' c / s and each neighbour
    once, over the least staleness among the values that have it (as ``WindowCosts``)."""
    sizes, upper, lower, run_cost = neighbourhood_costs(blocks)
    need = units * ALIGNMENT
    runs = [(first, end) for first in range(len(sizes)) for end in range(first + 1, len(sizes) + 1)]
    fitting = [
        (run_cost(i, j), i, j)
        for i, j in runs
        if sum(sizes[i:j]) >= need and math.inf not in upper[i:j]
        and (j == i + 1 or sum(sizes[i : j - 1]) < need)  # each start's shortest
    ]  # fmt: skip
    expected = min(fitting) if fitting else None
    assert shortest_runs_cheapest(sizes, upper, need, run_cost) == expected
    got = cheapest_run(np.array(sizes, np.int64), np.array(upper), need, run_cost, np.array(lower))
    assert got == expected


def test_a_huge_cost_makes_the_slide_cap_the_costs_and_still_choose_the_readable_window(
    monkeypatch,
):
    """A value used a moment ago costs about 10^11: the prefix sums after it cannot tell
    runs of costs near 10^-3 apart, so more than ``NEAR_RUNS`` runs look as cheap as the
    cheapest. The slide then costs the apparent cheapest exactly, makes every block
    costing more a wall and slides again: the readable slide's window all the same."""
    passes = []
    original = windows.shortest_runs

    def counted(*args):
        passes.append(1)
        return original(*args)

    monkeypatch.setattr(windows, "shortest_runs", counted)
    rng = np.random.default_rng(3)
    for trial in range(20):
        n = 300
        sizes = (rng.integers(1, 4, n) * ALIGNMENT).tolist()
        costs = (rng.integers(1, 4, n) * 1e-3).tolist()
        costs[rng.integers(0, n // 3)] = 1e11  # early: most runs come after it
        for wall in rng.integers(0, n, 5).tolist():
            costs[wall] = math.inf
        need = int(rng.integers(2, 10)) * ALIGNMENT
        expected = shortest_runs_cheapest(sizes, costs, need)
        passes.clear()
        assert cheapest_run(np.array(sizes, np.int64), np.array(costs), need) == expected, trial
        assert len(passes) == 2, trial  # capped, then slid again


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 4),  # size in alignments
            st.sampled_from([None, 1e-3, 2e-3, 0.5, 1e11, math.inf]),  # c (None: free)
            st.sampled_from([1.0, 2.0, 1e-9]),  # staleness (1e-9: used a moment ago)
            st.sets(st.integers(0, 40), max_size=3),  # the evicted neighbours' ids
        ),
        min_size=40,
        max_size=160,
    ),
    st.integers(1, 12),
)
def test_on_large_arenas_the_slides_agree_when_a_neighbourhood_counts_once(blocks, units):
    """As the test above on arenas large enough for the accelerated slide's bounds and its
    capping to matter; against the readable slide (checked against every run above)."""
    sizes, upper, lower, run_cost = neighbourhood_costs(blocks)
    need = units * ALIGNMENT
    expected = shortest_runs_cheapest(sizes, upper, need, run_cost)
    got = cheapest_run(np.array(sizes, np.int64), np.array(upper), need, run_cost, np.array(lower))
    assert got == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["place", "free", "resize"]), st.integers(1, 6), st.integers()),
        max_size=60,
    ),
    st.sampled_from(["best", "first", "split"]),
)
def test_the_block_arrays_follow_the_arena(steps, policy):
    """``BlockColumns``, the arena's listener, holds every block's start (and the arena's
    end) in address order, -1 for a free block and 0 for a used one without a table row,
    after any sequence of placements, frees and resizes."""
    arena = Arena(64 * ALIGNMENT, policy)
    columns = BlockColumns(SimpleNamespace(arena=arena, placed={}))
    used = []
    for action, units, pick in steps:
        if action == "place":
            block = arena.place(units * ALIGNMENT)
            if block is not None:
                used.append(block)
        elif action == "free" and used:
            arena.free(used.pop(pick % len(used)))
        elif action == "resize":
            arena.resize(max(arena.used_end(), (32 + units * 8) * ALIGNMENT))
        blocks = list(arena.blocks())
        assert columns.block_bounds().tolist() == [*(b.start for b in blocks), arena.size]
        assert columns.block_rows().tolist() == [-1 if b.free else 0 for b in blocks]


# ---- the decision from the arena's arrays (fast/addresses.py) --------------------------------


@PROPERTY
@given(
    PROGRAMS,
    st.floats(0.4, 0.9),
    st.sampled_from(["best", "first", "split"]),
    st.sampled_from([0, addresses.ARRAY_BLOCKS]),
    st.booleans(),
)
def test_the_window_from_the_arenas_arrays_is_the_readable_windows(
    program, ratio, placement, array_blocks, once
):
    """Every accelerated window decision of a random program, with its block arrays checked
    against the arena and the table, and its window against the readable slide's; with
    the arrays kept from the first decision on (``ARRAY_BLOCKS`` 0), and as by default
    (these programs' arenas are mostly walked in Python); e* counted once (the costs
    gathered are then bounds) and per value (they are the window's cost)."""
    budget = int(ratio * unbounded_peak(program))
    runtime = md.Runtime(
        budget=budget, heuristic=WindowHeuristic(once), cost="flops", fit="contiguous",
        placement=placement, max_slowdown=None,
    )  # fmt: skip
    with checked_decisions() as counter, pytest.MonkeyPatch.context() as patch:
        patch.setattr(addresses, "ARRAY_BLOCKS", array_blocks)
        before = counter.get("windows", 0)
        try:
            with isolated_allocator(), runtime:
                program()
        except md.BudgetError:
            pass
        event("window decisions" if counter.get("windows", 0) > before else "none")


@pytest.mark.parametrize("array_blocks", [0, addresses.ARRAY_BLOCKS])
def test_a_bundled_trace_replays_with_every_window_decision_checked(monkeypatch, array_blocks):
    """The LSTM's arena (about 55 blocks) is walked in Python by default; with
    ``ARRAY_BLOCKS`` 0 its arrays are kept."""
    monkeypatch.setattr(addresses, "ARRAY_BLOCKS", array_blocks)
    trace = sim.load_log(next(p for p in sim.bundled_traces() if p.name.startswith("lstm")))
    with checked_decisions() as counter:
        before = counter.get("windows", 0)
        result = sim.simulate(trace, ratio=0.4, heuristic="window", fit="contiguous")
    assert result.status == "ok" and counter["windows"] - before >= 10, counter


def test_the_block_arrays_follow_a_relayout_and_a_table_squeeze():
    """A budget lowered in the middle of a run lays the arena out again (a new arena: new
    arrays), and many evictions make the table squeeze its holes (rows renumbered)."""
    rng = np.random.default_rng(0)
    with checked_decisions() as counter, isolated_allocator():
        before = counter.get("windows", 0)
        x = md.tensor(rng.standard_normal(256).astype(np.float32))
        with md.Runtime(budget=400 * KB, heuristic="window", fit="contiguous") as runtime:
            values = [md.tanh(x * float(i)) for i in range(600)]
            runtime.budget = 200 * KB
            values += [md.exp(x * (i / 300)) for i in range(300)]
            total = sum(float(v.numpy()[0]) for v in values)
            stored = [weakref.ref(v.storage) for v in values]
            del values  # nothing the arrays keep may hold them (the table's old rows did)
            assert not any(ref() is not None for ref in stored)
        assert runtime.stats()["evictions"] > 200
    assert counter["windows"] - before > 10
    assert math.isfinite(total)
