"""The training loop behind ``minidtr train``: a task under a budget, measured.

``measure_unbounded`` runs the first two training steps of a fresh copy of the
task with no budget and returns the runtime's peak (everything resident counts:
parameters, optimizer state, the batch and activations) with the model's floor
(``minidtr.floors``); a budget ratio is a fraction of that peak, as in the
paper (which measured one logged step).
``train`` runs the steps inside a budgeted ``Runtime`` and evaluates test
accuracy before and after, outside it.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .autograd import no_grad
from .data import minibatch_indices
from .floors import Floors, measure_floors
from .models.tasks import Task, make_task
from .ops.random import manual_seed
from .runtime import BudgetError, Runtime
from .runtime.heuristics import make_heuristic
from .runtime.options import OPTION_NAMES, RuntimeOptions
from .tensor import Tensor

EVAL_EXAMPLES = 256
MEASURE_STEPS = 2


class ConfigError(ValueError):
    """A TrainConfig that cannot be run (found before any training work)."""


# What ``train`` runs under unless told otherwise: the runtime's defaults, but the
# deterministic cost model, so that runs and their clocks repeat on every machine.
TRAIN_OPTIONS = RuntimeOptions(cost="flops")


@dataclass(init=False)
class TrainConfig:
    """What ``train`` runs: a task (``model``, ``size``, ``batch``), how many ``steps``,
    the budget as a ``ratio`` of the measured unbounded peak (or ``budget`` in bytes), and
    the runtime's settings, ``options`` (``TRAIN_OPTIONS`` by default: cost ``flops``).
    ``measure_steps`` is how many unbounded steps the peak and the floor are measured on
    (``MEASURE_STEPS``: enough where every batch has the same shapes; a Tree-LSTM's
    batches differ, and a long run can meet a larger one than the first two).

    Every ``RuntimeOptions`` field can also be given by name and read as an attribute:
    ``TrainConfig("mlp", budget=10**6, heuristic="lru").heuristic == "lru"``; ``seed`` and
    ``device`` serve the data and model as well as the runtime.
    """

    model: str
    size: str = "small"
    steps: int = 50
    batch: int | None = None  # None = the task's default
    ratio: float | None = None
    evaluate: bool = True  # test accuracy before and after (nan when False)
    options: RuntimeOptions = TRAIN_OPTIONS
    measure_steps: int = MEASURE_STEPS

    def __init__(
        self,
        model: str,
        size: str = "small",
        steps: int = 50,
        batch: int | None = None,
        *,
        ratio: float | None = None,
        evaluate: bool = True,
        options: RuntimeOptions | None = None,
        measure_steps: int = MEASURE_STEPS,
        **settings: Any,
    ):
        unknown = sorted(set(settings) - set(OPTION_NAMES))
        if unknown:
            raise TypeError(
                f"TrainConfig got unexpected keyword arguments {unknown}; it takes "
                f"ratio, evaluate, options, measure_steps and the RuntimeOptions fields "
                f"{list(OPTION_NAMES)}"
            )
        self.model, self.size, self.steps, self.batch = model, size, steps, batch
        self.ratio, self.evaluate, self.measure_steps = ratio, evaluate, measure_steps
        base = TRAIN_OPTIONS if options is None else options
        try:
            self.options = base.replace(**settings) if settings else base
        except (TypeError, ValueError) as e:  # what the runtime would reject, before any work
            raise ConfigError(str(e)) from None

    def __getattr__(self, name: str) -> Any:
        """The runtime's settings read as attributes: ``config.heuristic`` is
        ``config.options.heuristic``."""
        options = self.__dict__.get("options")
        if options is not None and name in OPTION_NAMES:
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


@dataclass
class TrainResult:
    config: TrainConfig
    task: Task
    runtime: Runtime
    losses: list[float]
    accuracy_start: float
    accuracy_end: float
    seconds: float
    unbounded_peak: int | None = None
    budget: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    floors: Floors | None = None  # of the unbounded run the budget was measured against
    interrupted: bool = False  # Ctrl-C stopped the steps: ``losses`` are those done
    stopped_by: str = ""  # the error that stopped the steps (BudgetError, ThrashError...)

    @property
    def steps_per_second(self) -> float:
        return len(self.losses) / self.seconds if self.seconds > 0 else math.inf


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``train``'s budgeted steps. ``result`` is what the steps done recorded:
    their losses, the runtime with its statistics (and events, when recorded), the budget
    and floors, ``interrupted`` set, and no end accuracy (nan: measuring it takes time
    after a Ctrl-C)."""

    def __init__(self, result: TrainResult):
        super().__init__(f"interrupted after {len(result.losses)} of {result.config.steps} steps")
        self.result = result


def build_task(config: TrainConfig) -> Task:
    manual_seed(config.seed)
    task = make_task(config.model, config.size, config.seed, config.device)
    if config.batch is not None:
        if not 0 < config.batch <= task.n_train:
            raise ConfigError(
                f"--batch must be between 1 and {task.n_train} for {config.model}, "
                f"got {config.batch}"
            )
        task.batch_size = config.batch
    return task


def train_step(
    task: Task, optimizer, indices: np.ndarray | None, batch: tuple[Any, Tensor] | None = None
) -> float:
    """One step: forward, backward, update, then drop the gradients. Returns the loss.
    ``batch``: the step's batch made already (``Task.batch``), instead of ``indices``.

    Dropping the gradients at the end (not at the start of the next step) matters
    here: a gradient is a tensor with a recipe, and its recipe holds the parameter
    values it was computed from, so keeping it would keep the old parameters resident
    next to the new ones until the next step.
    """
    model_input, targets = batch if batch is not None else task.batch(indices)
    loss = task.loss(model_input, targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def measure_peak(config: TrainConfig, steps: int | None = None) -> int:
    """Peak bytes of the first ``steps`` training steps of a fresh copy of the task,
    unbounded (``config.measure_steps`` by default). At least two steps, because the
    first creates the optimizer's state and so peaks lower than every later one (which
    updates that state next to its old value)."""
    return measure_unbounded(config, steps).peak


def measure_unbounded(config: TrainConfig, steps: int | None = None) -> Floors:
    """The peak and the floors of the first ``steps`` unbounded training steps of a fresh
    copy of the task (``config.measure_steps`` by default; see ``measure_peak``): the
    batches the run's first steps train on."""
    steps = config.measure_steps if steps is None else steps
    if steps < 1:
        raise ConfigError(f"the unbounded run needs at least one step, got {steps}")
    gc.collect()
    task = build_task(config)
    optimizer = task.make_optimizer(task.model.parameters())
    batches = minibatch_indices(task.n_train, task.batch_size, config.seed)
    runtime = Runtime(cost=config.cost, device=config.device)
    first_step_cost = 0.0
    with runtime, measure_floors(config.device) as meter:
        for i in range(steps):
            train_step(task, optimizer, next(batches))
            if i == 0:
                first_step_cost = runtime.stats_.compute_cost
    peak = runtime.stats()["peak_memory"]
    floors = Floors(peak, meter.constants, meter.floor, meter.floor_op, first_step_cost, steps)
    del task, optimizer
    gc.collect()
    return floors


def accuracy(task: Task, examples: int = EVAL_EXAMPLES, cost: str = "flops") -> float:
    """Fraction of correct rows on the first ``examples`` test examples (eval mode),
    unbounded, under the cost model ``cost`` (so a run under ``flops`` advances the
    runtime's logical clock by the same amount on every machine)."""
    n = min(examples, len(task.data.test_y))
    task.model.eval()
    correct = total = 0
    try:
        with no_grad(), Runtime(cost=cost, device=task.device):
            for start in range(0, n, task.batch_size):
                indices = np.arange(start, min(start + task.batch_size, n))
                model_input, targets = task.batch(indices, train=False)
                predicted = task.scores(model_input).numpy().argmax(axis=1)
                correct += int((predicted == targets.numpy()).sum())
                total += len(predicted)
    finally:
        task.model.train()
    return correct / total


def train(
    config: TrainConfig,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
    on_loss: Callable[[Any, float], None] | None = None,
    trace: Any = None,
    watch: Callable[[Runtime], AbstractContextManager] | None = None,
    unbounded: Floors | None = None,
) -> TrainResult:
    """Train ``config.steps`` steps under the budget (bytes, or ratio x measured peak).

    ``progress`` wraps the step range (a progress bar); ``on_loss(bar, loss)`` is
    called after each step; ``trace`` is a context manager entered around the
    budgeted steps (a trace recorder); ``watch(runtime)`` another (something that
    reports the budgeted runtime's statistics while the steps run); ``unbounded`` is the
    ``measure_unbounded`` of this config when the caller has it already. Under a budget
    the unbounded run is measured first (for the ratio, and to report the floor).
    Ctrl-C during the steps raises ``TrainingInterrupted`` with what they did; a
    ``BudgetError`` (``ThrashError`` among them) during the steps is raised as it is,
    with what they did as its ``result`` (``stopped_by`` set), so that a long run
    stopped by a larger batch keeps its summary and event log.
    """
    check_config(config)
    if unbounded is None and (config.ratio is not None or config.budget is not None):
        unbounded = measure_unbounded(config)
    budget = config.budget
    if config.ratio is not None:
        budget = int(config.ratio * unbounded.peak)
    task = build_task(config)
    optimizer = task.make_optimizer(task.model.parameters())
    accuracy_start = accuracy(task, cost=config.cost) if config.evaluate else math.nan
    runtime = Runtime.from_options(config.options.replace(budget=budget))
    batches = minibatch_indices(task.n_train, task.batch_size, config.seed)
    steps = range(config.steps) if progress is None else progress(range(config.steps))
    losses: list[float] = []
    started = time.perf_counter()

    def result(interrupted: bool = False, stopped_by: str = "") -> TrainResult:
        """What the steps did so far (the end accuracy is measured after)."""
        return TrainResult(
            config=config,
            task=task,
            runtime=runtime,
            losses=losses,
            accuracy_start=accuracy_start,
            accuracy_end=math.nan,
            seconds=time.perf_counter() - started,
            unbounded_peak=None if unbounded is None else unbounded.peak,
            budget=budget,
            stats=runtime.stats(),
            floors=unbounded,
            interrupted=interrupted,
            stopped_by=stopped_by,
        )

    try:
        with runtime, trace or nullcontext(), watch(runtime) if watch else nullcontext():
            _run_steps(task, optimizer, batches, steps, losses, on_loss, runtime, unbounded)
    except KeyboardInterrupt:
        raise TrainingInterrupted(result(interrupted=True)) from None
    except BudgetError as error:
        error.result = result(stopped_by=type(error).__name__)
        raise
    finished = result()
    if config.evaluate:
        finished.accuracy_end = accuracy(task, cost=config.cost)
    return finished


def check_config(config: TrainConfig) -> None:
    """``ConfigError`` for a config ``train`` cannot run, found before any work."""
    if config.budget is not None and config.ratio is not None:
        raise ConfigError("give a budget in bytes or a ratio, not both")
    if config.steps < 1:
        raise ConfigError(f"steps must be >= 1, got {config.steps}")
    if config.seed < 0:
        raise ConfigError(f"seed must be >= 0, got {config.seed}")
    try:  # the one setting RuntimeOptions leaves to the runtime (the simulator has more)
        if isinstance(config.heuristic, str):
            make_heuristic(config.heuristic)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if config.measure_steps < 1:
        raise ConfigError(f"measure_steps must be >= 1, got {config.measure_steps}")
    if config.ratio is not None and not 0.0 < config.ratio <= 1.0:
        raise ConfigError(f"ratio must be in (0, 1], got {config.ratio}")


def _run_steps(task, optimizer, batches, steps, losses, on_loss, runtime, unbounded) -> None:
    """The training loop. The first step is expected to compute what the unbounded run's
    first step did (the thrash guard's measure, ``Runtime.mark_step``), each later one
    what the step before it did."""
    first_step_cost = None if unbounded is None else unbounded.first_step_cost
    for i in steps:
        runtime.mark_step(i, expected_cost=first_step_cost if i == 0 else None)
        losses.append(train_step(task, optimizer, next(batches)))
        if on_loss is not None:
            on_loss(steps, losses[-1])
