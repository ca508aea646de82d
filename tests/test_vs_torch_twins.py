"""benchmarks/torch_twins.py: every PyTorch twin is its minidtr model. From the same
initial weights, on the same batch, the losses of the first two steps agree (the second
after one update by each library's optimizer), the parameter counts are equal, and cutting
the twin's chain into checkpointed segments does not change its loss."""

import importlib.util
import pathlib

import numpy as np
import pytest

from minidtr.models import MODELS
from minidtr.training import TrainConfig, build_task

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[1]
BATCH = 4  # examples: the small presets' networks on a tiny batch
TOLERANCE = 1e-4  # relative, as benchmarks/vs_torch.py checks at step 0


def load_twins():
    path = ROOT / "benchmarks" / "torch_twins.py"
    spec = importlib.util.spec_from_file_location("torch_twins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


twins = load_twins()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """PyTorch's worker threads spin for work: on a busy machine a tiny step then takes
    seconds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def minidtr_step(task, optimizer, indices) -> float:
    loss = task.loss(*task.batch(indices))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def torch_step(twin, optimizer, task, indices, segments: int = 0) -> float:
    loss = twins.twin_loss(twin, *twins.batch(twin, task, indices), segments)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_twin_trains_like_the_model(name):
    """Step 0 runs the twin cut into two checkpointed segments, so step 1's loss also
    checks the gradients of the recomputing backward."""
    task = build_task(TrainConfig(name, batch=BATCH))
    twin = twins.twin_of(task.model)
    assert twins.parameter_count(twin) == twins.parameter_count(task.model)
    optimizer = task.make_optimizer(task.model.parameters())
    torch_optimizer = twins.optimizer_like(optimizer, twin.parameters())
    indices = np.arange(BATCH)
    for step, segments in enumerate((2, 0)):
        ours = minidtr_step(task, optimizer, indices)
        theirs = torch_step(twin, torch_optimizer, task, indices, segments)
        assert abs(theirs - ours) <= TOLERANCE * abs(ours), f"step {step}: {theirs} != {ours}"
