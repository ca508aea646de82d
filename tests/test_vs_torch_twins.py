"""benchmarks/torch_twins.py: every PyTorch twin is its minidtr model. The parameter
counts are equal, and from the same initial weights, on the same batch, the losses of the
first two steps agree: the second after one update by each library's optimizer, from the
gradients of the twin cut into checkpointed segments."""

import pathlib
import runpy
from types import SimpleNamespace

import numpy as np
import pytest

from minidtr.models import MODELS
from minidtr.training import TrainConfig, build_task

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[1]
BATCH = 4  # examples: the small presets' networks on a tiny batch
TOLERANCE = 1e-4  # relative, as benchmarks/vs_torch.py checks at step 0


twins = SimpleNamespace(**runpy.run_path(str(ROOT / "benchmarks" / "torch_twins.py")))


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


def test_the_comparison_refuses_what_it_cannot_measure_and_says_what_it_did_not():
    """--segments 0 dropped every checkpointed run and the equal-memory goal read "met"
    (all() of nothing); --steps 0 printed tables of nan; unknown models were tracebacks."""
    import argparse
    import sys

    if str(ROOT / "benchmarks") not in sys.path:  # its interrupts module, as when it runs
        sys.path.append(str(ROOT / "benchmarks"))
    compare = SimpleNamespace(**runpy.run_path(str(ROOT / "benchmarks" / "vs_torch.py")))
    p = argparse.ArgumentParser(prog="vs_torch.py")
    p.error = lambda message: (_ for _ in ()).throw(ValueError(message))  # noqa: PLW0108
    compare.add_comparison_arguments(p, ["resnet"], steps=9, segments=[2, 4, 8])
    given = ["--models", "mlp", "--steps", "3", "--segments", "2,4"]
    args = p.parse_args(given)
    assert (args.models, args.steps, args.segments) == (["mlp"], 3, [2, 4])
    for bad, says in [
        (["--segments", "0"], "--segments: expected whole numbers >= 1"),
        (["--segments", "a"], "--segments: expected numbers"),
        (["--steps", "0"], "--steps: must be at least 1"),
        (["--models", "mlp,nope"], "--models: unknown 'nope'"),
    ]:
        with pytest.raises(ValueError, match=says):
            p.parse_args([*given, *bad])
    assert compare.verdict([]) == "not measured"
    assert compare.verdict([0.9, 1.0]) == "met" and compare.verdict([0.9, 1.2]) == "missed"


def vs_torch() -> SimpleNamespace:
    import sys

    if str(ROOT / "benchmarks") not in sys.path:  # its interrupts module, as when it runs
        sys.path.append(str(ROOT / "benchmarks"))
    return SimpleNamespace(**runpy.run_path(str(ROOT / "benchmarks" / "vs_torch.py")))


@pytest.mark.parametrize("overhead", [-0.10, 0.0, 0.12, 0.35])
def test_equal_memory_is_calibrated_from_either_side(overhead):
    """The equal-memory budget only came down: a first budget whose real growth fell 7%
    short of PyTorch's was kept, and minidtr ran with less memory than its peer. A model of
    a step's real growth: the budget above the constants plus a fixed ``overhead``."""
    compare = vs_torch()
    constants, target = 1_000_000, 400_000
    run = object.__new__(compare.MinidtrRun)
    run.budget, run.optimizer = None, SimpleNamespace(zero_grad=lambda: None)

    def measure(budget):
        run.budget, run.peak = budget, budget - constants + int(overhead * target)

    run.measure_under = measure
    run.measured_under = lambda budget: measure(budget) or True
    run.calibrate(constants, target)
    assert abs(run.peak - target) <= compare.MinidtrRun.REAL_TOLERANCE * target, run.peak


def test_the_closest_budget_not_over_the_target_is_kept():
    closest_under = vs_torch().closest_under
    assert closest_under({10: 95, 20: 101, 30: 120}, 100, 0.0) == 10
    assert closest_under({10: 95, 20: 102, 30: 120}, 100, 0.03) == 20
    assert closest_under({10: 150, 20: 120}, 100, 0.03) == 20
