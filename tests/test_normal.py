"""ops/normal.py: GELU and its gradient on float32 values without an error function.
The polynomial is the one benchmarks/fit_normal_tail.py fits, both agree with the
double-precision formulas to a few units in float32's last place where the values are
not subnormal (and far better than ``1 + erf`` in the left tail), and GELU takes them
exactly where erf is slow."""

from __future__ import annotations

import importlib.util
import math
import pathlib
import sys

import numpy as np
import pytest

import minidtr as md
from minidtr import backend
from minidtr.ops import normal
from minidtr.ops.activation import gelu_grad

ROOT = pathlib.Path(__file__).resolve().parents[1]
EPS32 = float(np.finfo(np.float32).eps)


def exact_gradient(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Phi(x) + x phi(x) in float64 at the float32 values ``x``, and the scale its errors
    are measured against, Phi(x) + |x phi(x)| (the sum crosses zero near x = -0.75)."""
    from scipy.special import ndtr

    wide = x.astype(np.float64)
    density = np.exp(-wide * wide / 2.0) / math.sqrt(2.0 * math.pi)
    return ndtr(wide) + wide * density, ndtr(wide) + np.abs(wide * density)


def test_the_coefficients_are_what_the_fit_gives(monkeypatch):
    pytest.importorskip("scipy")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # (its ``interrupts``)
    spec = importlib.util.spec_from_file_location(
        "fit_normal_tail", ROOT / "benchmarks" / "fit_normal_tail.py"
    )
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    assert fit.P == normal.P
    np.testing.assert_allclose(fit.fit(), normal.COEFFICIENTS, rtol=1e-9, atol=0)
    assert fit.largest_error(np.array(normal.COEFFICIENTS)) < 0.5 * EPS32


@pytest.mark.parametrize(
    ("low", "high", "units"),
    [(-12.0, -8.0, 40.0), (-8.0, -2.0, 10.0), (-2.0, 2.0, 5.0), (2.0, 9.0, 1.0)],
)
def test_the_gradient_agrees_with_double_precision(low, high, units):
    """The largest error over a dense grid, in float32's epsilon times the scale; the
    left tail loses digits to ``x * x`` and to exp's condition there, as any float32
    evaluation at these x does."""
    pytest.importorskip("scipy")
    x = np.linspace(low, high, 400_001, dtype=np.float32)
    with np.errstate(over="ignore"):
        got = gelu_grad(np, x, np.ones_like(x)).astype(np.float64)
    exact, scale = exact_gradient(x)
    assert np.max(np.abs(got - exact) / scale) <= units * EPS32


def test_the_left_tail_keeps_its_digits_where_one_plus_erf_loses_them():
    erf = pytest.importorskip("scipy.special").erf

    x = np.linspace(-8.0, -3.0, 50_001, dtype=np.float32)
    exact, scale = exact_gradient(x)
    got = gelu_grad(np, x, np.ones_like(x)).astype(np.float64)
    cdf = (1.0 + erf(x / np.float32(math.sqrt(2.0)))) / 2.0  # in float32, as before
    density = np.exp(-x * x / np.float32(2.0)) / np.float32(math.sqrt(2.0 * math.pi))
    by_erf = (cdf + x * density).astype(np.float64)
    assert np.max(np.abs(got - exact) / scale) < 1e-5
    assert np.max(np.abs(by_erf - exact) / scale) > 1e-3


@pytest.mark.parametrize(("low", "high", "units"), [(-12.0, -5.0, 40.0), (-5.0, 9.0, 8.0)])
def test_the_forward_agrees_with_double_precision(low, high, units):
    """GELU itself, x Phi(x), in float32 epsilons of its value, on sizes that end in a
    part of each length the halving reaches (and one below ``SMALL``)."""
    ndtr = pytest.importorskip("scipy.special").ndtr

    for size in (400_001, normal.SMALL - 3, 3 * normal.SMALL + 1):
        x = np.linspace(low, high, size, dtype=np.float32)
        got = normal.gelu(np, x, np.empty_like(x)).astype(np.float64)
        exact = x.astype(np.float64) * ndtr(x.astype(np.float64))
        seen = exact != 0.0
        assert np.max(np.abs(got - exact)[seen] / np.abs(exact[seen])) <= units * EPS32


def test_the_forward_writes_only_its_output():
    x = np.random.default_rng(0).standard_normal((3, 5000)).astype(np.float32)
    kept = x.copy()
    out = np.full_like(x, np.nan)
    assert normal.gelu(np, x, out) is out
    np.testing.assert_array_equal(x, kept)
    assert np.isfinite(out).all()


def test_special_values():
    x = np.array([0.0, -0.0, 3e38, -3e38, 1e-30, -1e-30, np.nan, np.inf, -np.inf], np.float32)
    g = np.full_like(x, 2.0)
    with np.errstate(over="ignore", invalid="ignore"):
        got = gelu_grad(np, x, g)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[:6], [1.0, 1.0, 2.0, 0.0, 1.0, 1.0], rtol=2 * EPS32, atol=0)
    assert np.isnan(got[6:]).all()  # inf * phi(inf) is 0 * inf, as by the erf route
    with np.errstate(over="ignore", invalid="ignore"):
        values = normal.gelu(np, x, np.empty_like(x))
    np.testing.assert_array_equal(values[:4], np.array([0.0, -0.0, 3e38, -0.0], np.float32))
    np.testing.assert_allclose(values[4:6], [5e-31, -5e-31], rtol=2 * EPS32)
    assert np.isnan(values[6]) and values[7] == np.inf and np.isnan(values[8])


def test_gelu_takes_the_polynomial_where_erf_is_slow(monkeypatch):
    calls = []

    def counted(kernel):
        def kernel_counted(xp, x, *rest):
            calls.append((kernel.__name__, x.dtype))
            return kernel(xp, x, *rest)

        return kernel_counted

    monkeypatch.setattr(normal, "gelu_grad", counted(normal.gelu_grad))
    monkeypatch.setattr(normal, "gelu", counted(normal.gelu))
    pytest.importorskip("scipy")  # (float64's erf)
    for dtype in (np.float32, np.float64, np.float16):
        x = md.tensor(np.linspace(-3, 3, 50).astype(dtype), requires_grad=True)
        md.gelu(x).sum().backward()
    # float16 computes in float32 (``in_float32``); float64 keeps SciPy's erf
    assert calls == [("gelu", np.float32), ("gelu_grad", np.float32)] * 2
    assert backend.erf_is_slow(np, np.float32) and not backend.erf_is_slow(np, np.float64)


def test_float32_gelu_needs_no_scipy_and_float64_says_it_does(monkeypatch):
    """With SciPy not importable, float32 GELU runs forward and backward (the polynomial
    route) and equals what it computes with SciPy there; float64 ends in the one-line
    error that names the extra."""
    x = np.linspace(-4, 4, 301, dtype=np.float32)

    def forward_and_grad(values):
        t = md.tensor(values, requires_grad=True)
        y = md.gelu(t)
        y.sum().backward()
        return y.numpy(), t.grad.numpy()

    with_scipy = forward_and_grad(x)
    monkeypatch.setitem(sys.modules, "scipy", None)  # ``import scipy...`` now fails
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    without = forward_and_grad(x)
    np.testing.assert_array_equal(with_scipy[0], without[0])
    np.testing.assert_array_equal(with_scipy[1], without[1])
    with pytest.raises(Exception, match=r"needs SciPy: pip install 'minidtr\[scipy\]'"):
        md.gelu(md.tensor(x.astype(np.float64))).numpy()
