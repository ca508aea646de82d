"""The accelerator's usefulness search (fast/usefulness.py) answers as the reference's
(lifetime.useful_dead) at every question a budgeted run asks, on random programs and
training loops under random budgets."""

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

import minidtr as md
from minidtr.runtime import fast, lifetime
from minidtr.runtime.fast import usefulness
from minidtr.testing import isolated_allocator, run_under
from minidtr.testing.strategies import random_programs, training_loops


@contextlib.contextmanager
def asking_both():
    """Every question an accelerated runtime made inside asks, answered by both searches;
    yields the list of answer pairs."""
    answers = []
    saved = usefulness.useful_dead

    def both(storage):
        fast_answer = saved(storage)
        answers.append((fast_answer, lifetime.useful_dead(storage)))
        return fast_answer

    fast.usefulness.useful_dead = both  # read by fast.install, when a runtime is entered
    try:
        yield answers
    finally:
        fast.usefulness.useful_dead = saved


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
    assert all(a == b for a, b in answers)


def test_a_budgeted_tree_lstm_asks_and_both_agree():
    from minidtr.training import TrainConfig, train

    with asking_both() as answers, isolated_allocator():
        train(TrainConfig("treelstm", steps=1, ratio=0.3, evaluate=False, max_wall_slowdown=None))
    assert len(answers) > 10 and any(a for a, _ in answers) and not all(a for a, _ in answers)
    assert all(a == b for a, b in answers)


def test_install_and_uninstall_swap_the_search():
    with isolated_allocator() as allocator:
        with md.Runtime(budget=10**9):
            assert allocator.lifetimes.is_useful is usefulness.useful_dead
            with md.Runtime(reference=True):
                assert allocator.fast is None
                assert allocator.lifetimes.is_useful.__func__ is lifetime.Lifetimes.is_useful
        assert isinstance(allocator.fast, fast.FastPath)
