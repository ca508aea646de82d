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


def small_mlp_step(device):
    def run():
        rng = np.random.default_rng(0)
        ws = [
            md.tensor(rng.standard_normal((64, 64)) / 8, requires_grad=True, device=device)
            for _ in range(4)
        ]
        h = md.tensor(rng.standard_normal((32, 64)), device=device)
        for i, w in enumerate(ws):
            h = md.dropout(md.tanh(h @ w), p=0.1, seed=i)
        loss = (h * h).mean()
        loss.backward()
        return {"loss": loss, "grads": [w.grad for w in ws]}

    return run


def test_ops_match_the_cpu():
    cpu = small_mlp_step("cpu")()
    gpu = small_mlp_step("cuda")()
    np.testing.assert_allclose(gpu["loss"].numpy(), cpu["loss"].numpy(), rtol=1e-10)
    for a, b in zip(gpu["grads"], cpu["grads"], strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-12)


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
