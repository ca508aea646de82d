"""The accelerator's usefulness (fast/usefulness.py), its yeses kept until what they read
changes, answers as the reference's search (lifetime.useful_dead) at every question a
budgeted run asks, on random programs and training loops under random budgets."""

import contextlib
import dataclasses
import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidtr as md
from minidtr.runtime import fast, lifetime
from minidtr.runtime.fast import usefulness
from minidtr.tensor import Tensor
from minidtr.testing import isolated_allocator, run_under
from minidtr.testing.strategies import random_programs, training_loops


@contextlib.contextmanager
def asking_both():
    """Every question an accelerated runtime made inside asks, answered by both; yields
    the list of (accelerated answer, reference answer, searched) triples (not searched:
    a yes kept, or a no told by ``none_below`` or ``none_reached``)."""
    answers = []
    saved = usefulness.Usefulness.__call__

    def both(self, storage):
        searched = not (
            storage.id in self.regions or self.none_below(storage) or self.none_reached(storage)
        )
        fast_answer = saved(self, storage)
        answers.append((fast_answer, lifetime.useful_dead(storage), searched))
        return fast_answer

    usefulness.Usefulness.__call__ = both
    try:
        yield answers
    finally:
        usefulness.Usefulness.__call__ = saved


def inputs(seed: int) -> tuple[Tensor, Tensor]:
    """A (32, 32) input and a (32, 64) weight, float32, in the allocator in use."""
    rng = np.random.default_rng(seed)
    x = md.tensor(rng.standard_normal((32, 32)).astype(np.float32))
    return x, md.tensor(rng.standard_normal((32, 64)).astype(np.float32))


def evicted_through_evicted(allocator, a: Tensor, weight: Tensor) -> Tensor:
    """``w = exp(a) @ weight``, evicted, with ``u = exp(a)`` dropped (kept: ``w``'s rebuild
    needs it; twice its bytes, ``w`` is not rebuilt as its orphan) and then evicted: a
    referenced, evicted ``w`` below ``a`` through an evicted ``u`` nobody references."""
    u = md.exp(a)
    w = u @ weight
    allocator.evict(w.storage)
    u_storage = u.storage
    del u
    allocator.evict(u_storage)
    return w


def run_budgeted(fn, fraction: float, dealloc: str) -> None:
    with isolated_allocator():
        unbounded = md.Runtime(cost="flops")
        run_under(fn, unbounded, fresh=False)
        budget = int(fraction * unbounded.stats()["peak_memory"])
        try:
            run_under(
                fn, md.Runtime(budget=max(budget, 1), cost="flops", dealloc=dealloc), fresh=False
            )
        except md.BudgetError:
            pass


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(random_programs(), training_loops().map(lambda kind_fn: kind_fn[1])),
    st.floats(0.2, 0.9),
    st.sampled_from(["eager", "banish"]),
)
def test_the_accelerated_search_answers_as_the_reference(fn, fraction, dealloc):
    with asking_both() as answers:
        run_budgeted(fn, fraction, dealloc)
    assert all(a == b for a, b, _ in answers)


def test_a_budgeted_tree_lstm_asks_and_both_agree():
    from minidtr.training import TrainConfig, train

    with asking_both() as answers, isolated_allocator():
        train(TrainConfig("treelstm", steps=1, ratio=0.3, evaluate=False, max_wall_slowdown=None))
    assert len(answers) > 10 and any(a for a, _, _ in answers) and not all(a for a, _, _ in answers)
    assert all(a == b for a, b, _ in answers)
    # a yes is mostly given again from the one kept, not by searching again
    kept = sum(a and not searched for a, _, searched in answers)
    assert kept > sum(a and searched for a, _, searched in answers)
    # and most noes without a search: no evicted storage with a handle was made later
    told = sum(not a and not searched for a, _, searched in answers)
    assert told > 2 * sum(not a and searched for a, _, searched in answers)


def test_a_budgeted_lstm_tells_its_noes_by_walking_up_from_the_witnesses():
    """On the LSTM every question is a no, and a later evicted storage with a handle (a
    recurrent state, a pending gradient) exists at most of them, so ``none_below`` cannot
    tell; the walk up from those witnesses (``none_reached``) does, without searching."""
    from minidtr.training import TrainConfig, train

    told = []
    saved = usefulness.Usefulness.none_reached

    def counted(self, storage):
        answer = saved(self, storage)
        told.append(answer)
        return answer

    usefulness.Usefulness.none_reached = counted
    try:
        with asking_both() as answers, isolated_allocator():
            config = TrainConfig("lstm", steps=1, ratio=0.3, evaluate=False)
            train(dataclasses.replace(config, max_wall_slowdown=None))
    finally:
        usefulness.Usefulness.none_reached = saved
    assert len(answers) > 10 and not any(a for a, _, _ in answers)
    assert all(a == b for a, b, _ in answers)
    assert sum(told) > 10 and not any(searched for _, _, searched in answers)


def test_a_witness_below_through_evicted_storages_is_reached():
    """``w`` (evicted, referenced) is below ``a`` through ``u`` and ``v`` (evicted, nobody's),
    and made after both: the walk up from ``w`` meets ``a``, so ``a`` is searched (and
    kept); below ``b``, whose child is resident, no walk meets it: told no, and freed."""
    with asking_both() as answers, isolated_allocator() as allocator, md.Runtime(budget=1 << 30):
        x, weight = inputs(7)
        a = md.tanh(x)
        b = md.exp(x)
        c = md.tanh(b)  # resident, referenced: b's only child
        u = md.exp(a)
        v = md.tanh(u)
        w = v @ weight  # twice v's bytes: not rebuilt as an orphan
        allocator.evict(w.storage)
        table = allocator.eviction.candidates
        u_storage, v_storage = u.storage, v.storage
        del v  # kept (w needs it), then evicted
        allocator.evict(v_storage)
        del u  # kept (w needs it through v), then evicted
        allocator.evict(u_storage)
        a_storage, b_storage = a.storage, b.storage
        assert not table.usefulness.none_reached(a_storage)
        assert table.usefulness.none_reached(b_storage)
        del a, b
        assert a_storage.buffer is not None and b_storage.buffer is None
        del c
    assert answers and all(fast_answer == reference for fast_answer, reference, _ in answers)


def test_a_kept_yes_is_not_given_while_its_witness_is_collected():
    """``a`` is kept for ``w`` (evicted, referenced), then ``w``'s handle and ``y``'s become
    garbage in a reference cycle. The collector clears the weak references to the garbage
    before any finalizer runs: had ``y``'s death made the allocator ask about ``a`` then,
    the reference's search would no longer see ``w`` (its handle not dead yet) while the
    yes kept from before said yes. The deaths wait for the end of the pass
    (``cycles.CycleCollection``), when ``w``'s handle has died too: both say no."""
    with asking_both() as answers, isolated_allocator() as allocator, md.Runtime(budget=1 << 30):
        x, weight = inputs(8)
        y = md.exp(x)  # made before w's handle: finalized first
        a = md.tanh(x)
        w = evicted_through_evicted(allocator, a, weight)
        a_storage = a.storage
        del a
        md.tanh(x)  # a is asked again: the yes kept
        assert a_storage.buffer is not None
        cycle = [y, w]
        cycle.append(cycle)
        del y, w, cycle
        gc.collect()
        assert a_storage.buffer is None
    assert any(not searched and fast for fast, _, searched in answers)  # a yes was kept
    assert all(fast_answer == reference for fast_answer, reference, _ in answers)


@pytest.mark.parametrize("child", ["referenced", "dead", "above an evicted one"])
def test_a_kept_yes_outlives_the_eviction_of_a_child_read_no_further(child):
    """``a`` is kept for ``w`` (its search saw a, u, w). Then ``c``, a resident child of
    ``a`` (which the search read), is evicted. Asked again, the search would see ``c``
    and, when ``c`` has a handle (a witness) or no evicted child, read nothing below it:
    the yes is kept, with ``c`` in its region. When ``c`` has an evicted child the search
    would go on below it: it is searched again."""
    with asking_both() as answers, isolated_allocator() as allocator, md.Runtime(budget=1 << 30):
        x, weight = inputs(9)
        a = md.tanh(x)
        c = md.exp(a)
        below = c @ weight if child == "above an evicted one" else md.tanh(c)
        w = evicted_through_evicted(allocator, a, weight)
        a_storage, c_storage = a.storage, c.storage
        del a
        md.tanh(x)  # a is asked again: the yes kept
        regions = allocator.eviction.candidates.usefulness.regions
        assert a_storage.buffer is not None and a_storage.id in regions
        asked = len(answers)
        if child == "above an evicted one":
            allocator.evict(below.storage)  # twice c's bytes: not rebuilt as its orphan
        if child != "referenced":
            del c
        if c_storage.buffer is not None:  # (a dead c without an evicted child is evicted)
            allocator.evict(c_storage)
        kept = child != "above an evicted one"
        assert (a_storage.id in regions) == kept
        if kept:
            assert c_storage.id in regions[a_storage.id]
        md.tanh(x)
        assert a_storage.buffer is not None
        assert any(searched for _, _, searched in answers[asked:]) == (not kept)
        del w, below
    assert all(fast_answer == reference for fast_answer, reference, _ in answers)


def test_install_and_uninstall_swap_the_search():
    with isolated_allocator() as allocator:
        with md.Runtime(budget=10**9):
            assert isinstance(allocator.lifetimes.is_useful, usefulness.Usefulness)
            with md.Runtime(reference=True):
                assert allocator.fast is None
                assert allocator.lifetimes.is_useful.__func__ is lifetime.Lifetimes.is_useful
        assert isinstance(allocator.fast, fast.FastPath)


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("change", ["rebuilt", "last handle"])
def test_a_kept_dead_storage_is_freed_once_what_made_it_useful_changes(reference, change):
    """``a`` dies while ``w``, evicted and referenced, needs it through ``u`` (evicted,
    unreferenced): it is kept. Once ``w`` is rebuilt, or its last handle dies, nothing
    needs ``a`` and it is freed after the next access; the accelerator, which keeps its
    yes, must hear of that change as the reference's fresh search sees it."""
    with isolated_allocator() as allocator, md.Runtime(budget=1 << 30, reference=reference):
        x, weight = inputs(3)
        a = md.tanh(x)
        u = md.exp(a)
        w = u @ weight  # twice u's bytes: not rebuilt as u's orphan
        expected = w.numpy()
        a_storage, u_storage = a.storage, u.storage
        allocator.evict(w.storage)
        del u  # kept (w needs it), then evicted
        assert u_storage.buffer is not None
        allocator.evict(u_storage)
        del a
        assert a_storage.buffer is not None  # kept: w's rebuild needs it, through u
        md.tanh(x)  # another access: a is asked again, and is still useful
        assert a_storage.buffer is not None
        if change == "rebuilt":
            np.testing.assert_array_equal(w.numpy(), expected)
        else:
            del w
        md.tanh(x)
        assert a_storage.buffer is None


def test_a_handle_made_to_an_evicted_value_makes_it_a_witness():
    """``u`` dies and is freed (its recipe stays: ``w``'s names it), then gets a handle
    again; ``a``, which ``u``'s rebuild needs, dies after: it is useful (and ``u`` too
    large to be rebuilt as its orphan). The accelerator heard of ``u`` becoming a witness,
    and of orphans becoming possible, only through ``Lifetimes.referenced_evicted``."""
    with asking_both() as answers, isolated_allocator(), md.Runtime(budget=1 << 30):
        x, weight = inputs(4)
        a = md.tanh(x)
        u = a @ weight  # twice a's bytes: not rebuilt as a's orphan
        w = md.tanh(u)
        cell = u.cell
        del u
        assert cell.buffer is None and cell.external_refs == 0
        u = Tensor(cell)  # a handle to an evicted value
        a_storage = a.storage
        del a
        assert a_storage.buffer is not None  # kept: u's rebuild needs it
        np.testing.assert_array_equal(u.numpy(), np.tanh(x.numpy()) @ weight.numpy())
        del w
    assert answers and all(fast_answer == reference for fast_answer, reference, _ in answers)


def test_a_storage_lent_to_another_allocator_is_searched():
    """``a`` (allocator A) is the parent of ``u`` and ``w`` made in allocator B, whose ids
    start again from 1: a witness below ``a`` may have a smaller id than ``a``. Once A
    lends (``Allocator.lends``), its questions are searched, not told by ids."""
    with asking_both() as answers, isolated_allocator() as lender, md.Runtime(budget=1 << 30):
        x, weight = inputs(5)
        for _ in range(20):  # ids in A past those B will give
            md.tanh(x)
        a = md.tanh(x)
        assert not lender.lends
        with isolated_allocator() as borrower, md.Runtime(budget=1 << 30):
            w = evicted_through_evicted(borrower, a, weight)
            assert lender.lends and w.storage.id < a.storage.id
            a_storage = a.storage
            del a
            assert a_storage.buffer is not None  # kept: w's rebuild needs it
    assert answers and all(fast_answer == reference for fast_answer, reference, _ in answers)


def test_the_witnesses_stay_as_many_as_the_storages_evicted_with_a_handle():
    """A run that evicts referenced values again and again and asks nothing (no death
    below them) keeps a heap of witnesses about as large as those values, not one entry
    per eviction; a question after it is still told right."""
    rng = np.random.default_rng(6)
    unguarded = md.Runtime(budget=1 << 30, max_slowdown=None, max_wall_slowdown=None)
    with isolated_allocator() as allocator, unguarded:
        x = md.tensor(rng.standard_normal((8, 8)).astype(np.float32))
        ys = [md.tanh(x) for _ in range(3)]
        for _ in range(1000):
            for y in ys:
                allocator.evict(y.storage)
                y.numpy()  # rebuilt
        table = allocator.eviction.candidates
        assert len(table.usefulness.witnesses) <= usefulness.PRUNE_WITNESSES + 1
        allocator.evict(ys[0].storage)
        assert not table.usefulness.none_below(x.storage)  # older than a witness: searched
        assert table.usefulness.none_below(md.tanh(x).storage)  # newer than every one


def test_the_walk_from_the_witnesses_gives_up_past_the_search_bound():
    """Each question walked every later witness in the heap, unbounded, before it walked
    up from them: an msps run on a 4,000-op chain spent 58 s of 88 there. Past
    ``USEFUL_SEARCH`` entries the walk says it cannot tell, and the bounded search
    answers (the same answer as the reference)."""
    with isolated_allocator() as allocator, md.Runtime(budget=1 << 30):
        x, _ = inputs(7)
        a, b = md.tanh(x), md.exp(x)
        few = [md.exp(x) for _ in range(10)]
        for value in few:
            allocator.evict(value.storage)  # evicted, with a handle: witnesses made after a
        usefulness_of = allocator.eviction.candidates.usefulness
        assert usefulness_of.none_reached(b.storage)  # told: none of them is below b
        many = [md.exp(x) for _ in range(2 * usefulness.USEFUL_SEARCH)]
        for value in many:
            allocator.evict(value.storage)
        looked_at = []
        is_witness = usefulness.is_witness
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(usefulness, "is_witness", lambda s: looked_at.append(s) or is_witness(s))
            assert not usefulness_of.none_reached(b.storage)  # not told: the search answers
        assert len(looked_at) <= usefulness.USEFUL_SEARCH  # not all 522 later witnesses
        del a, b, few, many
