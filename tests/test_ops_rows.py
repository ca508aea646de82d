"""ops/rows.py: reductions as products with ones agree with NumPy's, on every path."""

import numpy as np
import pytest

import minidtr as md
from minidtr.ops.rows import SMALL, mean_last, sum_last, sum_leading


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
