"""Memory that nobody needs is not counted: constants keep nothing that made them, per-op
metadata does not pile up on long-lived inputs, garbage in reference cycles does not
count against a run, and an error while a tensor dies is not lost."""

import gc
import os
import threading
import time
import tracemalloc
import weakref

import numpy as np
import pytest
from chains import recipes_above

import minidtr as md
from minidtr import nn
from minidtr.runtime import BudgetError, ThrashError
from minidtr.testing import isolated_allocator
from minidtr.testing.soak import soak

F32 = np.float32


def randn(rng, *shape, scale=1.0):
    return md.tensor((rng.standard_normal(shape) * scale).astype(F32))


# ---- constants drop everything that made them ----------------------------------------------


def test_a_leaf_gradient_keeps_nothing_that_made_it():
    rng = np.random.default_rng(0)
    with isolated_allocator() as allocator:
        W = md.tensor(rng.standard_normal((100, 100)).astype(F32), requires_grad=True)
        X = randn(rng, 1200, 100)
        x_storage = weakref.ref(X.storage)
        md.sum(md.matmul(X, W)).backward()
        del X
        assert x_storage() is None
        assert W.grad.cell.recipe is None
        assert allocator.memory == W.nbytes + W.grad.nbytes == 80_000
        # accumulation over several backward passes does not keep the earlier inputs
        for _ in range(5):
            md.sum(md.matmul(randn(rng, 1200, 100), W)).backward()
        assert allocator.memory == 80_000
        assert allocator.constant_bytes == 80_000


def test_gradient_accumulation_fits_a_budget_that_holds_one_step():
    rng = np.random.default_rng(1)
    with isolated_allocator():
        W = md.tensor(rng.standard_normal((100, 100)).astype(F32), requires_grad=True)
        step_peak = md.Runtime(cost="flops")
        with step_peak:
            md.sum(md.tanh(md.matmul(randn(rng, 600, 100), W))).backward()
        W.grad = None
        # one step, plus the gradient kept from the step before and their sum
        budget = step_peak.stats()["peak_memory"] + 2 * W.nbytes
        with md.Runtime(budget=budget, cost="flops"):
            for _ in range(10):
                md.sum(md.tanh(md.matmul(randn(rng, 600, 100), W))).backward()


def test_banished_parents_leave_nothing_behind_their_new_constants():
    rng = np.random.default_rng(2)
    with isolated_allocator() as allocator, md.Runtime(dealloc="banish"):
        x = randn(rng, 50, 50)
        a = md.tanh(x)
        b = md.exp(a)
        a_storage = weakref.ref(a.storage)
        x_storage = weakref.ref(x.storage)
        del a, x
        assert b.storage.constant and b.cell.recipe is None
        assert a_storage() is None and x_storage() is None
        assert allocator.memory == b.nbytes


def test_optimizer_state_and_new_parameters_keep_no_old_values():
    rng = np.random.default_rng(3)
    with isolated_allocator() as allocator:
        model = nn.Sequential(nn.Linear(20, 30, rng=rng), nn.ReLU(), nn.Linear(30, 5, rng=rng))
        params = list(model.parameters())
        opt = md.optim.Adam(params, lr=1e-2)
        param_bytes = sum(p.nbytes for p in params)
        for _ in range(3):
            x = randn(rng, 16, 20)
            inputs = weakref.ref(x.storage)
            loss = md.mean(model(x) * model(x))
            opt.zero_grad()
            loss.backward()
            opt.step()
            del x, loss
            assert inputs() is None
            for tensors in (params, [p.grad for p in params], opt.exp_avg, opt.exp_avg_sq):
                assert all(t.cell.recipe is None and t.storage.constant for t in tensors)
            # parameters, gradients and both moments; nothing of the step before
            assert allocator.memory == 4 * param_bytes


def test_kept_losses_do_not_keep_their_steps_parameters():
    rng = np.random.default_rng(14)
    with isolated_allocator() as allocator:
        model = nn.Sequential(nn.Linear(20, 30, rng=rng), nn.ReLU(), nn.Linear(30, 5, rng=rng))
        opt = md.optim.SGD(model.parameters(), lr=1e-2)
        losses = []
        for step in range(6):
            loss = md.mean(model(randn(rng, 16, 20)) ** 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)  # kept, as a logging loop might
            if step == 1:
                settled = allocator.memory
        assert allocator.memory == settled + 4 * 4
        assert all(t.storage.constant for t in losses)
        loss = md.mean(model(randn(rng, 16, 20)) ** 2)
        loss.backward(retain_graph=True)  # the graph is kept, so is the recipe
        assert not loss.storage.constant


def test_running_statistics_keep_no_batch_alive():
    rng = np.random.default_rng(4)
    with isolated_allocator() as allocator:
        norm = nn.BatchNorm2d(3)
        fixed = allocator.memory
        for _ in range(3):
            x = randn(rng, 4, 3, 5, 5)
            batch = weakref.ref(x.storage)
            y = norm(x)
            del x, y
            assert batch() is None
            assert allocator.memory == fixed


def test_a_view_of_a_constant_keeps_only_the_constant():
    rng = np.random.default_rng(5)
    with isolated_allocator() as allocator:
        W = md.tensor(rng.standard_normal((30, 40)).astype(F32), requires_grad=True)
        md.sum(md.matmul(randn(rng, 10, 30), W)).backward()
        view = W.grad.T
        detached = W.grad.detach()
        W.grad = None
        assert view.cell.recipe.inputs[0].recipe is None
        assert allocator.memory == W.nbytes + view.storage.nbytes
        del view, detached
        assert allocator.memory == W.nbytes


# ---- per-op metadata on long-lived inputs ---------------------------------------------------


def eval_loop(W, x, steps):
    for _ in range(steps):
        md.sum(md.tanh(md.matmul(x, W)))


@pytest.mark.skipif(
    os.environ.get("MINIDTR_AUDIT") == "1",
    reason="measures minidtr without the audit (which copies outputs, general path)",
)
@pytest.mark.parametrize("budget", [None, 10**7])
def test_twenty_thousand_ops_on_one_weight_hold_no_metadata(budget):
    rng = np.random.default_rng(6)
    with isolated_allocator(), md.Runtime(budget=budget):
        W = randn(rng, 16, 16)
        x = randn(rng, 4, 16)
        for _ in range(20_000):
            md.matmul(x, W)
        assert len(W.storage.children) <= 8 and len(x.storage.children) <= 8
        eval_loop(W, x, 500)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            eval_loop(W, x, 2_000)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < 10_000, f"6,000 ops grew Python memory by {grown:,} bytes"


def test_live_children_are_all_kept_in_creation_order():
    rng = np.random.default_rng(7)
    with isolated_allocator():
        W = randn(rng, 8, 8)
        kept = []
        for i in range(500):
            y = md.tanh(W)
            if i % 7 == 0:
                kept.append(y)
        del y
        assert len(W.storage.children) < 2 * len(kept) + 8
        assert W.storage.live_children() == [t.storage for t in kept]


def test_a_budget_set_later_still_sees_the_children_made_before_it():
    """Children are recorded with or without a budget: a budget set afterwards scores
    e* with them, rebuilds orphans of a dead parent and banishes safely."""
    rng = np.random.default_rng(8)
    with isolated_allocator() as allocator:
        rt = md.Runtime(dealloc="banish")
        with rt:
            x = randn(rng, 64, 64)
            a = md.tanh(x)
            b = md.exp(a)
            c = md.sigmoid(a)
            expected = b.numpy(), c.numpy()
            assert a.storage.live_children() == [b.storage, c.storage]
            rt.budget = allocator.memory
            allocator.evict(b.storage)
            del a  # b is evicted and still needs a: a cannot be banished
            assert not b.storage.constant
            np.testing.assert_array_equal(b.numpy(), expected[0])
            np.testing.assert_array_equal(c.numpy(), expected[1])


def test_a_dead_parent_rebuilds_orphans_made_before_the_budget():
    rng = np.random.default_rng(9)
    with isolated_allocator() as allocator:
        rt = md.Runtime()
        with rt:
            x = randn(rng, 64, 64)
            a = md.tanh(x)
            b = md.exp(a)
            expected = b.numpy()
            rt.budget = allocator.memory + 10 * b.nbytes
            allocator.evict(b.storage)
            del a  # b is an orphan of a: rebuilt before a goes
            assert b.is_resident and rt.stats()["orphan_remats"] == 1
            np.testing.assert_array_equal(b.numpy(), expected)


def test_deaths_skip_the_orphan_test_only_until_a_referenced_value_is_evicted():
    """Under a budget a dying temporary is evicted inline while no referenced storage has
    ever been evicted (no death can leave an orphan then); the first such eviction, for any
    reason but a death, turns the orphan test on for good, across budgets."""
    rng = np.random.default_rng(10)
    with isolated_allocator() as allocator:
        table = allocator.eviction.candidates
        with md.Runtime(budget=1 << 30):
            x = randn(rng, 8, 8)
            md.tanh(x)  # a temporary: it dies at once, evicted inline
            b = md.exp(x)
            c = md.tanh(b)
            expected = c.numpy()
            assert not table.orphans_possible and allocator.stats.dead_evictions == 1
            allocator.evict(c.storage, reason="test")
            assert table.orphans_possible
        with md.Runtime(budget=1 << 30) as rt:
            assert table.orphans_possible  # c is still evicted: the test stays on
            del b  # c is an orphan of b: rebuilt before b goes
            assert c.is_resident and rt.stats()["orphan_remats"] == 1
            np.testing.assert_array_equal(c.numpy(), expected)


# ---- garbage in reference cycles -------------------------------------------------------------


def tree_program(depth: int = 5, width: int = 128, batch: int = 4) -> float:
    """A recursive closure (a Tree-LSTM encoder's shape): ``encode`` refers to itself, so
    when the program returns, its inputs, weight, gradient and states are garbage in a
    reference cycle, freed only by Python's cycle collector."""
    rng = np.random.default_rng(0)
    x = randn(rng, batch, width)
    W = md.tensor((rng.standard_normal((width, width)) * 0.1).astype(F32), requires_grad=True)
    states = []

    def encode(d):
        if d == 0:
            h = md.tanh(md.matmul(x, W))
        else:
            h = md.tanh(md.matmul(encode(d - 1) + encode(d - 1), W))
        states.append(h)
        return h

    root = encode(depth)
    loss = md.sum(root * root)
    loss.backward()
    return loss.item()


@pytest.mark.parametrize("collector", ["default", "disabled", "eager"])
def test_garbage_in_cycles_does_not_count_against_the_next_run(collector):
    thresholds = gc.get_threshold()
    was_enabled = gc.isenabled()
    with isolated_allocator():
        reference = md.Runtime(cost="flops")
        with reference:
            expected = tree_program()
        budget = int(0.7 * reference.stats()["peak_memory"])
        try:
            if collector == "disabled":
                gc.disable()
            elif collector == "eager":
                gc.set_threshold(1)
            results = []
            for _ in range(4):
                rt = md.Runtime(budget=budget, cost="flops")
                with rt:
                    value = tree_program()
                stats = rt.stats()
                results.append((value, stats["remats"], stats["evictions"], stats["peak_memory"]))
        finally:
            gc.set_threshold(*thresholds)
            if was_enabled:
                gc.enable()
    assert results[0][1] > 0
    assert results == [results[0]] * 4
    assert results[0][0] == expected


def test_no_collection_runs_while_entering_picks_the_young_storages(monkeypatch):
    """Entering picks this allocator's storages out of ``gc.get_objects()``, a list that
    holds every young object, garbage included, then collects the young generations. A
    collection set off meanwhile (by the weak references it makes) would find the garbage
    alive and move it to the oldest generation, out of that collection's reach, to be freed
    whenever a full one happens to run: what a run then evicts depended on it (the test
    above failed so under ``gc.set_threshold(1)``). Such a collection is simulated here, as
    the interpreter would start one, only while automatic collection is on."""
    from minidtr.runtime.lifetime import older_collections

    with isolated_allocator() as allocator:
        with md.Runtime(cost="flops"):
            tree_program(depth=3)  # its values are garbage in a reference cycle now
        assert allocator.memory > 0
        assert older_collections() == allocator.lifetimes.young_since  # the young path
        get_objects = gc.get_objects

        def get_objects_then_collect(generation=None):
            objects = get_objects(generation)
            if generation == 1 and gc.isenabled():  # while the list holds generation 1
                gc.collect(1)
            return objects

        monkeypatch.setattr(gc, "get_objects", get_objects_then_collect)
        with md.Runtime(budget=1 << 30, cost="flops"):
            assert allocator.memory == 0  # the garbage's values went on entering


def test_entering_a_budgeted_runtime_with_live_values_is_cheap():
    """In a process with a large heap (PyTorch alone brings some 170,000 objects), a full
    collection takes tens of milliseconds; entering a budgeted runtime on an allocator made
    since the last collection of the older generations collects only the young ones."""
    heap = [[i] for i in range(300_000)]  # a large library's objects, in the oldest generation
    gc.collect()
    started = time.perf_counter()
    gc.collect()
    full = time.perf_counter() - started
    entries = []
    for _ in range(3):
        gc.collect()
        with isolated_allocator() as allocator:
            md.manual_seed(0)
            model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
            x = md.randn((8, 16))
            model(x).sum().backward()
            runtime = md.Runtime(budget=allocator.memory + 10_000)
            started = time.perf_counter()
            with runtime:
                entries.append(time.perf_counter() - started)
                model(x).sum().backward()
    del heap
    assert full > 0.005, f"the heap is too small to tell: a full collection took {full:.4f} s"
    assert min(entries) < 0.005, (entries, full)


def test_a_young_collection_lists_the_candidates_a_full_scan_does():
    """Entering a budget on an allocator whose values all lie in the young generations finds
    its candidates among the survivors of the young collection: the same ones, in the same
    order, as the scan of the whole heap that follows a full collection."""
    listings = []
    for full in (False, True):
        gc.collect()
        with isolated_allocator() as allocator:
            rng = np.random.default_rng(1)
            x = randn(rng, 64)
            kept = [md.tanh(x * i) for i in range(6)]
            garbage = [md.exp(x)]
            garbage.append(garbage)  # a cycle: freed by the collection on entering
            del garbage
            if full:
                gc.collect(1)  # a collection of generation 1 since the allocator was made
            with md.Runtime(budget=10**6):
                listings.append([s.id for s in allocator.eviction.candidates])
            del kept
    assert listings[0] == listings[1] and len(listings[0]) == 6


@pytest.mark.parametrize("reference", [False, True])
def test_deaths_during_a_cycle_collection_wait_until_it_ends(reference):
    """Python's cycle collector clears the weak references to garbage before it runs any
    finalizer, so the policy waits for the end of the pass: a finalizer that runs after a
    handle's death still sees its value resident, and by the time ``gc.collect()``
    returns the value is freed."""
    seen = []

    class Probe:
        def __init__(self, storage):
            self.storage = storage

        def __del__(self):
            seen.append(self.storage.buffer is not None)

    rng = np.random.default_rng(11)
    with isolated_allocator(), md.Runtime(budget=1 << 30, reference=reference):
        y = md.tanh(randn(rng, 64))  # made before the probe: finalized before it
        storage = y.storage
        cycle = [y, Probe(storage)]
        cycle.append(cycle)
        del y, cycle
        gc.collect()
        assert seen == [True]
        assert storage.buffer is None


@pytest.mark.parametrize("reference", [False, True])
def test_a_pass_in_another_thread_does_not_hold_this_threads_deaths(reference):
    """A pass of the collector lets other threads run between its finalizers. A value that
    another thread's program releases meanwhile is that program's death, applied at once,
    as with no pass running: so a replay in a thread pool decides what it decides alone
    (before, it waited for the pass's end, and a threaded sweep counted one eviction more
    than the serial one in about one run of eight)."""
    inside, finish = threading.Event(), threading.Event()

    class Blocker:
        def __del__(self):
            inside.set()
            finish.wait(10)

    def collect():
        cycle = [Blocker()]
        cycle.append(cycle)
        del cycle
        gc.collect()

    rng = np.random.default_rng(12)
    with isolated_allocator(), md.Runtime(budget=1 << 30, reference=reference):
        y = md.tanh(randn(rng, 64))
        storage = y.storage
        collector = threading.Thread(target=collect)
        collector.start()
        try:
            assert inside.wait(10)  # the pass is running, in the other thread
            del y
            freed_at_once = storage.buffer is None
        finally:
            finish.set()
            collector.join()
    assert freed_at_once


def test_a_budget_error_comes_only_after_collecting_garbage():
    rng = np.random.default_rng(10)
    with isolated_allocator() as allocator, md.Runtime(budget=2 * 4096):
        garbage = [randn(rng, 1024)]
        garbage.append(garbage)  # a cycle holding a 4 kB constant
        del garbage
        gc.disable()
        try:
            a = randn(rng, 1024)
            b = randn(rng, 1024)  # fits only once the cycle is collected
        finally:
            gc.enable()
        assert allocator.memory == a.nbytes + b.nbytes
        with pytest.raises(BudgetError):
            randn(rng, 2048)
        assert allocator.memory == 2 * 4096


# ---- errors while a tensor dies ----------------------------------------------------------------


def orphan_about_to_thrash(rt, allocator, seed: int):
    """Inside ``rt``: x -> a = tanh(x) -> b = exp(a) with b evicted and the thrash guard
    armed, so the next rematerialization (b's rebuild as an orphan once a dies) raises
    ThrashError. Returns (x, a, b)."""
    x = randn(np.random.default_rng(seed), 32, 32)
    a = md.tanh(x)
    b = md.exp(a)
    rt.budget = allocator.memory + 4 * b.nbytes
    allocator.evict(b.storage)
    rt.max_slowdown = 1.0
    rt.stats_.remats = 10**6  # the thrash guard trips at the next replay
    rt.stats_.remat_cost = rt.stats_.compute_cost
    return x, a, b


def test_a_thrash_error_while_a_tensor_dies_evicts_it_and_surfaces_at_exit():
    with isolated_allocator() as allocator:
        rt = md.Runtime()
        with pytest.raises(ThrashError), rt:
            x, a, b = orphan_about_to_thrash(rt, allocator, 11)
            a_storage = a.storage
            del a  # b is an orphan: its rebuild raises inside Tensor.__del__
            assert a_storage.buffer is None, "the dead parent must not stay resident"
            assert not b.is_resident
        assert allocator.pending_error is None
        # the runtime is clean: the orphan still rebuilds through its chain
        np.testing.assert_array_equal(b.numpy(), np.exp(np.tanh(x.numpy())))


def test_an_error_while_a_tensor_dies_surfaces_at_the_next_op():
    with isolated_allocator() as allocator:
        rt = md.Runtime()
        with rt:
            x, a, b = orphan_about_to_thrash(rt, allocator, 12)
            del a
            with pytest.raises(ThrashError):
                md.tanh(x)
            assert allocator.pending_error is None
            rt.max_slowdown = None
            np.testing.assert_array_equal(b.numpy(), np.exp(np.tanh(x.numpy())))


def test_deaths_inside_a_busy_allocator_wait_for_the_access_to_end():
    """A garbage-collector pass during an op may kill tensors: their storages are evicted
    when the op is done, not under it."""
    rng = np.random.default_rng(13)
    with isolated_allocator() as allocator, md.Runtime():
        x = randn(rng, 16, 16)
        a = md.tanh(x)
        dead = a.storage
        seen = []

        class Probe(md.ops.Op):
            name = "probe"

            def infer(self, cell):
                return [(cell.shape, cell.dtype)]

            def forward(self, xp, array):
                nonlocal a
                del a  # the last handle dies while the allocator is busy
                seen.append(dead.buffer is not None)
                return array + 1

        y = md.ops.apply(Probe(), x)
        assert seen == [True]
        assert dead.buffer is None and dead not in allocator.eviction.candidates
        assert y.is_resident


# ---- soak ----------------------------------------------------------------------------------------


def test_a_soak_run_holds_counted_and_python_memory_flat():
    """200 unbudgeted and 100 budgeted steps of a small MLP with Adam (benchmarks/soak.py
    runs thousands): after the first steps, the allocator counts the same bytes after every
    step and Python's memory does not grow."""
    report = soak(200, 100, every=30)
    assert report.remats > 0 and report.evictions > 0
    for phase in ("unbudgeted", "budgeted"):
        samples = report.phase(phase)
        assert len(samples) >= 3
        assert {s.counted for s in samples} == {samples[0].counted}, samples
        # from the second sample on: the parameters the first steps replaced are traced now
        first, last = samples[1], samples[-1]
        per_step = (last.traced - first.traced) / (last.step - first.step)
        assert per_step < 50, f"{phase}: Python memory grew {per_step:.0f} bytes per step"


def test_the_cuda_oom_handler_collects_garbage_before_giving_up(monkeypatch):
    """With a stand-in for CuPy: an allocation that fails until a reference cycle holding
    device memory is collected succeeds after one collection; one that never fits fails."""
    from types import SimpleNamespace

    from minidtr import backend

    class OutOfMemoryError(Exception):
        pass

    freed = []

    class Holder:
        def __del__(self):
            freed.append(True)

    class Pool:
        def malloc(self, nbytes):
            if nbytes > 100 or not freed:
                raise OutOfMemoryError(nbytes)
            return ("block", nbytes)

        def free_all_blocks(self):
            pass

    installed = []
    fake = SimpleNamespace(
        get_default_memory_pool=Pool,
        cuda=SimpleNamespace(
            memory=SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
            set_allocator=installed.append,
        ),
    )
    monkeypatch.setattr(backend, "_import_cupy", lambda: fake)
    evictions = []
    backend.install_cuda_oom_handler(lambda nbytes: evictions.append(nbytes) and False)
    malloc = installed[0]
    cycle = [Holder()]
    cycle.append(cycle)
    del cycle
    gc.disable()
    try:
        assert malloc(64) == ("block", 64)
    finally:
        gc.enable()
    assert freed == [True] and evictions == [64]
    with pytest.raises(OutOfMemoryError):
        malloc(1000)
    assert evictions == [64, 1000, 1000]


def test_an_error_while_settling_deaths_of_an_op_is_raised_by_that_op():
    with isolated_allocator() as allocator:
        rt = md.Runtime()
        with rt:
            x, a, b = orphan_about_to_thrash(rt, allocator, 15)
            dead = a.storage

            class Probe(md.ops.Op):
                name = "probe"

                def infer(self, cell):
                    return [(cell.shape, cell.dtype)]

                def forward(self, xp, array):
                    nonlocal a
                    del a  # dies while the allocator is busy: settled when the op is done
                    return array + 1

            with pytest.raises(ThrashError):
                md.ops.apply(Probe(), x)
            assert dead.buffer is None and allocator.pending_error is None
            rt.max_slowdown = None
            np.testing.assert_array_equal(b.numpy(), np.exp(np.tanh(x.numpy())))


def _carried_state_loop(steps: int, **runtime_options) -> tuple[list[float], int]:
    """Truncated backpropagation through time: a state carried from step to step with
    ``detach()``, one SGD step each. Returns the losses and the bytes counted as constants
    at the end."""
    rng = np.random.default_rng(0)
    w = md.tensor(rng.standard_normal((32, 32)).astype(np.float32) * 0.1, requires_grad=True)
    x = md.tensor(rng.standard_normal((4, 32)).astype(np.float32))
    h = md.tensor(np.zeros((4, 32), np.float32))
    optimizer = md.optim.SGD([w], lr=0.01)
    losses = []
    with isolated_allocator() as allocator, md.Runtime(cost="flops", **runtime_options):
        for _ in range(steps):
            h = (h.detach() @ w + x).tanh()
            loss = (h * h).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        return losses, allocator.ledger.constant_bytes


@pytest.mark.parametrize("dealloc", ["eager", "banish"])
def test_a_state_carried_across_steps_keeps_no_old_parameters(dealloc):
    """Each SGD step replaces the weight (``Tensor.assign``) while the carried state's
    recipe still reads the old one: the state becomes a constant instead
    (``Lifetimes.free_dead_constant``; under ``banish``, by banishing), so the constants
    counted stay as they were after a few steps (the weight, the input, the state), a
    budget that sixty old weights would not fit is kept, and the losses are the
    unbudgeted run's, bit for bit."""
    unbudgeted, _ = _carried_state_loop(60)
    _, few = _carried_state_loop(6, dealloc=dealloc)
    losses, constants = _carried_state_loop(60, dealloc=dealloc, budget=40_000)
    assert losses == unbudgeted
    assert constants == few


@pytest.mark.parametrize("case", ["evicted", "larger"])
def test_an_old_parameter_stays_while_a_value_may_need_it(case):
    """Copy-on-write holds where it must: a referenced value computed from the old weight
    that is evicted when the weight is replaced, or that is larger than the old weight,
    keeps its recipe (and the old weight stays); rebuilt, it is exact."""
    rng = np.random.default_rng(3)
    with isolated_allocator(), md.Runtime(budget=1 << 30, cost="flops") as rt:
        w = md.tensor(rng.standard_normal((8, 8)).astype(F32), requires_grad=True)
        x = randn(rng, 8, 8)
        # "larger": 1 KB against the weight's 256 B
        value = (x @ w).tanh() if case == "evicted" else md.concat([x @ w] * 4, axis=0)
        expected = value.numpy().copy()
        if case == "evicted":
            rt.allocator.evict(value.storage)
        old = weakref.ref(w.storage)
        (w * w).sum().backward()
        md.optim.SGD([w], lr=0.1).step()
        assert value.storage.op is not None and old() is not None
        if case == "larger":
            rt.allocator.evict(value.storage)
        np.testing.assert_array_equal(value.numpy(), expected)


def test_a_smaller_value_read_from_an_old_parameter_becomes_a_constant():
    """The case the rule is for: once the old weight is dead, a resident value of fewer
    bytes that reads it becomes a constant, and the old weight is freed."""
    rng = np.random.default_rng(5)
    with isolated_allocator(), md.Runtime(budget=1 << 30, cost="flops"):
        w = md.tensor(rng.standard_normal((8, 8)).astype(F32), requires_grad=True)
        with md.no_grad():  # (a graph would hold the weight: its backward reads it)
            value = (randn(rng, 2, 8) @ w).tanh()  # 64 B against the weight's 256 B
        expected = value.numpy().copy()
        old = weakref.ref(w.storage)
        (w * w).sum().backward()
        md.optim.SGD([w], lr=0.1).step()
        gc.collect()
        assert value.storage.op is None and old() is None
        np.testing.assert_array_equal(value.numpy(), expected)


def test_values_built_from_a_temporary_constant_stay_evictable():
    """Only an old version an update replaced frees what reads it: a value computed from a
    temporary input keeps its recipe when the input dies."""
    rng = np.random.default_rng(4)
    with isolated_allocator(), md.Runtime(budget=1 << 30, cost="flops"):
        y = md.tanh(randn(rng, 64))
        assert y.storage.op is not None and y.storage.evictable


def _fed_back_loop(steps: int, keep_every: int = 0, **runtime_options):
    """A state fed back into its own recipe under ``no_grad`` (a generation loop): three
    ops a step, nothing updated. With ``keep_every``, every so many steps the state is
    also kept in a sliding window of eight (read back, rematerialized under a budget,
    when it leaves). Returns the states read, the recipes above the last state (the
    chain), and the runtime's statistics."""
    rng = np.random.default_rng(0)
    with isolated_allocator(), md.Runtime(cost="flops", **runtime_options) as rt:
        w = md.tensor((rng.standard_normal((64, 64)) * 0.2).astype(F32))
        b = md.tensor(rng.standard_normal(64).astype(F32))
        h = md.tensor(np.zeros((16, 64), F32))
        window, read = [], []
        with md.no_grad():
            for step in range(steps):
                h = (h @ w + b).tanh()
                if keep_every and step % keep_every == 0:
                    window.append(h)
                    if len(window) > 8:
                        read.append(window.pop(0).numpy().copy())
            read.append(h.numpy().copy())
        return read, recipes_above(h.storage), rt.stats()


@pytest.mark.parametrize("budget", [None, 1 << 20])
def test_a_state_fed_back_under_no_grad_keeps_a_bounded_chain(budget):
    """Without the cut (``Lifetimes.cut_dead_chains``) 3,000 steps leave 9,000 dead
    values' metadata above the last state, all of them kept for a rebuild of it; with
    it, fewer than ``CHAIN_CHECK`` plus a step's, and every state is the one a run that
    frees each dead value for good (``banish``) computes, bit for bit."""
    from minidtr.runtime.lifetime import CHAIN_CHECK

    banished, kept, _ = _fed_back_loop(3_000, dealloc="banish")
    assert kept == 0
    states, chain, _ = _fed_back_loop(3_000, budget=budget)
    assert chain <= CHAIN_CHECK + 3 < 9_000
    assert len(states) == len(banished) == 1
    np.testing.assert_array_equal(states[0], banished[0])


def test_a_cut_chain_keeps_a_tight_budget_exact_and_quick():
    """The states kept for a while are evicted and rebuilt under 60% of the unbudgeted
    peak, each the unbudgeted run's, bit for bit; without the cut, h_DTR's e* terms over
    thousands of dead values above each state made this run stop as thrashing (eviction
    work 130 times the step's)."""
    unbudgeted, _, stats = _fed_back_loop(2_000, keep_every=50)
    states, chain, budgeted = _fed_back_loop(
        2_000, keep_every=50, budget=stats["peak_memory"] * 6 // 10
    )
    assert budgeted["remats"] > 0 and len(states) == len(unbudgeted) > 30
    for got, want in zip(states, unbudgeted, strict=True):
        np.testing.assert_array_equal(got, want)


def _lstm_generation(steps: int, **runtime_options):
    """An LSTM cell fed its own state, token after token, under ``no_grad``: two ops a step,
    one of them with two outputs (``lstm_cell``'s h and c share a recipe)."""
    from minidtr.ops.rnn import lstm_cell, lstm_gates

    rng = np.random.default_rng(2)
    with isolated_allocator(), md.Runtime(cost="flops", **runtime_options):
        w_ih = md.tensor((rng.standard_normal((128, 16)) * 0.2).astype(F32))
        w_hh = md.tensor((rng.standard_normal((128, 32)) * 0.2).astype(F32))
        embedding = md.tensor(rng.standard_normal((16, 16)).astype(F32))
        h, c = md.tensor(np.zeros((1, 32), F32)), md.tensor(np.zeros((1, 32), F32))
        with md.no_grad():
            for step in range(steps):
                x = embedding[step % 16].reshape(1, 16)
                h, c = lstm_cell(lstm_gates(x, h, w_ih, w_hh), c)
        return h.numpy().copy(), c.numpy().copy(), recipes_above(h.storage)


def test_an_lstm_generation_loop_keeps_a_bounded_chain():
    """The same for a cell whose two outputs share a recipe: 3.2 KB of metadata a step
    before the cut; now fewer than about 1,024 recipes above the state, and h and c
    those of ``banish``, bit for bit."""
    h, c, chain = _lstm_generation(2_500)
    banished_h, banished_c, _ = _lstm_generation(2_500, dealloc="banish")
    assert chain < 1_100
    np.testing.assert_array_equal(h, banished_h)
    np.testing.assert_array_equal(c, banished_c)
