"""batch_norm and layer_norm through the generic harness, plus running statistics and eval mode."""

import numpy as np
import pytest

import minidtr as md
from minidtr.testing import recompute
from op_harness import HAS_TORCH, OpCase, define_tests


def normalize_reference(x, axes, weight=None, bias=None, eps=1e-5, param_axis=1):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + eps)
    shape = [1] * x.ndim
    shape[param_axis] = -1
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y.astype(x.dtype)


def bn_reference(x, weight=None, bias=None):
    return normalize_reference(x, (0, *range(2, x.ndim)), weight, bias)


def ln_reference(x, weight=None, bias=None):
    return normalize_reference(x, (x.ndim - 1,), weight, bias, param_axis=x.ndim - 1)


def bn_eval_reference(x, weight, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5)
    return (y * weight.reshape(shape) + bias.reshape(shape)).astype(x.dtype)


def with_positive_var(rng, shapes, dtype):
    *rest, var_shape = shapes
    return [
        *(rng.standard_normal(s).astype(dtype) for s in rest),
        (rng.random(var_shape) + 0.5).astype(dtype),
    ]


def torch_f(t):
    return t.nn.functional


BN_SHAPES = [((6, 3), (3,), (3,)), ((2, 3, 4, 5), (3,), (3,)), ((3, 2, 5), (2,), (2,))]
LN_SHAPES = [((4, 5), (5,), (5,)), ((2, 3, 6), (6,), (6,)), ((7,), (7,), (7,))]

CASES = [
    OpCase(
        "batch_norm",
        md.batch_norm,
        bn_reference,
        BN_SHAPES,
        torch_fn=lambda t, x, w, b: torch_f(t).batch_norm(x, None, None, w, b, training=True),
        bad=[
            ((4, 3), (4,), (3,)),
            ((4, 3, 2), (3,), (2,)),
            ((1, 3), (3,), (3,)),
            ((3,), (3,), (3,)),
            [np.ones((4, 3), np.float32), np.ones(3, np.float64), np.ones(3, np.float32)],
        ],
    ),
    OpCase(
        "batch_norm[no affine]",
        lambda x: md.batch_norm(x, None, None),
        bn_reference,
        [((5, 4),), ((2, 3, 3, 2),)],
        torch_fn=lambda t, x: torch_f(t).batch_norm(x, None, None, training=True),
    ),
    OpCase(
        "batch_norm[weight only]",
        lambda x, w: md.batch_norm(x, w, None),
        lambda x, w: bn_reference(x, w),
        [((2, 3, 3, 2), (3,))],
        torch_fn=lambda t, x, w: torch_f(t).batch_norm(x, None, None, w, training=True),
    ),
    OpCase(
        "batch_norm[bias only]",
        lambda x, b: md.batch_norm(x, None, b),
        lambda x, b: bn_reference(x, None, b),
        [((5, 4), (4,))],
        torch_fn=lambda t, x, b: torch_f(t).batch_norm(x, None, None, None, b, training=True),
    ),
    OpCase(
        "batch_norm[eval]",
        lambda x, w, b, m, v: md.batch_norm(x, w, b, m, v, training=False),
        bn_eval_reference,
        [((4, 3), (3,), (3,), (3,), (3,)), ((2, 3, 4, 5), (3,), (3,), (3,), (3,))],
        make=with_positive_var,
        grad_inputs=(0, 1, 2),
        torch_fn=lambda t, x, w, b, m, v: torch_f(t).batch_norm(x, m, v, w, b, training=False),
    ),
    OpCase(
        "batch_norm[relu]",
        lambda x, w, b: md.batch_norm(x, w, b, relu=True),
        lambda x, w, b: np.maximum(bn_reference(x, w, b), 0),
        BN_SHAPES,
        torch_fn=lambda t, x, w, b: t.relu(
            torch_f(t).batch_norm(x, None, None, w, b, training=True)
        ),
    ),
    OpCase(
        "batch_norm[relu, no affine]",
        lambda x: md.batch_norm(x, None, None, relu=True),
        lambda x: np.maximum(bn_reference(x), 0),
        [((2, 3, 3, 2),)],
        torch_fn=lambda t, x: t.relu(torch_f(t).batch_norm(x, None, None, training=True)),
    ),
    OpCase(
        "batch_norm[residual, relu]",
        lambda x, w, b, r: md.batch_norm(x, w, b, relu=True, residual=r),
        lambda x, w, b, r: np.maximum(bn_reference(x, w, b) + r, 0),
        [((6, 3), (3,), (3,), (6, 3)), ((2, 3, 4, 5), (3,), (3,), (2, 3, 4, 5))],
        torch_fn=lambda t, x, w, b, r: t.relu(
            torch_f(t).batch_norm(x, None, None, w, b, training=True) + r
        ),
        bad=[((2, 3, 4, 5), (3,), (3,), (2, 3, 4, 1))],
    ),
    OpCase(
        "batch_norm[residual]",
        lambda x, r: md.batch_norm(x, None, None, residual=r),
        lambda x, r: bn_reference(x) + r,
        [((2, 3, 3, 2), (2, 3, 3, 2))],
        torch_fn=lambda t, x, r: torch_f(t).batch_norm(x, None, None, training=True) + r,
    ),
    OpCase(
        "batch_norm[residual, relu, eval]",
        lambda x, w, b, m, v, r: md.batch_norm(
            x, w, b, m, v, training=False, relu=True, residual=r
        ),
        lambda x, w, b, m, v, r: np.maximum(bn_eval_reference(x, w, b, m, v) + r, 0),
        [((2, 3, 4, 5), (3,), (3,), (3,), (3,), (2, 3, 4, 5))],
        make=lambda rng, shapes, dtype: [
            *with_positive_var(rng, shapes[:5], dtype),
            rng.standard_normal(shapes[5]).astype(dtype),
        ],
        grad_inputs=(0, 1, 2, 5),
        torch_fn=lambda t, x, w, b, m, v, r: t.relu(
            torch_f(t).batch_norm(x, m, v, w, b, training=False) + r
        ),
    ),
    OpCase(
        "batch_norm[relu, eval]",
        lambda x, w, b, m, v: md.batch_norm(x, w, b, m, v, training=False, relu=True),
        lambda *a: np.maximum(bn_eval_reference(*a), 0),
        [((2, 3, 4, 5), (3,), (3,), (3,), (3,))],
        make=with_positive_var,
        grad_inputs=(0, 1, 2),
        torch_fn=lambda t, x, w, b, m, v: t.relu(
            torch_f(t).batch_norm(x, m, v, w, b, training=False)
        ),
    ),
    OpCase(
        "layer_norm",
        md.layer_norm,
        ln_reference,
        LN_SHAPES,
        torch_fn=lambda t, x, w, b: torch_f(t).layer_norm(x, x.shape[-1:], w, b),
        bad=[
            ((3, 5), (4,), (5,)),
            ((3, 5), (5,), (5, 1)),
            [np.ones((2, 3), np.float64), np.ones(3, np.float32), np.ones(3, np.float32)],
        ],
    ),
    OpCase(
        "layer_norm[no affine]",
        lambda x: md.layer_norm(x, None, None),
        ln_reference,
        [((3, 6),), ((2, 2, 4),)],
        torch_fn=lambda t, x: torch_f(t).layer_norm(x, x.shape[-1:]),
    ),
    OpCase(
        "layer_norm[weight only]",
        lambda x, w: md.layer_norm(x, w, None),
        lambda x, w: ln_reference(x, w),
        [((3, 6), (6,))],
        torch_fn=lambda t, x, w: torch_f(t).layer_norm(x, x.shape[-1:], w),
    ),
]

globals().update(define_tests(CASES))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 5, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_running_stats_and_eval_match_torch(shape, dtype):
    import torch

    rng = np.random.default_rng(0)
    channels = shape[1]
    weight = rng.standard_normal(channels).astype(dtype)
    bias = rng.standard_normal(channels).astype(dtype)
    mean, var = md.zeros(channels, dtype=dtype), md.ones(channels, dtype=dtype)
    t_mean = torch.zeros(channels, dtype=torch.from_numpy(weight).dtype)
    t_var = torch.ones_like(t_mean)
    w, b = md.tensor(weight), md.tensor(bias)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for step in range(3):
        x = (rng.standard_normal(shape) * (step + 1) + step).astype(dtype)
        y = md.batch_norm(md.tensor(x), w, b, mean, var, training=True, momentum=0.3)
        ty = torch_f(torch).batch_norm(
            torch.tensor(x),
            t_mean,
            t_var,
            torch.tensor(weight),
            torch.tensor(bias),
            training=True,
            momentum=0.3,
        )
        np.testing.assert_allclose(y.numpy(), ty.numpy(), **tol)
        np.testing.assert_allclose(mean.numpy(), t_mean.numpy(), **tol)
        np.testing.assert_allclose(var.numpy(), t_var.numpy(), **tol)
    assert mean.dtype == dtype and var.dtype == dtype
    x = rng.standard_normal(shape).astype(dtype)
    y = md.batch_norm(md.tensor(x), w, b, mean, var, training=False)
    ty = torch_f(torch).batch_norm(
        torch.tensor(x), t_mean, t_var, torch.tensor(weight), torch.tensor(bias), training=False
    )
    np.testing.assert_allclose(y.numpy(), ty.numpy(), **tol)


def test_running_stats_are_replaced_copy_on_write():
    x = md.tensor(np.arange(12.0).reshape(6, 2))
    mean, var = md.zeros(2, dtype=md.float64), md.ones(2, dtype=md.float64)
    old_mean, old_var = mean.detach(), var.detach()  # other handles on the old storages
    md.batch_norm(x, None, None, mean, var, momentum=0.5)
    np.testing.assert_array_equal(old_mean.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(old_var.numpy(), [1.0, 1.0])
    np.testing.assert_allclose(mean.numpy(), [2.5, 3.0])  # 0.5 * 0 + 0.5 * (5, 6)
    np.testing.assert_allclose(var.numpy(), 0.5 + 0.5 * np.var(np.arange(0, 12, 2.0), ddof=1))
    assert not mean.storage.evictable  # a constant: no recipe chaining step to step


def test_batch_norm_output_recomputes_after_running_stats_moved():
    x = md.tensor(np.random.default_rng(1).standard_normal((5, 3)), requires_grad=True)
    mean, var = md.zeros(3, dtype=md.float64), md.ones(3, dtype=md.float64)
    y = md.batch_norm(x, None, None, mean, var)
    before = y.numpy()
    md.batch_norm(x * 2.0, None, None, mean, var)
    assert recompute(y).tobytes() == before.tobytes()


def test_batch_norm_gradients_with_weight_none_match_affine_with_ones():
    rng = np.random.default_rng(2)
    x_np, g_np = rng.standard_normal((4, 3, 2, 2)), rng.standard_normal((4, 3, 2, 2))
    grads = []
    for affine in (False, True):
        x = md.tensor(x_np, requires_grad=True)
        w = md.ones(3, dtype=md.float64, requires_grad=True) if affine else None
        b = md.zeros(3, dtype=md.float64, requires_grad=True) if affine else None
        y = md.batch_norm(x, w, b)
        y.backward(md.tensor(g_np))
        grads.append((y.numpy(), x.grad.numpy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-12, atol=1e-12)


def test_layer_norm_with_weight_none_normalizes_each_row():
    x = md.tensor(np.random.default_rng(3).standard_normal((4, 8)) * 5 + 3)
    y = md.layer_norm(x, None, None).numpy()
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, rtol=1e-5)


def test_batch_norm_argument_errors():
    x = md.zeros((4, 3))
    with pytest.raises(ValueError, match="batch_norm: eval mode"):
        md.batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match="batch_norm: give both"):
        md.batch_norm(x, None, None, md.zeros(3), None)
    with pytest.raises(md.ShapeError, match=r"batch_norm: running_var must have shape \(3,\)"):
        md.batch_norm(x, None, None, md.zeros(3), md.ones(4))
    with pytest.raises(md.DTypeError, match="batch_norm: running_mean has dtype float64"):
        md.batch_norm(x, None, None, md.zeros(3, dtype=md.float64), md.ones(3))
    with pytest.raises(md.ShapeError, match="more than 1 value per channel"):
        md.batch_norm(md.zeros((1, 3, 1, 1)), None, None)


def test_batch_norm_eval_with_one_sample_is_allowed():
    y = md.batch_norm(md.ones((1, 2)), None, None, md.zeros(2), md.ones(2), training=False)
    np.testing.assert_allclose(y.numpy(), 1 / np.sqrt(1 + 1e-5) * np.ones((1, 2)), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, layout",
    [((48,), "c"), ((1438, 48), "c"), ((64, 16, 16), "c"), ((16, 64), "transposed")],
)
@pytest.mark.parametrize("weight", [True, False])
def test_layer_norm_gradient_kernel_matches_the_textbook_form_in_float64(
    dtype, shape, layout, weight
):
    """Layer norm's gradient kernel (sums as products, five broadcast passes) against
    dx = rstd * (dh - mean(dh) - h * mean(dh * h)) in float64: rows far from zero (an
    offset of 1000: c = x - mean is made first, so nothing cancels), a constant row
    (variance 0), x and g laid out column by column, no weight."""
    from minidtr.ops.norm import Normalize, NormalizeGrad

    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape) * 3 + 1000.0
    x.reshape(-1, shape[-1])[0] = 7.0  # a constant row
    g = rng.standard_normal(shape)
    w = rng.standard_normal(shape[-1])
    x, g, w = x.astype(dtype), g.astype(dtype), w.astype(dtype)
    if layout == "transposed":  # the same values, laid out column by column
        x, g = np.asfortranarray(x), np.asfortranarray(g)
    axis = len(shape) - 1
    op = Normalize("layer_norm", (axis,), axis, 1e-5, weight, False)
    _, mean, var = op.forward(np, x, *([w] if weight else []))
    dx, dweight, dbias = NormalizeGrad(op).forward(np, x, mean, var, *([w] if weight else []), g)

    x64, g64, m64, v64 = (a.astype(np.float64) for a in (x, g, mean, var))
    rstd = 1.0 / np.sqrt(v64 + 1e-5)
    h = (x64 - m64) * rstd
    dh = g64 * w.astype(np.float64) if weight else g64
    want = rstd * (dh - dh.mean(-1, keepdims=True) - h * (dh * h).mean(-1, keepdims=True))
    lead = tuple(range(len(shape) - 1))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for got, expected in ((dx, want), (dweight, (g64 * h).sum(lead)), (dbias, g64.sum(lead))):
        assert got.dtype == dtype and got.shape == expected.shape
        assert np.abs(got - expected).max() <= tol * max(1.0, np.abs(expected).max())
