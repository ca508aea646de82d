"""What a backward node does: the fused gradient ops compute the chain rule written in
ops float for float, a node makes the few ops it should, and gradients are first-order
(no graph is recorded through them)."""

import numpy as np
import pytest

import minidtr as md

RNG = np.random.default_rng(0)


def leaf(*shape, dtype=np.float32, low=0.5) -> md.Tensor:
    return md.tensor((RNG.random(shape) + low).astype(dtype), requires_grad=True)


def plain(*shape, dtype=np.float32) -> md.Tensor:
    return md.tensor(RNG.standard_normal(shape).astype(dtype))


def grads_of(y: md.Tensor, g: md.Tensor, *xs: md.Tensor) -> list[np.ndarray]:
    return [r.numpy() for r in md.grad(y, list(xs), grad=g)]


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_fused_gradients_are_the_chain_rule_in_ops_bit_for_bit(dtype):
    # matmul with broadcast batches: g @ b^T summed to a's shape, a^T @ g to b's
    a, b = leaf(2, 1, 3, 4, dtype=dtype), leaf(5, 4, 2, dtype=dtype)
    g = plain(2, 5, 3, 2, dtype=dtype)
    ga, gb = grads_of(md.matmul(a, b), g, a, b)
    with md.no_grad():
        want_a = md.sum_to(md.matmul(g, md.transpose(b, (0, 2, 1))), a.shape).numpy()
        want_b = md.sum_to(md.matmul(md.transpose(a, (0, 1, 3, 2)), g), b.shape).numpy()
    assert same_bits(ga, want_a) and same_bits(gb, want_b)
    # division: the divisor's gradient -(g * ((a / b) / b)), summed to b's shape
    a, b, g = leaf(3, 4, dtype=dtype), leaf(4, dtype=dtype), plain(3, 4, dtype=dtype)
    ga, gb = grads_of(a / b, g, a, b)
    with md.no_grad():
        assert same_bits(ga, (g / b).numpy())
        assert same_bits(gb, md.sum_to(-(g * ((a / b) / b)), b.shape).numpy())
    # a broadcast gradient summed back: the sum with kept axes, reshaped
    a, b, g = leaf(4, 1, 3, dtype=dtype), leaf(2, 3, dtype=dtype), plain(4, 2, 3, dtype=dtype)
    ga, gb = grads_of(a + b, g, a, b)
    with md.no_grad():
        assert same_bits(ga, md.sum(g, axis=1, keepdims=True).numpy())
        assert same_bits(gb, md.reshape(md.sum(g, axis=0, keepdims=True), (2, 3)).numpy())
    # sqrt: g / (2 y); mean: g * (1 / count), broadcast back
    x, g = leaf(3, 4, dtype=dtype), plain(3, 4, dtype=dtype)
    (gx,) = grads_of(md.sqrt(x), g, x)
    with md.no_grad():
        assert same_bits(gx, (g / (md.sqrt(x) * 2.0)).numpy())
    g = plain(4, dtype=dtype)
    (gx,) = grads_of(md.mean(x, axis=0), g, x)
    with md.no_grad():
        assert same_bits(gx, md.broadcast_to(g * (1.0 / 3), (3, 4)).numpy())
    # the activations: relu (small and large: where and bit masks), tanh, sigmoid
    for shape in [(3, 4), (40, 50)]:
        x, g = leaf(*shape, dtype=dtype, low=-0.5), plain(*shape, dtype=dtype)
        values = g.numpy()
        values.flat[:3] = [np.inf, -np.inf, np.nan]  # non-finite incoming gradients too
        g = md.tensor(values)
        (gx,) = grads_of(md.relu(x), g, x)
        assert same_bits(gx, np.where(x.numpy() > 0, g.numpy(), dtype(0)))
        for fn in (md.tanh, md.sigmoid):
            (gx,) = grads_of(fn(x), g, x)
            y, gy = fn(x).numpy(), g.numpy()
            if dtype == np.float16:  # the chain in float32, rounded once (as PyTorch's)
                y, gy = y.astype(np.float32), gy.astype(np.float32)
            want = gy * (1.0 - y * y) if fn is md.tanh else (1.0 - y) * gy * y
            assert same_bits(gx, want.astype(dtype))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_divisor_gradients_compute_their_expressions_bit_for_bit(dtype):
    """div_grad and rdiv_scalar_grad compute in one buffer (their output's, or a float32 one
    rounded once for a float16 s / x), the same floats as the expressions of docs/ops.md,
    non-finite values and broadcast divisors included."""
    rng = np.random.default_rng(3)
    shape = (60, 50)
    a, b_row, g = (rng.standard_normal(s).astype(dtype) for s in (shape, shape[1:], shape))
    a.flat[:3] = [np.inf, 0.0, -0.0]
    b_row[:3] = [0.0, 1e-4, np.inf]
    b = md.tensor(b_row, requires_grad=True)
    with np.errstate(all="ignore"):
        (gb,) = grads_of(md.tensor(a) / b, md.tensor(g), b)
        want = md.sum_to(md.tensor(-(g * (a / b_row / b_row))), b_row.shape)
        assert same_bits(gb, want.numpy())
        x = md.tensor(a, requires_grad=True)
        (gx,) = grads_of(3.3 / x, md.tensor(g), x)
        s = np.float32(3.3) if dtype == np.float16 else dtype(3.3)  # held_scalar's
        assert same_bits(gx, (-(g * (s / a / a))).astype(dtype))


def backward_ops(fn, *inputs: md.Tensor) -> int:
    """How many ops (views included) a backward through ``fn`` runs, leaf gradients'
    finishing copies included."""
    y = fn(*inputs)
    g = md.tensor(np.ones(y.shape, y.dtype))
    with md.Runtime() as runtime:
        y.backward(g)
        return runtime.stats()["ops"]


@pytest.mark.parametrize(
    "name, fn, shapes, ops",
    [
        ("add", lambda a, b: a + b, [(3,), (3,)], 0),  # the gradient passes through
        ("bias add", lambda a, b: a + b, [(2, 3), (3,)], 1),  # b's: one sum_to
        ("tanh", md.tanh, [(3,)], 1),
        ("sigmoid", md.sigmoid, [(3,)], 1),
        ("relu", md.relu, [(3,)], 1),
        ("sqrt", md.sqrt, [(3,)], 1),
        ("exp", md.exp, [(3,)], 1),
        ("log", md.log, [(3,)], 1),
        ("mul", lambda a, b: a * b, [(3,), (3,)], 2),
        ("div", lambda a, b: a / b, [(3,), (3,)], 2),
        ("matmul", md.matmul, [(2, 3), (3, 4)], 2),
        ("linear", md.linear, [(2, 3), (4, 3), (4,)], 3),  # x, weight, and the bias's sum
        ("mean", lambda a: md.mean(a, axis=0), [(2, 3)], 4),  # scale, 2 views, leaf copy
        ("sum", lambda a: md.sum(a, axis=0), [(2, 3)], 3),  # 2 views, leaf copy
        ("slice", lambda a: a[1:], [(3,)], 1),
        ("split", lambda a: md.split(a, 3)[0] * 1.0, [(3,)], 2),  # mul, concat (+ zeros)
        ("stack", lambda a, b: md.stack([a, b]), [(3,), (3,)], 5),  # split, 2 views, 2 copies
    ],
)
def test_a_backward_node_makes_few_ops(name, fn, shapes, ops):
    assert backward_ops(fn, *[leaf(*s) for s in shapes]) == ops, name


def test_gradients_are_first_order():
    """Backward runs under no_grad and the fused gradient ops have no backward of their own:
    a gradient is a value without a graph (there is no create_graph)."""
    x = leaf(3)
    (gx,) = md.grad(md.sum(md.tanh(x) * md.sqrt(x)), [x])
    assert gx.grad_fn is None and not gx.requires_grad
    y = md.sum(md.tanh(x))
    y.backward()
    assert x.grad.grad_fn is None and not x.grad.requires_grad
