"""The CuPy backend (device="cuda"): the same ops, accounting and policy as on the CPU.
Marked ``gpu``: run with ``python -m pytest -m gpu``; skips where CuPy or a GPU is missing."""

import numpy as np
import pytest

import minidtr as md
from minidtr import backend
from minidtr.testing import assert_remat_equivalent, isolated_allocator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not backend.cuda_available(), reason="needs CuPy and a CUDA GPU"),
]


def small_mlp_step(device, p=0.1):
    """An MLP step with dropout (``p``; 0: none) after each layer."""

    def run():
        rng = np.random.default_rng(0)
        ws = [
            md.tensor(rng.standard_normal((64, 64)) / 8, requires_grad=True, device=device)
            for _ in range(4)
        ]
        h = md.tensor(rng.standard_normal((32, 64)), device=device)
        for i, w in enumerate(ws):
            h = md.tanh(h @ w)
            if p:
                h = md.dropout(h, p=p, seed=i)
        loss = (h * h).mean()
        loss.backward()
        return {"loss": loss, "grads": [w.grad for w in ws]}

    return run


def test_ops_match_the_cpu():
    """Without dropout: a seed's stream is CuPy's on the GPU, not NumPy's (docs/ops.md)."""
    cpu = small_mlp_step("cpu", p=0)()
    gpu = small_mlp_step("cuda", p=0)()
    np.testing.assert_allclose(gpu["loss"].numpy(), cpu["loss"].numpy(), rtol=1e-10)
    for a, b in zip(gpu["grads"], cpu["grads"], strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_the_cpu(causal):
    """The fused attention's chunked kernels through CuPy: the CPU's values and gradients
    to rounding."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in [(4, 2, 48, 8), (4, 2, 64, 8), (4, 2, 64, 5)]]

    def run(device):
        q, k, v = (md.tensor(a, requires_grad=True, device=device) for a in arrays)
        out = md.scaled_dot_product_attention(q, k, v, causal=causal)
        (out * out).sum().backward()
        return [t.numpy() for t in (out, q.grad, k.grad, v.grad)]

    for gpu, cpu in zip(run("cuda"), run("cpu"), strict=True):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-12)


def test_dropout_on_the_gpu_depends_on_its_seed_alone():
    x = md.ones((1000, 1000), device="cuda")
    a, b, c = (md.dropout(x, 0.3, seed=s).numpy() for s in (5, 5, 6))
    assert a.tobytes() == b.tobytes() and a.tobytes() != c.tobytes()
    assert set(np.unique(a).tolist()) == {0.0, np.float32(1 / 0.7)}
    assert abs((a > 0).mean() - 0.7) < 0.005


def test_budgeted_gpu_runs_are_bit_identical():
    with isolated_allocator("cuda"):
        reports = assert_remat_equivalent(
            small_mlp_step("cuda"), budgets=[0.8, 0.6], heuristics=["dtr", "lru"], device="cuda"
        )
    assert any(r["remats"] > 0 for r in reports)


def test_device_out_of_memory_evicts_and_retries():
    import cupy

    with isolated_allocator("cuda") as allocator, md.Runtime(device="cuda"):
        x = md.tensor(np.ones((1024, 1024)), device="cuda")
        ys = [md.tanh(x) for _ in range(4)]
        victims = allocator.free_device_memory(0)
        assert victims and any(not y.is_resident for y in ys)
        assert isinstance(allocator.read(ys[0].cell), cupy.ndarray)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_optimizer_updates_match_the_cpu(dtype):
    """SGDUpdate and AdamUpdate run their kernels through ``xp``: on CuPy they give the
    CPU's parameters and state to rounding (bit for bit is not promised across devices)."""

    def train(device):
        rng = np.random.default_rng(1)
        params = [
            md.tensor(rng.standard_normal((16, 8)).astype(dtype), requires_grad=True, device=device)
            for _ in range(2)
        ]
        opts = [
            md.optim.SGD(params[:1], lr=0.1, momentum=0.9, weight_decay=0.01),
            md.optim.Adam(params[1:], lr=0.01, weight_decay=0.01),
        ]
        for _ in range(3):
            for p in params:
                p.grad = md.tensor(rng.standard_normal((16, 8)).astype(dtype), device=device)
            for opt in opts:
                opt.step()
        return [p.numpy() for p in params] + [opts[1].exp_avg_sq[0].numpy()]

    tol = 1e-12 if dtype == np.float64 else 1e-5
    for a, b in zip(train("cuda"), train("cpu"), strict=True):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_the_device_pool_is_held_to_the_budget():
    """Under a budget the memory pool every kernel allocates from is limited to the budget
    plus POOL_SLACK, and the limit goes when the budget does."""
    import cupy

    pool = cupy.get_default_memory_pool()
    with isolated_allocator("cuda"), md.Runtime(budget=50_000_000, device="cuda"):
        assert pool.get_limit() == int(50_000_000 * (1 + backend.POOL_SLACK)) + 1
        with md.Runtime(budget=20_000_000, device="cuda"):
            assert pool.get_limit() == int(20_000_000 * (1 + backend.POOL_SLACK)) + 1
        assert pool.get_limit() == int(50_000_000 * (1 + backend.POOL_SLACK)) + 1
    assert pool.get_limit() == 0


def test_a_kernel_past_the_pool_limit_makes_room_by_eviction():
    """A kernel whose scratch the budget does not count (here: a temporary of 8 MB,
    undeclared) passes the pool's limit: the out-of-memory hook evicts, and it runs."""
    from minidtr.ops.op import Op, apply

    class Undeclared(Op):
        name = "undeclared"

        def infer(self, x):
            return [(x.shape, x.dtype)]

        def forward(self, xp, x):
            scratch = xp.ones(2_000_000, dtype=xp.float32)  # 8 MB, not declared
            return x + scratch[:1].sum()

    with isolated_allocator("cuda"), md.Runtime(budget=12_000_000, device="cuda") as rt:
        x = md.tensor(np.ones(500_000, np.float32), device="cuda")  # 2 MB each
        kept = [md.tanh(x) for _ in range(4)]
        y = apply(Undeclared(), x)
        assert float(y.numpy()[0]) == 1.0 + 2_000_000
        assert rt.stats()["evictions"] > 0 and any(not t.is_resident for t in kept)


@pytest.mark.parametrize("ratio", [0.5, 0.3])
def test_the_device_memory_stays_within_the_budget(ratio):
    """A model trained on the GPU under a budget: the memory pool's peak (every device
    array and every kernel's temporaries) within 1.10 x the budget."""
    from minidtr.training import TrainConfig, train

    with isolated_allocator("cuda"):
        config = TrainConfig(
            "resnet", steps=2, ratio=ratio, evaluate=False, device="cuda", measure_real=True
        )
        result = train(config)
    assert result.stats["real_peak"] <= 1.10 * result.budget
    assert result.stats["peak_memory"] <= result.budget
