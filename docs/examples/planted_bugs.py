"""Five bugs users make in their own ops and models, each caught in the first examples of a
property test, with the op named. Every check below fails: run ``python planted_bugs.py``
to see each error (tests/test_gallery.py runs them and checks what they say)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minidtr as md
from minidtr.ops.op import Op, apply, float_dtype
from minidtr.testing import assert_remat_equivalent, check_gradients
from minidtr.testing.strategies import budget_ratios, float64_arrays

TEN_EXAMPLES = settings(max_examples=10, deadline=None, database=None)


class Elementwise(Op):
    """An op of one input whose output has its shape and dtype."""

    def infer(self, x):
        return [(x.shape, float_dtype(self, x))]


def training_run(seed, activation, depth=3):
    """Two SGD steps of an MLP whose hidden layers end with ``activation``."""

    def run():
        md.manual_seed(seed)
        np.random.seed(seed)  # for the op that draws from NumPy's global generator
        layers = [md.nn.Linear(8 if i == 0 else 32, 32) for i in range(depth)]
        last = md.nn.Linear(32, 3)
        parameters = [p for layer in [*layers, last] for p in layer.parameters()]
        opt = md.optim.SGD(parameters, lr=0.1)
        rng = np.random.default_rng(seed)
        x = md.tensor(rng.standard_normal((64, 8)), dtype=md.float32)
        y = md.tensor(rng.integers(0, 3, 64))
        losses = []
        for _ in range(2):
            h = x
            for layer in layers:
                h = activation(layer(h))
            loss = md.cross_entropy(last(h), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        return losses, layers, last

    return run


def check(activation_for_example):
    """A property test of ``training_run`` under budgets drawn above its floor (about 0.8
    of the peak); ``activation_for_example()`` makes the activation once per example."""

    @TEN_EXAMPLES
    @given(seed=st.integers(0, 2**16), ratio=budget_ratios(0.82, 0.95))
    def property_test(seed, ratio):
        run = training_run(seed, activation_for_example())
        assert_remat_equivalent(run, budgets=[ratio], on_budget_error="skip")

    return property_test


# 1. A forward that draws from NumPy's global generator (seeded at the start of the run):
#    the unbounded runs agree, but a recomputation draws other numbers.
class NoisyTanh(Elementwise):
    name = "noisy_tanh"
    retain_outputs = (0,)

    def forward(self, xp, x):
        noise = np.random.normal(0.0, 1e-3, x.shape).astype(x.dtype)  # the bug
        return xp.tanh(x) + noise

    def backward(self, ctx, grad):
        (y,) = ctx.outputs
        return (grad * (1 - y * y),)


check_global_rng = check(lambda: lambda h: apply(NoisyTanh(), h))


# 2. State of one application kept on an op object shared by every call: the forward
#    stashes its input for the backward, which reads whatever the last call left there.
class Square(Elementwise):
    name = "square"

    def forward(self, xp, x):
        self.x = x  # the bug: kept on the op, not retained (retain_inputs = (0,))
        return x * x

    def backward(self, ctx, grad):
        return (grad * md.tensor(2 * self.x),)


SQUARE = Square()  # one op object for every call
check_state_on_a_shared_op = check(lambda: lambda h: md.tanh(apply(SQUARE, h)))


# 3. A kernel that writes into its input.
class Centered(Elementwise):
    name = "centered"

    def forward(self, xp, x):
        x -= x.mean(axis=-1, keepdims=True)  # the bug: x belongs to another value
        return xp.tanh(x)

    def backward(self, ctx, grad):
        return (grad,)  # (not what is tested here)


check_in_place = check(lambda: lambda h: apply(Centered(), h))


# 4. A backward that is mathematically wrong: every run uses it alike, so no budgeted run
#    differs; check_gradients compares it with central differences.
class Swish(Elementwise):
    name = "swish"
    retain_inputs = (0,)

    def forward(self, xp, x):
        return x / (1 + xp.exp(-x))

    def backward(self, ctx, grad):
        (x,) = ctx.inputs
        return (grad * md.sigmoid(x),)  # the bug: (x s(x))' = s(x) + x s(x) (1 - s(x))


@TEN_EXAMPLES
@given(x=float64_arrays((4, 8)), w=float64_arrays((8, 5)), seed=st.integers(0, 2**32 - 1))
def check_wrong_backward(x, w, seed):
    def model(x, w):
        return md.tanh(apply(Swish(), x @ w)).sum()

    check_gradients(model, x, w, seed=seed)


# 5. An intermediate computed once, detached and kept for later calls: the second unbounded
#    run reuses what the first made, so it makes fewer values and peaks lower.
class Normalized:
    def __init__(self):
        self.scale = None

    def __call__(self, h):
        if self.scale is None:  # the bug: kept from the first call for every later one
            self.scale = (h * h).mean().detach()
        return md.tanh(h / self.scale)


check_cached_intermediate = check(Normalized)  # a new one per example, shared by its runs

CHECKS = [
    check_global_rng,
    check_state_on_a_shared_op,
    check_in_place,
    check_wrong_backward,
    check_cached_intermediate,
]

if __name__ == "__main__":
    for check_one in CHECKS:
        try:
            check_one()
        except AssertionError as error:
            print(f"{type(error).__name__}: {str(error).splitlines()[0]}\n")
        else:
            raise SystemExit(f"{check_one.__name__} passed: the bug went unnoticed")
