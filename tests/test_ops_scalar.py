"""A tensor and a Python scalar (ops/scalar.py): the scalar lives in the op, costs no
storage, gives the values and gradients of a 0-d operand (and of PyTorch), and recomputes
bit for bit."""

import numpy as np
import pytest

import minidtr as md
from minidtr.testing import isolated_allocator, recompute

CASES = [
    ("x * s", lambda x, s: x * s),
    ("s * x", lambda x, s: s * x),
    ("x + s", lambda x, s: x + s),
    ("x - s", lambda x, s: x - s),
    ("s - x", lambda x, s: s - x),
    ("x / s", lambda x, s: x / s),
    ("s / x", lambda x, s: s / x),
    ("x ** s", lambda x, s: x**s),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, fn", CASES, ids=[c[0] for c in CASES])
def test_a_scalar_operand_is_a_0d_operand_in_values_and_gradients(name, fn, dtype):
    rng = np.random.default_rng(0)
    data = rng.uniform(0.5, 2.0, (3, 4)).astype(dtype)
    for s in (1.5, -3, 2):
        x = md.tensor(data, requires_grad=True)
        y = fn(x, s)
        (y * y).sum().backward()
        x0 = md.tensor(data, requires_grad=True)
        y0 = fn(x0, md.tensor(np.asarray(s, dtype)))  # the same with a 0-d tensor
        (y0 * y0).sum().backward()
        assert y.storage.producer.op.name.endswith("_scalar")
        assert y.dtype == y0.dtype == dtype
        np.testing.assert_array_equal(y.numpy(), y0.numpy())
        np.testing.assert_allclose(x.grad.numpy(), x0.grad.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(recompute(y), y.numpy())


@pytest.mark.parametrize("name, fn", CASES, ids=[c[0] for c in CASES])
def test_a_scalar_operand_matches_torch(name, fn):
    torch = pytest.importorskip("torch")
    data = np.random.default_rng(1).uniform(0.5, 2.0, (5,))
    x = md.tensor(data, requires_grad=True)
    fn(x, 2.5).sum().backward()
    t = torch.tensor(data, requires_grad=True)
    fn(t, 2.5).sum().backward()
    np.testing.assert_allclose(fn(md.tensor(data), 2.5).numpy(), fn(t, 2.5).detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


F16_EXACT = [c for c in CASES if c[0] != "s / x"]  # PyTorch's s / x is 1 / x, then times s


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("name, fn", F16_EXACT, ids=[c[0] for c in F16_EXACT])
def test_a_float16_tensor_and_a_scalar_give_torchs_bits(name, fn):
    """PyTorch multiplies and divides a float16 tensor by a scalar in float32, rounding
    once (so ``x / 70000`` and ``x * 1e-8`` are not 0), and rounds the scalar of ``+``,
    ``-`` and ``**`` to float16 first; so does minidtr."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    data = (rng.standard_normal(2000) * rng.choice([1e-3, 1.0, 300.0], 2000)).astype(np.float16)
    data = np.abs(data) + np.float16(0.01)  # (a power of a negative base is NaN)
    wide = name in ("x * s", "s * x", "x / s")  # (PyTorch refuses a + or ** past float16's)
    for s in (0.1, 0.7, 1.1, 3.3, 1e-8, 70000.0 if wide else 5.0):
        ours, theirs = fn(md.tensor(data), s).numpy(), fn(torch.tensor(data), s).numpy()
        assert ours.dtype == np.float16
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{name}, s = {s}")


def test_a_float16_mean_gradient_rounds_once_as_torchs():
    torch = pytest.importorskip("torch")
    x = md.tensor(np.zeros(3, np.float16), requires_grad=True)
    x.mean().backward(md.tensor(np.float16(0.3)))
    t = torch.zeros(3, dtype=torch.float16, requires_grad=True)
    t.mean().backward(torch.tensor(0.3, dtype=torch.float16))
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())  # 0.10004, not 0.1


def test_a_scalar_operand_makes_no_storage():
    with isolated_allocator() as allocator:
        x = md.tensor(np.ones(8, np.float32))
        ids, constants = allocator.next_id, allocator.constant_bytes
        y = 1.0 - x * 0.5 + 2
        assert allocator.next_id == ids + 3  # three results, no scalar constant
        assert allocator.constant_bytes == constants
        assert y.numpy().tolist() == [2.5] * 8


def test_a_trace_holds_no_constant_for_a_scalar(tmp_path):
    from minidtr import sim

    x = md.tensor(np.ones(8, np.float32))
    with sim.record(tmp_path / "t.log"):
        y = (x * 0.5).numpy()
    trace = sim.load_log(tmp_path / "t.log")
    calls = [ins for ins in trace.instructions if type(ins).__name__ == "Call" and ins.results]
    assert [c.op for c in calls] == ["mul_scalar"] and calls[0].args != ()
    assert not [ins for ins in trace.instructions if type(ins).__name__ == "Constant"][1:]
    assert y.tolist() == [0.5] * 8


def test_the_sign_of_a_zero_scalar_is_kept():
    """A cache of scalar ops keyed by equal values would take -0.0 for 0.0."""
    x = md.tensor(np.array([-0.0, 1.0], np.float32))
    assert np.signbit((x + 0.0).numpy()[0]) == np.signbit(np.float32(-0.0) + np.float32(0.0))
    assert np.signbit((x + -0.0).numpy()[0])
    assert not np.signbit((x * 0.0).numpy()[1]) and np.signbit((x * -0.0).numpy()[1])


def test_scalar_operands_follow_the_promotion_rules():
    i = md.tensor(np.arange(1, 4))
    assert (i + 1).dtype == np.int64 and (i * 1.5).dtype == np.float32
    assert (i / 2).dtype == np.float32 and (i**2).dtype == np.int64
    b = md.tensor(np.array([True, False]))
    assert (b + 2).dtype == np.int64 and (b * 2.5).dtype == np.float32
    with pytest.raises(md.DTypeError, match="sub: subtracting bool values"):
        b - 1
    with pytest.raises(md.DTypeError, match="sub: subtracting bool values"):
        1.0 - md.tensor(np.ones(2, np.float32)) - True
    with pytest.raises(ValueError, match="negative integer powers"):
        i**-1
    with pytest.raises(OverflowError, match="does not fit"):
        md.tensor(np.arange(3, dtype=np.int32)) + 2**40


def test_scalar_ops_rematerialize_under_a_budget():
    from minidtr.testing import assert_remat_equivalent

    def step():
        rng = np.random.default_rng(0)
        w = md.tensor(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, requires_grad=True)
        h = md.tensor(rng.standard_normal((8, 16)).astype(np.float32))
        for _ in range(6):
            h = 1.0 - md.tanh(h @ w) * 0.5 + 0.25
            h = h / 1.5 + h**2 * 0.1 + 2.0 / (h * h + 1.0)
        loss = (h * h).mean()
        loss.backward()
        return [loss, w.grad]

    reports = assert_remat_equivalent(step, budgets=[0.6, 0.45], heuristics=["dtr", "dtr_eq"])
    assert all(r["status"] == "ok" for r in reports) and sum(r["remats"] for r in reports) > 0


@pytest.mark.parametrize("name, fn", [("x ** s", lambda x, s: x**s), ("s / x", lambda x, s: s / x)])
def test_a_gradient_does_not_depend_on_another_dtype_used_first(name, fn):
    """Gradient ops are shared per scalar: a float16 tensor's gradient computed in float16
    after a float64 tensor used the same scalar (``np.float64(3) == np.float16(3)``), as
    in a fresh process, not in float64 (a different rounding)."""
    data = np.linspace(-4.0, 4.0, 101).astype(np.float16)
    data[data == 0] = 0.25

    def gradient():
        x = md.tensor(data, requires_grad=True)
        fn(x, 3).sum().backward()
        return x.grad.numpy()

    with np.errstate(all="ignore"):
        md.ops.op.shared_op.cache_clear()  # as in a fresh process
        fresh = gradient()
        md.ops.op.shared_op.cache_clear()
        wide = md.tensor(data.astype(np.float64), requires_grad=True)
        fn(wide, 3).sum().backward()
        after_float64 = gradient()
    assert after_float64.tobytes() == fresh.tobytes()
