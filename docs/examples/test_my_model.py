"""Property-test my own model: under any budget and heuristic, training gives the same bits."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minidtr as md
from minidtr.testing import assert_remat_equivalent
from minidtr.testing.strategies import budget_ratios, heuristics


def my_model(depth: int, width: int) -> md.nn.Module:
    layers = []
    for i in range(depth):
        layers += [md.nn.Linear(8 if i == 0 else width, width), md.nn.Tanh(), md.nn.Dropout(0.1)]
    return md.nn.Sequential(*layers, md.nn.Linear(width, 3))


def training_run(seed: int, depth: int, width: int, steps: int = 2):
    """A function of no arguments that builds everything from the seed and trains."""

    def run():
        md.manual_seed(seed)  # initial weights and dropout masks come from this
        model = my_model(depth, width)
        opt = md.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.default_rng(seed)
        x = md.tensor(rng.standard_normal((256, 8)), dtype=md.float32)
        y = md.tensor(rng.integers(0, 3, 256))
        losses = []
        for _ in range(steps):
            loss = md.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        return losses, model  # compared bit for bit: its parameters and buffers

    return run


@settings(deadline=None)  # hypothesis's default: 100 examples
@given(
    seed=st.integers(0, 2**16),
    depth=st.integers(2, 6),
    width=st.sampled_from([8, 16]),
    ratio=budget_ratios(0.2, 0.95),
    heuristic=heuristics(),
)
def test_my_model_is_bit_identical_under_any_budget(seed, depth, width, ratio, heuristic):
    (report,) = assert_remat_equivalent(
        training_run(seed, depth, width),
        budgets=[ratio],
        heuristics=[heuristic],
        on_budget_error="skip",  # a budget below the model's floor: draw another example
    )
    assert report["peak_memory"] <= report["budget"]
