"""The smallest budget (in bytes) at which one example of test_my_model.py still fails.

Put the falsifying example's arguments below and run ``python shrink_budget.py``.
"""

from hypothesis import given, settings
from hypothesis import strategies as st
from test_my_model import training_run

from minidtr.testing import assert_remat_equivalent, budget_floor

HEURISTIC = "lru"
fn = training_run(seed=0, depth=3, width=8)
floor = budget_floor(fn, heuristic=HEURISTIC)
print(floor.describe())


@settings(max_examples=30, deadline=None, database=None)
@given(budget=st.integers(floor.minimal or floor.largest_op, floor.peak))
def check(budget):
    assert_remat_equivalent(fn, budgets=[budget], heuristics=[HEURISTIC], on_budget_error="skip")


check()  # hypothesis shrinks a failing budget towards floor.minimal, the smallest it can
print("no budget between the floor and the peak fails")
