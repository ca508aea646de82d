"""softmax, log_softmax, cross_entropy, mse_loss and embedding (the lookup at the other end of
a language model) through the generic harness, plus their input checks."""

import numpy as np
import pytest

import minidtr as md
from op_harness import OpCase, define_tests


def softmax_reference(x, axis=-1):
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def log_softmax_reference(x, axis=-1):
    x64 = x.astype(np.float64)
    return (x64 - np.log(np.exp(x64).sum(axis=axis, keepdims=True))).astype(x.dtype)


def cross_entropy_reference(logits, targets):
    lsm = log_softmax_reference(logits.astype(np.float64), 1)
    return np.asarray(-np.mean([lsm[n, t] for n, t in enumerate(targets)]), dtype=logits.dtype)


def mse_reference(a, b):
    return np.asarray(((a.astype(np.float64) - b) ** 2).mean(), dtype=a.dtype)


def embedding_reference(weight, indices):
    out = np.empty((*indices.shape, weight.shape[1]), dtype=weight.dtype)
    for pos in np.ndindex(*indices.shape):
        out[pos] = weight[indices[pos]]
    return out


def logits_and_targets(rng, shapes, dtype):
    (n, classes), _ = shapes
    return [rng.standard_normal((n, classes)).astype(dtype) * 3, rng.integers(0, classes, n)]


def weight_and_indices(rng, shapes, dtype):
    (rows, dim), index_shape = shapes
    indices = rng.integers(0, rows, index_shape)
    indices.flat[-1] = indices.flat[0]  # a repeated row: its gradient must accumulate
    return [rng.standard_normal((rows, dim)).astype(dtype), indices]


def torch_f(t):
    return t.nn.functional


def f32(*shape):
    return np.ones(shape, np.float32)


CASES = [
    OpCase(
        "softmax",
        md.softmax,
        softmax_reference,
        [((3, 4),), ((2, 3, 4),), ((5,),)],
        torch_fn=lambda t, x: t.softmax(x, dim=-1),
        bad=[((),)],
    ),
    OpCase(
        "softmax[axis0]",
        lambda x: md.softmax(x, axis=0),
        lambda x: softmax_reference(x, 0),
        [((3, 4),), ((2, 3, 4),)],
        torch_fn=lambda t, x: t.softmax(x, dim=0),
    ),
    OpCase(
        "log_softmax",
        md.log_softmax,
        log_softmax_reference,
        [((3, 4),), ((2, 3, 4),)],
        torch_fn=lambda t, x: t.log_softmax(x, dim=-1),
        bad=[[np.ones((2, 3), np.int64)]],
    ),
    OpCase(
        "log_softmax[axis1]",
        lambda x: md.log_softmax(x, axis=1),
        lambda x: log_softmax_reference(x, 1),
        [((2, 3, 4),)],
        torch_fn=lambda t, x: t.log_softmax(x, dim=1),
    ),
    OpCase(
        "cross_entropy",
        md.cross_entropy,
        cross_entropy_reference,
        [((4, 5), (4,)), ((1, 3), (1,)), ((6, 2), (6,))],
        make=logits_and_targets,
        torch_fn=lambda t, x, y: torch_f(t).cross_entropy(x, y),
        bad=[
            [f32(3, 4), np.array([0, 4, 1])],
            [f32(3, 4), np.array([0, -1, 1])],
            [f32(3, 4), np.array([0.0, 1.0, 2.0], np.float32)],
            [f32(3, 4), np.array([0, 1])],
            [f32(3, 4, 2), np.array([0, 1, 2])],
            [np.ones((3, 4), np.int64), np.array([0, 1, 2])],
            [f32(0, 4), np.zeros(0, np.int64)],
        ],
    ),
    OpCase(
        "mse_loss",
        md.mse_loss,
        mse_reference,
        [((3, 4), (3, 4)), ((5,), (5,)), ((), ())],
        torch_fn=lambda t, a, b: torch_f(t).mse_loss(a, b),
        bad=[((3, 4), (4,)), [f32(3), np.ones(3, np.float64)]],
    ),
    OpCase(
        "embedding",
        md.embedding,
        embedding_reference,
        [((6, 3), (5,)), ((4, 2), (2, 3)), ((3, 4), ())],
        make=weight_and_indices,
        torch_fn=lambda t, w, i: torch_f(t).embedding(i, w),
        bad=[
            [f32(4, 3), np.array([0, 4])],
            [f32(4, 3), np.array([-1])],
            [f32(4, 3), np.array([0.5], np.float32)],
            [f32(4), np.array([0])],
        ],
    ),
]

globals().update(define_tests(CASES))


def test_softmax_and_log_softmax_are_stable_for_large_logits():
    x = md.tensor(np.array([[1000.0, 0.0, -1000.0], [-1e4, -1e4, -1e4]], np.float32))
    np.testing.assert_allclose(md.softmax(x).numpy(), [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)
    lsm = md.log_softmax(x).numpy()
    assert np.isfinite(lsm).all()
    np.testing.assert_allclose(lsm[0], [0.0, -1000.0, -2000.0], rtol=1e-6)


def test_cross_entropy_errors_name_the_problem():
    logits = md.zeros((3, 4))
    with pytest.raises(IndexError, match="cross_entropy: target 7 is out of range for 4 classes"):
        md.cross_entropy(logits, md.tensor([0, 7, 1]))
    with pytest.raises(md.DTypeError, match="cross_entropy: targets must be integer"):
        md.cross_entropy(logits, md.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(md.DTypeError, match="cross_entropy: targets must be integer"):
        md.cross_entropy(logits, [0.5, 1.0, 2.0])
    with pytest.raises(md.ShapeError, match=r"cross_entropy: targets must have shape \(3,\)"):
        md.cross_entropy(logits, md.tensor([[0, 1, 2]]))
    with pytest.raises(md.ShapeError, match=r"cross_entropy: logits must be \(N, C\)"):
        md.cross_entropy(md.zeros((3,)), md.tensor([0, 1, 2]))
    with pytest.raises(md.DTypeError, match="cross_entropy: needs floating-point"):
        md.cross_entropy(md.tensor([[1, 2]]), md.tensor([0]))


def test_cross_entropy_takes_python_targets_and_gradient_sums_to_zero_per_row():
    rng = np.random.default_rng(0)
    logits = md.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    loss = md.cross_entropy(logits, [0, 2, 1, 1, 0])
    loss.backward()
    assert loss.shape == () and loss.dtype == md.float64
    np.testing.assert_allclose(logits.grad.numpy().sum(axis=1), 0.0, atol=1e-15)


def test_mse_loss_gradients_of_both_inputs_are_opposite():
    rng = np.random.default_rng(0)
    a = md.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    b = md.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    md.mse_loss(a, b).backward()
    np.testing.assert_array_equal(a.grad.numpy(), -b.grad.numpy())
    np.testing.assert_allclose(a.grad.numpy(), 2 * (a.numpy() - b.numpy()) / 6)


def test_embedding_gradient_accumulates_repeated_rows():
    weight = md.zeros((4, 2), requires_grad=True)
    out = md.embedding(weight, [[1, 3], [1, 1]])
    out.backward(md.ones((2, 2, 2)))
    np.testing.assert_array_equal(weight.grad.numpy(), [[0, 0], [3, 3], [0, 0], [1, 1]])
