"""ops/rows.py: reductions as products with ones agree with NumPy's, on every path, and
maxima along a short last axis are NumPy's, to the bit."""

import numpy as np
import pytest

import minidtr as md
from minidtr.ops.rows import MANY_ROWS, SHORT_ROW, SMALL, max_last, mean_last, sum_last, sum_leading


@pytest.mark.parametrize("shape", [(3, 5), (64, 48), (8, 16, 48), (4, 3, 32, 32), (1437, 48)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_reductions_agree_with_numpy(shape, dtype):
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(sum_last(np, a), a.sum(axis=-1, keepdims=True), rtol=tol, atol=tol)
    np.testing.assert_allclose(mean_last(np, a), a.mean(axis=-1, keepdims=True), rtol=tol, atol=tol)
    leading = tuple(range(a.ndim - 1))
    np.testing.assert_allclose(sum_leading(np, a), a.sum(axis=leading), rtol=tol, atol=tol * 10)
    assert sum_last(np, a).shape == a.shape[:-1] + (1,) and sum_last(np, a).dtype == dtype


def test_non_contiguous_and_non_finite_values():
    a = np.random.default_rng(1).standard_normal((96, 64)).astype(np.float32)
    view = a.T  # not contiguous: sum_leading falls back to NumPy's reduction
    np.testing.assert_allclose(sum_leading(np, view), view.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(sum_last(np, view), view.sum(axis=-1, keepdims=True), rtol=1e-5)
    a[3, 5], a[7, 0] = np.inf, np.nan
    assert np.isinf(sum_last(np, a)[3, 0]) and np.isnan(sum_last(np, a)[7, 0])
    assert a.size >= SMALL  # the product path was the one checked


def test_large_layer_norm_and_softmax_match_float64():
    """The product path inside the ops: float32 results within float32 rounding of the
    same ops in float64."""
    rng = np.random.default_rng(2)
    x64 = rng.standard_normal((512, 48))
    out = {}
    for dtype in (md.float32, md.float64):
        x = md.tensor(x64, dtype=dtype, requires_grad=True)
        w = md.tensor(np.linspace(0.5, 1.5, 48), dtype=dtype, requires_grad=True)
        y = md.softmax(md.layer_norm(x, w, None), axis=-1)
        (y * md.tensor(np.arange(48.0), dtype=dtype)).sum().backward()
        out[dtype] = (y.numpy().astype(np.float64), x.grad.numpy().astype(np.float64))
    for got, want in zip(out[md.float32], out[md.float64], strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize(
    "shape",
    [(3, 5), (256, 16), (64, 2, 16, 16), (1438, 10), (4096, 1), (300, SHORT_ROW), (8, 2048)],
)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_maxima_along_the_last_axis_are_numpys(shape, dtype):
    """Every value, special ones included (NaN, infinities, signed zeros, rows of -inf),
    on the transposed path and the plain one, from contiguous and strided arrays; the
    scratch's own values do not matter."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 40), replace=False)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0] * 8, dtype=dtype)
    flat[picks] = specials[: picks.size]
    if a.shape[-1] > 1:
        a[(0,) * (a.ndim - 1)] = -np.inf  # a whole row of -inf
    for source in (a, np.asfortranarray(a), a[..., ::-1]):
        scratch = np.full(source.shape, 7.0, dtype)
        got = max_last(np, source, scratch)
        want = source.max(axis=-1, keepdims=True)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        # the same bits, zeros' signs aside (x - max gives the same floats either way)
        assert np.array_equal(np.signbit(got) | (got == 0), np.signbit(want) | (want == 0))
    transposed = len(shape) >= 2 and shape[-1] <= SHORT_ROW and a.size >= MANY_ROWS * shape[-1]
    assert transposed == (shape not in [(3, 5), (8, 2048)])  # both paths are checked


def test_a_scratch_that_is_not_contiguous_takes_the_plain_path():
    a = np.random.default_rng(4).standard_normal((512, 8)).astype(np.float32)
    scratch = np.empty((8, 512), np.float32).T  # the right shape, F-ordered
    before = scratch.copy()
    np.testing.assert_array_equal(max_last(np, a, scratch), a.max(axis=-1, keepdims=True))
    np.testing.assert_array_equal(scratch, before)  # not written


def test_softmax_and_cross_entropy_are_unchanged_by_the_transposed_maxima(monkeypatch):
    """The ops that shift by the row maximum give, bit for bit, what they give with
    NumPy's own maximum (the maximum is exact; only the order of the work changed)."""
    import minidtr.ops.loss as loss_module

    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 2, 16, 16)).astype(np.float32) * 4
    logits = rng.standard_normal((1438, 10)).astype(np.float32) * 3
    targets = rng.integers(0, 10, size=1438)

    def run():
        xt = md.tensor(x, requires_grad=True)
        lt = md.tensor(logits, requires_grad=True)
        loss = (md.softmax(xt, axis=-1) * md.tensor(x)).sum()
        loss = loss + md.log_softmax(xt, axis=-1).sum() + md.cross_entropy(lt, md.tensor(targets))
        loss.backward()
        return [v.numpy().copy() for v in (loss, xt.grad, lt.grad)]

    fast = run()
    monkeypatch.setattr(loss_module, "max_last", lambda xp, a, scratch: a.max(-1, keepdims=True))
    plain = run()
    for got, want in zip(fast, plain, strict=True):
        assert np.array_equal(got, want)
