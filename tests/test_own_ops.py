"""An op of one's own (a class defined outside minidtr) is checked on every
application: its outputs against what ``infer`` declared, its gradients against its
inputs, ``infer``'s own result against the protocol. A mismatch was once recorded as the
op claimed (a tensor whose metadata and buffer disagreed, a gradient of another shape
summed into a leaf by broadcasting) or failed deep inside minidtr with a message about
a missing attribute."""

from __future__ import annotations

import numpy as np
import pytest

import minidtr as md
from minidtr.ops.op import Op, apply
from minidtr.runtime import allocator as allocator_module
from minidtr.runtime.registry import allocator_for


@pytest.fixture(autouse=True)
def ordinary_run(monkeypatch):
    """As outside the test suite, which checks minidtr's own ops too (tests/conftest.py)."""
    monkeypatch.setattr(allocator_module, "CHECK_OPS", False)


class Double(Op):
    name = "double"

    def infer(self, x):
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return x * 2

    def backward(self, ctx, g):
        return g * 2


def x_and_memory():
    """An input, and the bytes counted before it was made."""
    memory = allocator_for("cpu").memory
    x = md.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    return x, memory


def still_usable(memory):
    x, _ = x_and_memory()
    np.testing.assert_array_equal(apply(Double(), x).numpy(), x.numpy() * 2)
    del x
    assert allocator_for("cpu").memory == memory


def test_only_ops_defined_outside_minidtr_are_checked():
    assert Double.check_results and Double().check_results
    assert not md.ops.activation.Tanh.check_results
    assert not md.ops.arithmetic.Add.check_results


@pytest.mark.parametrize(
    ("forward", "error", "message"),
    [
        (lambda xp, x: x[0], AssertionError, r"double: output 0 is \(3,\) float32, but the op "
         r"declared \(2, 3\) float32"),
        (lambda xp, x: x.astype(np.float64), AssertionError, r"output 0 is \(2, 3\) float64"),
        (lambda xp, x: [x], TypeError, r"double: forward returned a list of 1 as output 0, not "
         r"an array"),
        (lambda xp, x: 1.5, TypeError, "forward returned a float as output 0"),
    ],
    ids=["shape", "dtype", "list", "float"],
)  # fmt: skip
def test_a_forward_unlike_its_infer_is_an_error_naming_both(forward, error, message):
    class Wrong(Double):
        pass

    Wrong.forward = lambda self, xp, x: forward(xp, x)
    x, memory = x_and_memory()
    with pytest.raises(error, match=message):
        apply(Wrong(), x)
    del x
    still_usable(memory)


@pytest.mark.parametrize(
    ("forward", "message"),
    [
        (lambda xp, x: x, r"double: output 0 \(\(2, 3\) float32\) shares memory with input 0"),
        (lambda xp, x: x.T.T, "shares memory with input 0"),
    ],
    ids=["the input", "a view of it"],
)
@pytest.mark.parametrize("budget", [None, 10**6])
def test_an_output_that_is_its_input_is_refused(forward, message, budget):
    """It would be counted twice, and freed or changed with the other's buffer."""

    class Returns(Double):
        pass

    Returns.forward = lambda self, xp, x: forward(xp, x)
    x, memory = x_and_memory()
    with (
        md.Runtime(budget=budget),
        pytest.raises(AssertionError, match=message + ".*return a new array"),
    ):
        apply(Returns(), x)
    del x
    still_usable(memory)


@pytest.mark.parametrize("budget", [None, 10**6])
def test_an_output_that_keeps_a_larger_scratch_array_alive_is_refused(budget):
    """A view of a scratch array would hold all of it while the budget counts the view."""

    class Head(Double):
        def forward(self, xp, x):
            scratch = xp.zeros((100,) + x.shape, x.dtype)
            scratch[0] = x * 2
            return scratch[0]

    x, memory = x_and_memory()
    with (
        md.Runtime(budget=budget),
        pytest.raises(
            AssertionError,
            match=r"double: output 0 \(\(2, 3\) float32, 24 bytes\) "
            r"is a view of a 2,400-byte array.*return a new array",
        ),
    ):
        apply(Head(), x)
    del x
    still_usable(memory)


def test_two_outputs_over_one_buffer_are_refused():
    class Twice(Double):
        n_outputs = 2

        def infer(self, x):
            return [(x.shape, x.dtype)] * 2

        def forward(self, xp, x):
            y = x * 2
            return y, y

    x, memory = x_and_memory()
    with pytest.raises(AssertionError, match="output 1 .* shares memory with output 0"):
        apply(Twice(), x)
    del x
    still_usable(memory)


def test_an_op_with_several_outputs_returns_a_tuple_of_them():
    class Halves(Double):
        n_outputs = 2

        def infer(self, x):
            return [(x.shape, x.dtype)] * 2

        def forward(self, xp, x):
            return x / 2  # one array: once unpacked row by row into the two outputs

    x, _ = x_and_memory()
    with pytest.raises(TypeError, match=r"halves|double: forward returned a ndarray, not a "
                       r"tuple of its 2 outputs \(n_outputs = 2\)"):  # fmt: skip
        apply(Halves(), x)


@pytest.mark.parametrize(
    "declared", [None, ((2, 3), np.dtype(np.float32)), [((2, 3),)]], ids=["none", "pair", "short"]
)
def test_an_infer_that_returns_something_else_says_what_it_must_return(declared):
    class Vague(Double):
        def infer(self, x):
            return declared

    x, memory = x_and_memory()
    with pytest.raises(TypeError, match=r"double: infer must return a list of 1 \(shape, dtype\)"):
        apply(Vague(), x)
    del x
    still_usable(memory)


@pytest.mark.parametrize(
    ("backward", "error", "message"),
    [
        (lambda g: g[0], AssertionError, r"double: gradient of input 0 has shape \(3,\) float32, "
         r"the input \(2, 3\) float32"),
        (lambda g: g.astype(md.float64), AssertionError, r"gradient of input 0 has shape "
         r"\(2, 3\) float64"),
        (lambda g: np.ones((2, 3), np.float32), TypeError, r"double: backward returned a "
         r"ndarray as the gradient of input 0: return Tensors"),
    ],
    ids=["shape", "dtype", "ndarray"],
)  # fmt: skip
def test_a_backward_unlike_its_inputs_is_an_error_naming_both(backward, error, message):
    class Wrong(Double):
        pass

    Wrong.backward = lambda self, ctx, g: backward(g)
    x, _ = x_and_memory()
    with pytest.raises(error, match=message):
        apply(Wrong(), x).sum().backward()
    assert x.grad is None


def test_an_op_without_infer_or_forward_says_which_is_missing():
    class Bare(Op):
        name = "bare"

    with pytest.raises(NotImplementedError, match=r"bare: an op defines infer"):
        apply(Bare(), md.ones(2))

    class InferOnly(Bare):
        def infer(self, x):
            return [(x.shape, x.dtype)]

    with pytest.raises(NotImplementedError, match=r"bare: an op defines forward"):
        apply(InferOnly(), md.ones(2))
