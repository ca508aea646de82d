"""End to end (issue 2): a 3-layer MLP trained with SGD for 50 steps on a fixed synthetic
regression problem learns it, and its loss curve matches the same model in PyTorch (same
initial weights, same data, float32) to 1e-4 relative at every step.

Run with ``-s`` to see the largest relative difference between the two loss curves.
"""

import importlib.util

import numpy as np
import pytest

import minidtr as md
from minidtr import nn, optim

HAS_TORCH = importlib.util.find_spec("torch") is not None
STEPS = 50
LR, MOMENTUM = 0.1, 0.9
SIZES = (16, 64, 64, 4)


def problem(n: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and smooth nonlinear targets of a fixed random projection."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, SIZES[0])).astype(np.float32)
    projection = rng.standard_normal((SIZES[0], SIZES[-1])) / np.sqrt(SIZES[0])
    z = x @ projection
    return x, (np.tanh(z) + 0.3 * np.sin(z)).astype(np.float32)


def mlp() -> nn.Sequential:
    d_in, h1, h2, d_out = SIZES
    md.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(),
                         nn.Linear(h2, d_out))  # fmt: skip


def train_minidtr(model: nn.Module) -> np.ndarray:
    x, y = problem()
    inputs, targets = md.tensor(x), md.tensor(y)
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = md.mse_loss(model(inputs), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


def train_torch(state: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    d_in, h1, h2, d_out = SIZES
    model = torch.nn.Sequential(torch.nn.Linear(d_in, h1), torch.nn.ReLU(),
                                torch.nn.Linear(h1, h2), torch.nn.ReLU(),
                                torch.nn.Linear(h2, d_out))  # fmt: skip
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    x, y = problem()
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


def test_mlp_learns_the_problem():
    losses = train_minidtr(mlp())
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.2 * losses[0], f"loss went from {losses[0]:.4f} to {losses[-1]:.4f}"


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_mlp_loss_curve_matches_torch(record_property):
    model = mlp()
    initial = model.state_dict()
    ours = train_minidtr(model)
    theirs = train_torch(initial)
    relative = np.abs(ours - theirs) / np.abs(theirs)
    worst = float(relative.max())
    record_property("max_relative_loss_difference", worst)
    print(f"\nMLP vs PyTorch over {STEPS} SGD steps: loss {ours[0]:.5f} -> {ours[-1]:.5f}, "
          f"max relative difference {worst:.3g} (step {int(relative.argmax())})")  # fmt: skip
    assert worst < 1e-4, f"step {int(relative.argmax())}: {ours} vs {theirs}"
