"""Tensors and modules under Python's own protocols: copy, pickle, NumPy conversion,
format strings. Each is what a user reaches for first (``copy.deepcopy(model)`` to keep
the best weights, ``np.asarray(x)``, ``f"{loss:.4f}"``)."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import numpy as np
import pytest

import minidtr as md


def test_a_copy_leaves_the_original_handle_counted():
    """``copy.copy`` once made a second handle without counting it, so dropping the copy
    left a live tensor with no handles counted: the runtime freed it as dead and rebuilt
    it at its next read."""
    with md.Runtime(budget=100_000, cost="flops") as rt:
        x = md.tensor(np.ones(100, np.float32))
        a = x * 2
        for duplicate in (copy.copy, copy.deepcopy):
            b = duplicate(a)
            del b
            assert a.storage.external_refs == 1
            assert a.is_resident
        c = a + 1
        assert rt.stats()["remats"] == 0
        np.testing.assert_array_equal(c.numpy(), np.full(100, 3, np.float32))


def test_deepcopy_of_a_model_is_independent_of_it():
    rng = np.random.default_rng(0)
    model = md.nn.Sequential(md.nn.Linear(4, 8), md.nn.ReLU(), md.nn.Linear(8, 2))
    best = copy.deepcopy(model)
    x = md.tensor(rng.random((5, 4)), dtype=md.float32)
    before = best(x).numpy()
    np.testing.assert_array_equal(before, model(x).numpy())
    opt = md.optim.SGD(model.parameters(), lr=0.1)
    model(x).sum().backward()
    opt.step()
    assert not np.array_equal(model(x).numpy(), before)
    np.testing.assert_array_equal(best(x).numpy(), before)  # the copy kept its weights
    assert [n for n, _ in best.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(p.requires_grad and p.is_leaf for p in best.parameters())
    assert all(p is not q for p, q in zip(best.parameters(), model.parameters(), strict=True))


def test_deepcopy_keeps_shared_parameters_shared_and_copies_gradients():
    shared = md.nn.Linear(3, 3)
    model = md.nn.Sequential(shared, md.nn.ReLU(), shared)
    model(md.ones((2, 3))).sum().backward()
    twin = copy.deepcopy(model)
    assert twin[0] is twin[2] and twin[0] is not shared
    np.testing.assert_array_equal(twin[0].weight.grad.numpy(), shared.weight.grad.numpy())


def test_a_pickled_model_loads_in_a_fresh_process(tmp_path):
    model = md.nn.Sequential(md.nn.Linear(3, 4), md.nn.Tanh(), md.nn.Linear(4, 1))
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(model))
    expected = model(md.tensor(x)).numpy()
    code = (
        "import pickle, sys, numpy as np, minidtr as md\n"
        "model = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)\n"
        "np.save(sys.argv[2], model(md.tensor(x)).numpy())\n"
    )
    out = tmp_path / "out.npy"
    subprocess.run([sys.executable, "-c", code, str(path), str(out)], check=True, timeout=60)
    np.testing.assert_array_equal(np.load(out), expected)


def test_a_computed_tensor_cannot_be_copied_and_the_error_says_what_to_do():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    y = md.tanh(x)
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match=r"computed by 'tanh' \(shape \(2,\)\).*detach"):
            attempt(y)
    np.testing.assert_array_equal(copy.deepcopy(y.detach()).numpy(), y.numpy())


def test_unpickled_values_are_counted_by_the_runtime_they_load_in():
    blob = pickle.dumps(md.tensor(np.arange(256, dtype=np.float32)))
    with md.Runtime(budget=10_000) as rt:
        loaded = pickle.loads(blob)
        assert rt.stats()["memory"] >= loaded.nbytes == 1024
        np.testing.assert_array_equal(loaded.numpy(), np.arange(256, dtype=np.float32))


def test_numpy_conversion_gives_the_values():
    x = md.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    array = np.asarray(x)
    assert array.dtype == np.float32 and array.shape == (2, 2)
    np.testing.assert_array_equal(array, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(np.asarray(x, dtype=np.float64), array.astype(np.float64))
    array[0, 0] = 99  # a copy: the tensor's value never changes in place
    assert x.numpy()[0, 0] == 1
    with pytest.raises(ValueError, match="always copied"):
        np.asarray(x, copy=False)
    np.testing.assert_array_equal(md.tensor([x[0, 0], x[1, 1]]).numpy(), [1, 4])


def test_arrays_and_tensors_still_combine_as_tensors():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    for y in (np.ones(2, np.float32) + x, x * np.full(2, 2, np.float32)):
        assert isinstance(y, md.Tensor) and y.grad_fn is not None


def test_format_strings_format_a_single_value():
    loss = md.tensor([[0.123456]])
    assert f"{loss:.3f}" == "0.123"
    assert f"{md.tensor(7):>4d}" == "   7"
    x = md.tensor([1.0, 2.0])
    assert f"{x}" == str(x)
    with pytest.raises(
        ValueError, match=r"format spec '.2f' needs a single-element tensor, got shape \(2,\)"
    ):
        f"{x:.2f}"


@pytest.mark.parametrize(
    "make_optimizer",
    [lambda p: md.optim.Adam(p, lr=0.01), lambda p: md.optim.SGD(p, lr=0.1, momentum=0.9)],
    ids=["adam", "sgd"],
)
def test_a_pickled_model_and_optimizer_resume_training_bit_for_bit(make_optimizer):
    """Pickled together, the optimizer's parameters stay the model's own and its state
    (Adam's moments and step counts, SGD's momentum) carries over."""
    rng = np.random.default_rng(1)
    model = md.nn.Sequential(md.nn.Linear(4, 16), md.nn.ReLU(), md.nn.Linear(16, 3))
    opt = make_optimizer(model.parameters())
    x = md.tensor(rng.random((8, 4)), dtype=md.float32)
    y = md.tensor(rng.integers(0, 3, 8))

    def train(model, opt, steps):
        losses = []
        for _ in range(steps):
            loss = md.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    train(model, opt, 3)
    saved = pickle.dumps((model, opt))
    expected = train(model, opt, 3)
    model2, opt2 = pickle.loads(saved)
    assert all(p is q for p, q in zip(opt2.params, model2.parameters(), strict=True))
    with md.Runtime(budget=20_000, cost="flops"):  # and under a budget, the same
        assert train(model2, opt2, 3) == expected


def test_a_gradient_assigned_by_hand_must_match_its_tensor():
    """A mismatched ``.grad`` was once taken silently, and the next backward broadcast
    the accumulated gradient to another shape."""
    x = md.tensor([1.0, 2.0], requires_grad=True)
    for wrong in (md.tensor([1.0]), md.tensor([1.0, 2.0], dtype=md.float64)):
        with pytest.raises(ValueError, match=r"\.grad must match its tensor: shape \(2,\) float32"):
            x.grad = wrong
    assert x.grad is None
    x.grad = md.tensor([0.5, 0.5])
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.5, 4.5])


def test_requires_grad_cannot_be_turned_off_on_a_computed_tensor():
    y = md.tensor([1.0], requires_grad=True) * 2
    for turn_off in (lambda: setattr(y, "requires_grad", False), lambda: y.requires_grad_(False)):
        with pytest.raises(RuntimeError, match="use detach"):
            turn_off()
    assert y.requires_grad
