"""dropout, randn and rand: seeds in recipes, so values replay bit for bit."""

import importlib.util

import numpy as np
import pytest

import minidtr as md
from minidtr.testing import assert_remat_equivalent, recompute
from op_harness import OpCase, define_tests


def dropout_reference(x, p, seed):
    """The contract: element i is kept where the i-th float32 uniform drawn from
    ``default_rng(seed)`` is >= p, and scaled by 1 / (1 - p)."""
    keep = np.random.default_rng(seed).random(x.shape, dtype=np.float32) >= p
    return np.where(keep, x / (1 - p), 0).astype(x.dtype)


def no_inputs(rng, shapes, dtype):
    return []


NO_INPUTS = "no inputs to grow: the case fixes the output's shape"

CASES = [
    OpCase(
        "dropout",
        lambda x: md.dropout(x, 0.3, seed=7),
        lambda x: dropout_reference(x, 0.3, 7),
        [((4, 5),), ((2, 3, 4),), ((),)],
        bad=[[np.ones((2, 3), np.int64)]],
    ),
    OpCase(
        "dropout[p=0.9]",
        lambda x: md.dropout(x, 0.9, seed=123),
        lambda x: dropout_reference(x, 0.9, 123),
        [((6, 7),)],
    ),
    OpCase(
        "randn",
        lambda: md.randn((3, 4), seed=5),
        lambda: np.random.default_rng(5).standard_normal((3, 4), dtype=np.float32),
        [()],
        make=no_inputs,
        dtypes=(np.float32,),
        unwatched=NO_INPUTS,
    ),
    OpCase(
        "randn[float64]",
        lambda: md.randn(6, dtype=md.float64, seed=2),
        lambda: np.random.default_rng(2).standard_normal(6),
        [()],
        make=no_inputs,
        dtypes=(np.float64,),
        unwatched=NO_INPUTS,
    ),
    OpCase(
        "rand",
        lambda: md.rand((2, 3, 2), seed=9),
        lambda: np.random.default_rng(9).random((2, 3, 2), dtype=np.float32),
        [()],
        make=no_inputs,
        dtypes=(np.float32,),
        unwatched=NO_INPUTS,
    ),
]

globals().update(define_tests(CASES))


def ramp(shape=(8, 9)):
    return md.tensor(np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape).astype(np.float32))


def mask(t):
    return t.numpy() != 0


def test_same_seed_same_mask_and_other_seeds_differ():
    x = ramp()
    a, b, c = md.dropout(x, 0.5, seed=1), md.dropout(x, 0.5, seed=1), md.dropout(x, 0.5, seed=2)
    assert a.numpy().tobytes() == b.numpy().tobytes()
    assert (mask(a) != mask(c)).any()


def test_mask_does_not_depend_on_the_dtype():
    x = ramp()
    a = md.dropout(x, 0.4, seed=3)
    b = md.dropout(x.astype(md.float64), 0.4, seed=3)
    np.testing.assert_array_equal(mask(a), mask(b))


def test_default_seed_is_drawn_from_the_default_generator():
    x = ramp()
    md.manual_seed(11)
    first, second = md.dropout(x), md.dropout(x)
    md.manual_seed(11)
    again = md.dropout(x)
    assert first.numpy().tobytes() == again.numpy().tobytes()
    assert (mask(first) != mask(second)).any()


def test_recomputed_dropout_is_bit_identical():
    y = md.dropout(ramp(), 0.5)
    before = y.numpy()
    assert recompute(y).tobytes() == before.tobytes()


def test_backward_uses_the_forward_mask():
    x = md.tensor(np.random.default_rng(0).random((10, 10)) + 1.0, requires_grad=True)
    y = md.dropout(x, 0.25)
    y.sum().backward()
    kept = mask(y)
    assert 0 < kept.sum() < kept.size
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, 1 / 0.75, 0.0))


def test_identity_when_not_training_or_p_zero():
    x = ramp()
    assert md.dropout(x, 0.5, training=False) is x
    assert md.dropout(x, 0.0) is x


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_p_out_of_range_is_rejected(p):
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\], got"):
        md.dropout(ramp(), p)


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")
def test_p_one_zeroes_everything_as_pytorch():
    """x * 0, as PyTorch's: NaN where x is infinite or NaN, and a zero gradient."""
    values = np.array([np.inf, 1.0, np.nan, -2.0, 0.0], dtype=np.float32)
    x = md.tensor(values, requires_grad=True)
    y = md.dropout(x, 1.0)
    np.testing.assert_array_equal(y.numpy(), values * np.float32(0))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(5, np.float32))
    assert recompute(y).tobytes() == y.numpy().tobytes()


def test_dropout_preserves_the_mean_and_drops_a_fraction_p():
    y = md.dropout(md.ones((200, 500)), 0.3, seed=0).numpy()
    assert abs(y.mean() - 1.0) < 0.01  # std of the mean is about 0.002
    assert abs((y == 0).mean() - 0.3) < 0.01
    assert set(np.unique(y).tolist()) == {0.0, np.float32(1 / 0.7).item()}


def test_dropout_chain_is_bit_identical_under_a_tight_budget():
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((16, 32)).astype(np.float32))
    w = md.tensor(rng.standard_normal((32, 32)).astype(np.float32) * 0.2, requires_grad=True)

    def step():
        md.manual_seed(4)
        h = x
        for _ in range(10):
            h = md.dropout(md.tanh(h @ w), 0.3)
        loss = (h * h).sum()
        loss.backward()
        return loss

    reports = assert_remat_equivalent(step, budgets=[0.5, 0.8], grads_of=[w])
    assert any(r["remats"] > 0 for r in reports), reports


# ---- randn / rand -----------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [md.randn, md.rand])
def test_int_seed_generator_and_default_seed_reproduce(fn):
    assert fn((3, 4), seed=5).numpy().tobytes() == fn((3, 4), seed=5).numpy().tobytes()
    assert (fn((3, 4), seed=5).numpy() != fn((3, 4), seed=6).numpy()).any()
    gen_a, gen_b = np.random.default_rng(1), np.random.default_rng(1)
    a1, a2 = fn(4, seed=gen_a), fn(4, seed=gen_a)
    b1, b2 = fn(4, seed=gen_b), fn(4, seed=gen_b)
    assert a1.numpy().tobytes() == b1.numpy().tobytes()
    assert a2.numpy().tobytes() == b2.numpy().tobytes()
    assert (a1.numpy() != a2.numpy()).all()
    md.manual_seed(3)
    first = [fn(5).numpy() for _ in range(2)]
    md.manual_seed(3)
    again = [fn(5).numpy() for _ in range(2)]
    assert [a.tobytes() for a in first] == [a.tobytes() for a in again]
    assert (first[0] != first[1]).all()


@pytest.mark.parametrize("dtype", [md.float16, md.float32, md.float64])
def test_random_tensors_are_evictable_and_replay_bit_identically(dtype):
    for fn in (md.randn, md.rand):
        t = fn((5, 6), dtype=dtype)
        assert t.dtype == dtype and t.shape == (5, 6)
        assert t.storage.evictable
        before = t.numpy()
        assert recompute(t).tobytes() == before.tobytes()


def test_random_tensor_statistics():
    n = md.randn(20000, dtype=md.float64, seed=0).numpy()
    u = md.rand(20000, dtype=md.float64, seed=0).numpy()
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_randn_can_require_grad():
    w = md.randn((3, 2), seed=0, requires_grad=True)
    (w * 2.0).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((3, 2), 2.0, np.float32))


def test_random_argument_errors():
    with pytest.raises(md.DTypeError, match="randn: dtype must be floating point"):
        md.randn(3, dtype=md.int64)
    with pytest.raises(ValueError, match="rand: shape must be non-negative ints"):
        md.rand((2, -1))
    with pytest.raises(TypeError, match="randn: shape must be non-negative ints"):
        md.randn((2.5,))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: md.manual_seed("abc"), TypeError, "manual_seed: seed must be an int, got str"),
        (lambda: md.manual_seed(1.5), TypeError, "manual_seed: seed must be an int"),
        (lambda: md.manual_seed(None), TypeError, "manual_seed: seed must be an int"),
        (lambda: md.manual_seed(-1), ValueError, r"manual_seed: seed must be in \[0, 2\*\*64\)"),
        (lambda: md.randn(3, seed="x"), TypeError, "randn: seed must be an int"),
        (lambda: md.rand(3, seed=-2), ValueError, "rand: seed must be in"),
        (lambda: md.randn(3, seed=np.random.RandomState(0)), TypeError, "randn: seed must be"),
        (lambda: md.randn(3, dtype="x"), TypeError, "randn: 'x' is not a dtype"),
        (lambda: md.randn(3, device="gpu"), ValueError, "randn: device must be one of"),
        (lambda: md.randn(2.0), TypeError, "randn: shape must be non-negative ints"),
        (lambda: md.dropout(md.ones(3), 0.5, seed="x"), TypeError, "dropout: seed must be an int"),
        (lambda: md.dropout(md.ones(3), "x"), TypeError, "dropout: p must be a number"),
        (lambda: md.tensor([1.0], device="gpu"), ValueError, r"tensor\(\): device must be"),
        (lambda: md.zeros(3, device="gpu"), ValueError, r"zeros: device must be one of .*'gpu'"),
        (lambda: md.ones(None), TypeError, "ones: shape must be non-negative ints"),
        (lambda: md.full(2, "x"), TypeError, "full: value must be a number"),
        (lambda: md.arange(3, device="tpu"), ValueError, "arange: device must be one of"),
        (lambda: md.ones(2).astype(None), TypeError, "astype: dtype must be a dtype"),
        (lambda: md.nn.Linear(2, 3, dtype="x"), TypeError, "Linear: 'x' is not a dtype"),
        (lambda: md.nn.Linear(2, 3, device="x"), ValueError, "Linear: device must be"),
        (lambda: md.nn.Linear(2, 3, rng="x"), TypeError, "Linear: rng must be an int seed"),
        (lambda: md.nn.Linear(2, 3, rng=-1), ValueError, "Linear: rng must be in"),
        (lambda: md.nn.Linear("2", 3), TypeError, "Linear: in_features must be a non-negative"),
        (lambda: md.nn.Conv2d(2, -3, 3), ValueError, "Conv2d: out_channels must be a non-neg"),
        (lambda: md.nn.Embedding(4, 3, dtype=md.int64), TypeError, "Embedding: parameters are"),
        (lambda: md.nn.LSTMCell(3, 4, rng=1.5), TypeError, "LSTMCell: rng must be"),
        (lambda: md.nn.BatchNorm2d(3, dtype="x"), TypeError, "BatchNorm2d: 'x' is not a dtype"),
        (lambda: md.nn.LayerNorm(3, device="x"), ValueError, "LayerNorm: device must be"),
        (lambda: md.nn.Dropout("x"), TypeError, "Dropout: p must be a number"),
        (lambda: md.nn.Dropout(0.5, rng="x"), TypeError, "Dropout: rng must be"),
        (lambda: md.layer_norm(md.ones((2, 3)), None, None, eps="x"), TypeError, "layer_norm: eps"),
    ],
)
def test_seeds_dtypes_devices_and_shapes_are_checked_where_they_are_given(call, error, message):
    """An argument of the wrong kind is refused by the function it was given to, naming the
    argument (not by NumPy's SeedSequence or dtype parser, or minidtr's backend, later)."""
    with pytest.raises(error, match=message):
        call()


def test_seeds_of_every_valid_kind_still_work():
    md.manual_seed(np.int64(3))
    md.manual_seed(2**64 - 1)
    assert md.randn(2, seed=np.uint64(5)).shape == (2,)
    assert md.randn(2, dtype=None).dtype == md.float32  # the default float, as in PyTorch
    assert md.full(2, np.float32(1.5), dtype=None).dtype == md.float32
    assert md.zeros(np.array([2, 3])).shape == (2, 3)
    assert md.nn.Linear(2, 3, rng=np.random.default_rng(1)).weight.shape == (3, 2)
    assert md.nn.LSTMCell(2, 0).weight_hh.shape == (0, 0)


def test_device_none_is_the_cpu_as_in_pytorch():
    """``device=None`` is PyTorch's default device (the ``factory_kwargs`` idiom passes
    it to every layer); it was refused."""
    made = [
        md.zeros(3, device=None),
        md.full(2, 1.0, device=None),
        md.tensor([1.0], device=None),
        md.arange(3, device=None),
        md.randn(2, device=None),
        md.nn.init.parameter(np.ones(2), device=None),
        md.nn.Linear(2, 3, device=None).weight,
        md.nn.BatchNorm2d(2, device=None).running_var,
        md.nn.LSTMCell(2, 3, device=None).weight_ih,
    ]
    assert [t.device for t in made] == ["cpu"] * len(made)
    assert (md.nn.Linear(2, 3, device=None).weight + md.ones(3, 2)).device == "cpu"


@pytest.mark.parametrize("name", ["zeros", "ones", "randn", "rand"])
def test_makers_take_pytorchs_size_as_ints_or_one_sequence(name):
    """``md.zeros(2, 3)`` as ``torch.zeros(2, 3)``, and ``md.zeros((2, 3))`` still; no size
    is an error, ``()`` a 0-d tensor. Options are keywords, as in PyTorch: a dtype given as a
    size says so."""
    make = getattr(md, name)
    forms = [(2, 3), ((2, 3),), ([2, 3],), (np.int64(2), 3), (4,), ((),), ([],)]
    shapes = [make(*size, seed=1) if name.startswith("rand") else make(*size) for size in forms]
    assert [t.shape for t in shapes] == [(2, 3)] * 4 + [(4,), (), ()]
    assert all(t.dtype == md.float32 for t in shapes)
    if name.startswith("rand"):
        assert make(2, 3, seed=4).numpy().tobytes() == make((2, 3), seed=4).numpy().tobytes()
    else:
        assert make(2, 3, dtype=md.int64, requires_grad=False).dtype == md.int64
    with pytest.raises(TypeError, match=rf"{name}: size must be ints, {name}\(2, 3\) or .*keyword"):
        make(2, md.float64)
    with pytest.raises(TypeError, match=rf"{name}: size must be ints"):
        make(2, (3,))
    with pytest.raises(TypeError, match=rf"{name}: missing the size"):
        make()
    with pytest.raises(ValueError, match=rf"{name}: shape must be non-negative ints"):
        make(2, -1)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("name", ["zeros", "ones", "randn", "rand"])
def test_makers_shapes_and_values_as_pytorchs(name):
    import torch

    for size in [(2, 3), ((2, 3),), (5,), ((),)]:
        ours, theirs = getattr(md, name)(*size), getattr(torch, name)(*size)
        assert ours.shape == tuple(theirs.shape) and str(theirs.dtype) == f"torch.{ours.dtype}"
        if name in ("zeros", "ones"):
            assert np.array_equal(ours.numpy(), theirs.numpy())


def test_seed_streams_equal_default_rng_past_the_kept_states_and_in_threads(monkeypatch):
    """backend.generator keeps seeds' starting states and one bit generator per thread:
    every stream is still default_rng(seed)'s, for seeds whose slot another took and for
    threads drawing at the same time."""
    import threading

    from minidtr import backend

    seeds = [*range(3 * backend._SEED_SLOTS), 3, 2**63 + 5, 0, 64, np.int64(7), 2**70 + 64]
    for seed in seeds:
        drawn = backend.generator(np, seed).random(5, dtype=np.float32)
        assert np.array_equal(drawn, np.random.default_rng(seed).random(5, dtype=np.float32))

    seeded = []
    real_pcg64 = np.random.PCG64

    def counting(seed):
        seeded.append(seed)
        return real_pcg64(seed)

    monkeypatch.setattr(np.random, "PCG64", counting)
    backend.generator(np, 1234).random(3)
    backend.generator(np, 1234).random(3)
    backend.generator(np, 1234 + backend._SEED_SLOTS).random(3)  # the same slot: seeded
    assert seeded == [1234, 1234 + backend._SEED_SLOTS]  # a kept seed is not seeded again

    mismatches = []

    def draw(offset):
        for seed in range(offset, offset + 300):
            drawn = backend.generator(np, seed).standard_normal(64)
            if not np.array_equal(drawn, np.random.default_rng(seed).standard_normal(64)):
                mismatches.append(seed)

    threads = [threading.Thread(target=draw, args=(i * 100,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert mismatches == []


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_mask_drawn_in_chunks_is_the_whole_draws(dtype):
    """Past ``UNIFORM_CHUNK`` elements the mask is drawn a chunk at a time: still the
    i-th uniform of the seed's stream for element i, in C order whatever x's layout."""
    from minidtr.backend import UNIFORM_CHUNK

    x = np.random.default_rng(0).standard_normal((3, UNIFORM_CHUNK + 77)).astype(dtype)
    for data in (x, np.asfortranarray(x)):
        out = md.dropout(md.tensor(data), 0.3, seed=5).numpy()
        keep = np.random.default_rng(5).random(x.shape, dtype=np.float32) >= 0.3
        assert np.array_equal(out != 0, keep & (x != 0))
        np.testing.assert_allclose(out, dropout_reference(x, 0.3, 5), rtol=1e-3)
