"""Memory with addresses: the arena (runtime/arena.py) and the contiguous fit built on it
(runtime/placement.py, ``Runtime(fit="contiguous")``).

The arena alone: alignment, split and merge, best- against first-fit, its invariants
after random sequences of requests and frees (against a brute-force model of the
address line). The runtime under the contiguous fit: the same values as without a
budget, the peak address within the budget, the same decisions with and without the
accelerator, the simulator's replay of a recorded trace deciding as the live run did,
and fragmentation measured where it makes the contiguous rule evict more than the byte
rule. The byte fit, the default, is left exactly as it was."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import minidtr as md
from minidtr import sim
from minidtr.runtime import HEURISTIC_NAMES
from minidtr.runtime.arena import ALIGNMENT, Arena, aligned
from minidtr.runtime.errors import PlacementError
from minidtr.runtime.registry import allocator_for
from minidtr.sim.simulator import baseline
from minidtr.testing import isolated_allocator, run_under
from minidtr.testing.strategies import random_programs, unbounded_peak

KB = 1024


# ---- the arena -------------------------------------------------------------------------


def test_requests_are_rounded_up_to_the_alignment():
    assert ALIGNMENT == 512
    assert [aligned(n) for n in (1, 511, 512, 513, 1024)] == [512, 512, 512, 1024, 1024]
    arena = Arena(4 * KB)
    a, b = arena.place(1), arena.place(700)
    assert (a.start, a.size, b.start, b.size) == (0, 512, 512, 1024)
    assert arena.free_bytes == 4 * KB - 1536 and arena.used_bytes == 1536
    arena.check()


def test_a_free_splits_nothing_and_merges_with_free_neighbours():
    arena = Arena(4 * KB)
    a, b, c = (arena.place(KB) for _ in range(3))
    arena.free(b)  # between two used blocks: a free block of its own
    assert [(x.start, x.size, x.free) for x in arena.blocks()] == [
        (0, KB, False),
        (KB, KB, True),
        (2 * KB, KB, False),
        (3 * KB, KB, True),
    ]
    assert arena.largest_free() == KB and arena.fragmentation() == 0.5
    arena.free(c)  # merges with the free blocks on both sides
    assert [(x.start, x.size, x.free) for x in arena.blocks()] == [
        (0, KB, False),
        (KB, 3 * KB, True),
    ]
    arena.free(a)
    assert [(x.start, x.size) for x in arena.blocks()] == [(0, 4 * KB)]
    assert arena.fragmentation() == 0.0 and arena.peak_end == 3 * KB
    arena.check()
    with pytest.raises(ValueError, match="not a used block"):
        arena.free(a)


@pytest.mark.parametrize(("policy", "start"), [("best", 3 * KB), ("first", 0)])
def test_best_fit_takes_the_smallest_block_first_fit_the_lowest(policy, start):
    arena = Arena(6 * KB, policy)
    low, _, mid, _ = arena.place(2 * KB), arena.place(KB), arena.place(KB), arena.place(KB)
    arena.free(low)  # free: 2 KB at 0, 1 KB at 3 KB, 1 KB at 5 KB
    arena.free(mid)
    assert arena.place(KB).start == start
    arena.check()


def test_a_request_no_block_holds_changes_nothing():
    arena = Arena(3 * KB)
    a, _, c = arena.place(KB), arena.place(KB), arena.place(KB)
    arena.free(a)
    arena.free(c)
    before = [(x.start, x.size, x.free) for x in arena.blocks()]
    assert arena.free_bytes == 2 * KB and not arena.fits(2 * KB)  # the bytes fit, no block
    assert arena.place(2 * KB) is None
    assert [(x.start, x.size, x.free) for x in arena.blocks()] == before


def test_walking_the_blocks_in_address_order():
    arena = Arena(4 * KB + 100)  # the tail below the alignment stays a free block
    blocks = [arena.place(KB, owner=i) for i in range(3)]
    assert [b.owner for b in arena.blocks_from(KB + 5)] == [1, 2, None]
    assert arena.block_at(2 * KB) is blocks[2] and arena.block_at(4 * KB + 100) is None
    assert arena.used_end() == 3 * KB
    arena.check()


def test_resizing_grows_and_shrinks_at_the_top():
    arena = Arena(2 * KB)
    arena.place(KB)
    arena.resize(8 * KB)
    assert arena.largest_free() == 7 * KB
    arena.resize(KB)
    assert arena.free_bytes == 0
    with pytest.raises(ValueError, match="a used block ends at 1,024"):
        arena.resize(512)
    arena.check()


def test_bad_arguments_are_refused_with_the_value():
    with pytest.raises(ValueError, match="'worst'"):
        Arena(KB, "worst")
    with pytest.raises(ValueError, match="-1"):
        Arena(-1)
    with pytest.raises(ValueError, match="at least 1 byte"):
        Arena(KB).place(0)


def free_gaps(used: dict, size: int) -> list[tuple[int, int]]:
    """The (start, length) of every free range of an arena of ``size`` bytes, in address
    order, from the used intervals alone."""
    gaps, at = [], 0
    for start, length in sorted(used.values()):
        if start > at:
            gaps.append((at, start - at))
        at = start + length
    if size > at:
        gaps.append((at, size - at))
    return gaps


def brute_force_choice(used: dict, size: int, need: int, policy: str) -> int | None:
    """Where a request of ``need`` (aligned) bytes goes, from the used intervals alone."""
    gaps = free_gaps(used, size)
    fitting = [(length, start) for start, length in gaps if length >= need]
    if not fitting:
        return None
    if policy == "first":
        return min(start for _, start in fitting)
    return min(fitting)[1]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["best", "first"]),
    st.integers(8, 40),
    st.lists(
        st.tuples(st.booleans(), st.integers(1, 6 * ALIGNMENT), st.integers(0, 99)), max_size=80
    ),
)
def test_random_requests_and_frees_against_a_brute_force_model(policy, units, steps):
    size = units * ALIGNMENT + 77
    against_model(
        Arena(size, policy),
        steps,
        lambda used, need: brute_force_choice(used, size, need, policy),
    )


def against_model(arena: Arena, steps: list, expected_start) -> None:
    """Place and free as ``steps`` say (request?, bytes, which block to free), checking
    each placement against ``expected_start(used, aligned bytes)`` and the invariants."""
    used: dict[int, tuple[int, int]] = {}  # owner -> (start, size)
    blocks = {}
    for n, (request, nbytes, pick) in enumerate(steps):
        if request or not blocks:
            expected = expected_start(used, aligned(nbytes))
            block = arena.place(nbytes, owner=n)
            assert (block and block.start) == expected
            if block is not None:
                used[n], blocks[n] = (block.start, block.size), block
        else:
            owner = sorted(blocks)[pick % len(blocks)]
            arena.free(blocks.pop(owner))
            del used[owner]
        arena.check()  # never overlapping, covering the arena, no two free blocks adjacent
        assert arena.used_bytes == sum(length for _, length in used.values())


def test_the_cheapest_window_of_a_small_arena():
    arena = Arena(6 * KB)
    blocks = [arena.place(KB, owner=cost) for cost in (5, 1, 1, 9, 2, 2)]
    for block in (blocks[1], blocks[4]):
        arena.free(block)  # free: 1 KiB at 1 KiB (cost 0), 1 KiB at 4 KiB
    cost, window = arena.cheapest_window(2 * KB, lambda b: b.owner)
    assert (cost, [b.start for b in window]) == (1, [KB, 2 * KB])  # free + the cost-1 block
    cost, window = arena.cheapest_window(3 * KB, lambda b: b.owner)
    # 5+0+1 at 0 KiB; 0+1+9, 1+9+0 and 9+0+2 further up
    assert (cost, [b.start for b in window]) == (6, [0, KB, 2 * KB])
    fixed = lambda b: math.inf if b.owner == 1 else b.owner  # noqa: E731
    assert arena.cheapest_window(4 * KB, fixed) is None  # the block at 2 KiB cannot go


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(1, 3 * ALIGNMENT), st.integers(0, 5))),
    st.integers(1, 8 * ALIGNMENT),
)
def test_the_cheapest_window_against_every_window(layout, nbytes):
    """Costs 0..4, and 5 standing for a block that cannot be freed."""
    arena = Arena(sum(aligned(n) for _, n, _ in layout) + 100)
    for free, size, cost in layout:
        block = arena.place(size, owner=cost)
        if free:
            arena.free(block)
    blocks = list(arena.blocks())
    costs = [0 if b.free else math.inf if b.owner == 5 else b.owner for b in blocks]
    windows = [
        (sum(costs[i:j]), i, j)
        for i in range(len(blocks))
        for j in range(i + 1, len(blocks) + 1)
        if sum(b.size for b in blocks[i:j]) >= aligned(nbytes) and math.inf not in costs[i:j]
    ]
    found = arena.cheapest_window(nbytes, lambda b: math.inf if b.owner == 5 else b.owner)
    if not windows:
        assert found is None
    else:
        cost, first, end = min(windows)
        assert found == (cost, blocks[first:end])


# ---- the runtime under fit="contiguous" -------------------------------------------------


def test_the_fit_is_checked_and_the_byte_fit_reports_nothing_new():
    with pytest.raises(ValueError, match='fit must be "bytes" or "contiguous", got \'exact\''):
        md.Runtime(fit="exact")
    with pytest.raises(ValueError, match='placement must be "best", "first" or "split"'):
        md.Runtime(fit="contiguous", placement="worst")
    with isolated_allocator() as allocator:
        with md.Runtime(budget=10**6) as rt:
            md.tanh(md.tensor(np.ones(8)))
            assert allocator.addresses is None
        assert "peak_address" not in rt.stats() and "fit" not in rt.header()


def fragmenting_program():
    """Three 1 KiB values side by side, the first and last freed, then a 2 KiB one: the
    bytes fit a 4 KiB arena, no free block does until the middle value goes."""
    c = md.tensor(np.ones(256, np.float32))  # 1 KiB, a constant at 0
    a, b, d = md.tanh(c), md.exp(c), md.sigmoid(c)  # at 1, 2 and 3 KiB
    del a, d  # eager: evicted, their blocks free: 1 KiB at 1 KiB and 1 KiB at 3 KiB
    wide = c.astype(np.float64)  # 2 KiB
    return wide, b


def test_fragmentation_forces_an_extra_eviction():
    with isolated_allocator() as allocator:
        with md.Runtime(budget=4 * KB, cost="flops", record_events=True, fit="contiguous") as rt:
            wide, b = fragmenting_program()
            assert allocator.addresses.address(wide.storage) == KB  # where b was
            np.testing.assert_array_equal(b.numpy(), np.exp(np.ones(256, np.float32)))
        stats = rt.stats()
    assert stats["extra_evictions"] == 1 and stats["placement_failures"] == 1
    assert stats["fragmentation"] == 0.5  # two free blocks of 1 KiB
    assert stats["peak_address"] == 4 * KB
    [extra] = [e for e in rt.events if e["event"] == "evict" and e.get("extra")]
    assert (extra["free_bytes"], extra["largest_free"]) == (2 * KB, KB)
    with isolated_allocator():
        with md.Runtime(budget=4 * KB, cost="flops") as rt:
            kept = fragmenting_program()
        stats = rt.stats()
        assert stats["evictions"] == stats["dead_evictions"] == 2  # the byte rule: no victim
        del kept


def test_explain_tells_the_extra_eviction_and_the_peak_address(tmp_path):
    from minidtr.explain import explain, load_events, summarize

    texts = []
    for fit in ("bytes", "contiguous"):
        with isolated_allocator():
            with md.Runtime(budget=4 * KB, cost="flops", record_events=True, fit=fit) as rt:
                kept = fragmenting_program()
            rt.export_events(str(tmp_path / f"{fit}.jsonl"))
            del kept
        summary = summarize(load_events(str(tmp_path / f"{fit}.jsonl")))
        texts.append(explain(summary))
    assert "Addresses" not in texts[0]
    a = summary.addresses
    assert (a.peak_address, a.evictions, a.extra, a.fragmentation) == (4 * KB, 1, 1, [0.5])
    assert "Evictions made to free a block large enough: 1; 1 of them while" in texts[1]
    assert "The highest address in use was 4.0 KiB = 100% of the budget" in texts[1]


def test_a_block_nothing_can_free_is_a_placement_error():
    """The 2 KiB value needs the middle block, which a pinned value holds."""
    with isolated_allocator(), md.Runtime(budget=4 * KB, cost="flops", fit="contiguous"):
        c = md.tensor(np.ones(256, np.float32))
        a, b, d = md.tanh(c), md.exp(c), md.sigmoid(c)
        b.pin()
        del a, d
        with pytest.raises(PlacementError) as caught:
            c.astype(np.float64)
    message = str(caught.value)
    for text in ("a free block of 2,048 bytes", "largest free block is 1,024", "2,048 free"):
        assert text in message, message
    assert "1,024 pinned" in message and "fit='bytes'" in message
    assert isinstance(caught.value, md.BudgetError)


def check_layout(allocator) -> None:
    """Every resident storage of ``allocator`` (found through its blocks) has one block of
    its aligned size, and the blocks of the arena are exactly those."""
    addresses = allocator.addresses
    addresses.arena.check()
    owned = [(block, storage) for block, storage in addresses.layout() if not block.free]
    assert all(storage is not None for _, storage in owned)
    for block, storage in owned:
        assert storage.buffer is not None and block.size == aligned(storage.nbytes)
        assert addresses.placed[storage.id] is block
    assert len(owned) == len(addresses.placed)
    assert sum(s.nbytes for _, s in owned) == allocator.ledger.memory


PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# long programs of 24 x 24 values: most budgets between half the peak and the peak fit
# (shorter ones are mostly their inputs and gradients, which no budget below the peak holds)
PROGRAMS = random_programs(max_ops=30, max_inputs=2, size=24)
HEURISTICS = st.sampled_from([*HEURISTIC_NAMES, "window"])


@PROPERTY
@given(PROGRAMS, HEURISTICS, st.floats(0.5, 0.95))
def test_random_programs_compute_the_same_bits_within_the_arena(program, heuristic, ratio):
    """At ``ratio`` of the peak, or, if the arena is too small there, half-way up to it."""
    expected = run_under(program, md.Runtime(cost="flops"))
    peak = unbounded_peak(program)

    def checked():
        out = program()
        check_layout(allocator_for("cpu"))  # before the runtime exits, with the arena
        return out

    for fraction in (ratio, (1 + ratio) / 2):
        budget = int(fraction * peak)
        runtime = md.Runtime(
            budget=budget, heuristic=heuristic, cost="flops", fit="contiguous", max_slowdown=None
        )
        try:
            got = run_under(checked, runtime)
            break
        except md.BudgetError:
            continue
    else:
        event("too small a budget")  # the fragmentation, or the bytes: nothing to compare
        return
    stats = runtime.stats()
    event("extra evictions" if stats["extra_evictions"] else "no extra eviction")
    event("rematerialized" if stats["remats"] else "no remat")
    for (name, a), (_, b) in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert stats["peak_address"] <= budget


def both_policies(program, budget: int, heuristic: str, placement: str) -> list:
    runs = []
    for reference in (False, True):
        runtime = md.Runtime(
            budget=budget, heuristic=heuristic, cost="flops", record_events=True,
            reference=reference, max_slowdown=None, fit="contiguous", placement=placement,
        )  # fmt: skip
        try:
            outputs = run_under(program, runtime)
        except md.BudgetError as error:
            outputs = str(error)
        runs.append((outputs, runtime.events, runtime.stats()))
    return runs


@PROPERTY
@given(PROGRAMS, HEURISTICS, st.floats(0.5, 0.95), st.sampled_from(["best", "first"]))
def test_the_accelerator_decides_as_the_reference_under_a_contiguous_fit(
    program, heuristic, ratio, placement
):
    budget = int(ratio * unbounded_peak(program))
    (outputs, events, stats), (ref_outputs, ref_events, ref_stats) = both_policies(
        program, budget, heuristic, placement
    )
    assert events == ref_events
    if isinstance(outputs, str):
        assert outputs == ref_outputs
    else:
        for (name, a), (_, b) in zip(outputs, ref_outputs, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    for key in ("evictions", "remats", "extra_evictions", "placement_failures", "peak_address"):
        assert stats[key] == ref_stats[key], key


@pytest.fixture(scope="module")
def resnet():
    return sim.load_log(next(p for p in sim.bundled_traces() if p.name.startswith("resnet")))


@pytest.mark.parametrize("heuristic", ["dtr", "window"])
def test_a_bundled_trace_replays_identically_with_the_reference_policy(resnet, heuristic):
    runs = [
        sim.simulate(
            resnet, ratio=0.4, heuristic=heuristic, fit="contiguous", record_events=True,
            reference=reference,
        )
        for reference in (False, True)
    ]  # fmt: skip
    assert runs[0].status == "ok" and runs[0].extra == runs[1].extra
    assert runs[0].extra["extra_evictions"] > 0 and runs[0].extra["peak_address"] <= runs[0].budget
    alloc = next(e for e in runs[0].extra["events"] if e["event"] == "alloc")
    assert alloc["address"] == 0  # the first value made lies at the bottom


def train_step(steps: int = 2) -> list[float]:
    """Two steps of a six-layer MLP with momentum: constants made along the run (the
    optimizer's updates) land between the activations, which fragments the arena."""
    rng = np.random.default_rng(0)
    ws = [md.tensor(rng.standard_normal((32, 32)) * 0.2, requires_grad=True) for _ in range(6)]
    x = md.tensor(rng.standard_normal((64, 32)))
    y = md.tensor(rng.integers(0, 10, 64))
    opt = md.optim.SGD(ws, lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        h = x
        for w in ws:
            h = md.tanh(h @ w)
        loss = md.cross_entropy(h.reshape(64, 2, 16).reshape(64, 32), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        del h, loss
    return losses


ADDRESS_STATS = ("placement_failures", "fragmentation", "extra_evictions", "peak_address")


def test_the_replay_of_a_recorded_trace_decides_as_the_live_run(tmp_path):
    """The same evictions, remats and measures, or the same placement error, word for word."""
    with isolated_allocator(), md.Runtime(cost="flops"), sim.record(tmp_path / "mlp.log"):
        unbounded = train_step()
    trace = sim.load_log(tmp_path / "mlp.log")
    peak = baseline(trace).peak_memory
    outcomes = []
    for ratio in (0.95, 0.85, 0.55):
        budget = int(ratio * peak)
        runtime = md.Runtime(budget=budget, cost="flops", fit="contiguous")
        result = sim.simulate(trace, budget=budget, thrash=None, outputs=False, fit="contiguous")
        outcomes.append(result.status)
        try:
            with isolated_allocator(), runtime:
                losses = train_step()
        except PlacementError as error:
            assert result.status == "oom" and str(error) in result.error
            continue
        live = runtime.stats()
        assert losses == unbounded and result.status == "ok"
        assert (result.evictions, result.remats, result.peak_memory) == (
            live["evictions"],
            live["remats"],
            live["peak_memory"],
        )
        assert {k: result.extra[k] for k in ADDRESS_STATS} == {k: live[k] for k in ADDRESS_STATS}
        assert live["extra_evictions"] > 0 and live["remats"] > 0
    assert outcomes == ["ok", "oom", "oom"]  # momentum's constants fragment the arena early


def test_sim_prints_and_writes_the_address_columns_only_under_the_contiguous_fit(tmp_path, capsys):
    from minidtr.sim import cli

    log = str(next(p for p in sim.bundled_traces() if p.name.startswith("mlp")))
    for fit in ("bytes", "contiguous"):
        path = tmp_path / f"{fit}.csv"
        argv = [log, "--ratios", "0.5", "--heuristics", "dtr", "--jobs", "1", "--csv", str(path)]
        assert cli.main([*argv, "--fit", fit]) == 0
        out = capsys.readouterr().out
        header = path.read_text().splitlines()[0].split(",")
        assert ("extra_evictions" in header) == ("contiguous fit" in out) == (fit != "bytes")
    assert cli.main([log, "--fit", "exact"]) == 2
    assert "invalid choice: 'exact'" in capsys.readouterr().err


# ---- entering, nesting, changing the budget, failing kernels ---------------------------


def test_values_made_before_the_runtime_are_laid_out_in_the_order_they_were_made():
    with isolated_allocator() as allocator:
        first = md.tensor(np.ones(100, np.float32))  # 400 bytes: a block of 512
        # 1,200 bytes (a block of 1,536), after its input (a constant its recipe keeps)
        second = md.tanh(md.tensor(np.ones(300, np.float32)))
        best = md.Runtime(budget=8 * KB, cost="flops", fit="contiguous", placement="best")
        with best as rt:  # (under the default, split, the constants go to the top)
            addresses = allocator.addresses
            assert addresses.address(first.storage) == 0
            assert addresses.address(second.storage) == 512 + 1536
            check_layout(allocator)
            third = md.exp(second)
            assert addresses.address(third.storage) == 512 + 2 * 1536
        assert allocator.addresses is None  # the default runtime fits bytes
        stats = rt.stats()
        assert stats["peak_address"] == 512 + 3 * 1536 and stats["placement_failures"] == 0
        # second and third go by the byte rule; the constants' 1,600 bytes fit 1,800, but
        # their blocks (2,048) do not
        entering = md.Runtime(budget=1800, cost="flops", fit="contiguous")
        with pytest.raises(PlacementError, match="entering the runtime"), entering:
            pass
        assert allocator.addresses is None and allocator.runtime.fit == "bytes"
        del first, second, third


def test_a_new_budget_lays_the_arena_out_again():
    runtime = md.Runtime(budget=16 * KB, cost="flops", fit="contiguous", placement="best")
    with isolated_allocator() as allocator, runtime as rt:
        c = md.tensor(np.ones(256, np.float32))
        kept = [md.tanh(c), md.exp(c), md.sigmoid(c)]
        del kept[1]  # a hole at 2 KiB
        rt.budget = 3 * KB  # the three left are packed: 0, 1 and 2 KiB
        assert allocator.addresses.arena.size == 3 * KB
        assert [allocator.addresses.address(t.storage) for t in (c, *kept)] == [0, KB, 2 * KB]
        check_layout(allocator)
        with md.Runtime(budget=2 * KB, cost="flops"):  # bytes inside: no arena
            assert allocator.addresses is None
            md.exp(c)  # evicts by the byte rule
        check_layout(allocator)  # back in the arena, laid out afresh at 3 KiB
        assert allocator.addresses.arena.size == 3 * KB


def test_a_kernel_that_fails_gives_its_blocks_back():
    class Broken(md.ops.op.Op):
        name = "broken"

        def infer(self, x):
            return [(x.shape, x.dtype)]

        def forward(self, xp, x):
            raise ZeroDivisionError("in the kernel")

    runtime = md.Runtime(budget=8 * KB, cost="flops", fit="contiguous")
    with isolated_allocator() as allocator, runtime:
        c = md.tensor(np.ones(256, np.float32))
        with pytest.raises(ZeroDivisionError):
            md.ops.apply(Broken(), c)
        assert allocator.addresses.pending == []
        check_layout(allocator)
        assert allocator.addresses.arena.used_bytes == KB


def test_a_kernels_workspace_has_a_block_while_it_runs():
    seen = []
    with isolated_allocator() as allocator:
        x = md.tensor(np.ones((8, 4, 16, 16), np.float32))
        w = md.tensor(np.ones((4, 4, 3, 3), np.float32))
        with md.Runtime(budget=10**6, cost="flops", fit="contiguous"):
            addresses = allocator.addresses
            placed = addresses.arena.place

            def noting(nbytes, owner=None):
                seen.append(nbytes)
                return placed(nbytes, owner)

            addresses.arena.place = noting
            y = md.conv2d(x, w, padding=1)
            del addresses.arena.place
            check_layout(allocator)
        assert len(seen) == 2 and seen[0] == y.storage.nbytes  # the output, the workspace
        assert addresses.arena.used_bytes == sum(aligned(t.storage.nbytes) for t in (x, w, y))


@pytest.mark.slow
@pytest.mark.parametrize(
    "model", ["mlp", "resnet", "densenet", "unet", "lstm", "transformer", "treelstm"]
)
def test_every_bundled_trace_replays_identically_with_the_reference_policy(model):
    """Under -m slow: every heuristic (the window too) at 0.7 and 0.5, every placement
    policy: the same events (addresses included), the same measures (failures and
    thrashing included)."""
    trace = sim.load_log(next(p for p in sim.bundled_traces() if p.name.startswith(model)))
    for ratio in (0.7, 0.5):
        for heuristic in (*HEURISTIC_NAMES, "window"):
            for placement in ("split", "best", "first"):
                runs = [
                    sim.simulate(
                        trace, ratio=ratio, heuristic=heuristic, record_events=True,
                        reference=reference, fit="contiguous", placement=placement,
                    )
                    for reference in (False, True)
                ]  # fmt: skip
                where = (model, ratio, heuristic, placement)
                assert runs[0].status == runs[1].status, where
                assert runs[0].extra == runs[1].extra, where


# ---- the window heuristic ----------------------------------------------------------------


def test_the_window_heuristic_needs_the_contiguous_fit(capsys):
    from minidtr.sim import cli

    with pytest.raises(ValueError, match="it needs fit=\"contiguous\", got fit='bytes'"):
        md.Runtime(heuristic="window")
    log = str(next(p for p in sim.bundled_traces() if p.name.startswith("mlp")))
    assert cli.main([log, "--ratios", "0.5", "--heuristics", "dtr,window", "--jobs", "1"]) == 2
    assert "window evicts runs of adjacent blocks: add --fit contiguous" in capsys.readouterr().err
    from minidtr.cli import main

    with pytest.raises(SystemExit) as stop:  # a usage error
        main(["train", "mlp", "--ratio", "0.5", "--heuristic", "window"])
    assert stop.value.code == 2
    assert "add --fit contiguous" in capsys.readouterr().err


def staggered(heuristic: str) -> tuple[list[str], dict]:
    """A free block at 1 KiB, then y, z, w of 1 KiB, last read in the order z, y, w; a
    request of 2 KiB. Which values each heuristic evicts for it, and the statistics."""
    runtime = md.Runtime(
        budget=5 * KB, heuristic=heuristic, cost="flops", fit="contiguous", record_events=True
    )
    with isolated_allocator(), runtime:
        c = md.tensor(np.ones(256, np.float32))
        x, y, z, w = (md.tanh(c) for _ in range(4))  # at 1, 2, 3 and 4 KiB: full
        names = {t.storage.id: name for t, name in ((y, "y"), (z, "z"), (w, "w"))}
        del x
        for t in (z, y, w):  # each read, then an op that moves the clock on
            t.numpy()
            c.sum()
        c.astype(np.float64)
    evicted = [names[e["id"]] for e in runtime.events if e["event"] == "evict" and e["id"] in names]
    return evicted, runtime.stats()


def test_the_window_evicts_next_to_the_free_block_where_dtr_evicts_the_stalest_first():
    """h_DTR evicts z (the stalest), which frees a block away from the free one, then y;
    the window evicts y alone, next to the free block: (c/s_y) is less than the cost of
    any other window of 2 KiB."""
    assert staggered("dtr")[0] == ["z", "y"]
    evicted, stats = staggered("window")
    assert evicted == ["y"] and stats["extra_evictions"] == 0
    assert staggered("dtr")[1]["extra_evictions"] == 1
