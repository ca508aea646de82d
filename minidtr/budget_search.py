"""Find the lowest budget a model trains at: probes of a few steps at falling ratios.

``find_budget`` measures the unbounded run once (its peak and floor), then
trains a few steps at ratios 0.9, 0.8, ... of that peak until one fails (out
of memory, or slower than ``max_slowdown``), and bisects between the lowest
success and the first failure. Each probe runs on a fresh allocator, so what a
failed probe leaves resident does not count against the next one. Ratios
below the floor are not run: no policy can fit them. Ctrl-C raises
``SearchInterrupted`` with the probes that finished.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .floors import Floors
from .runtime import BudgetError, ThrashError
from .testing import isolated_allocator
from .training import TrainConfig, measure_unbounded, train

COARSE = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
RESOLUTION = 0.01


@dataclass
class Probe:
    ratio: float
    budget: int
    status: str  # ok | oom | thrash | below floor
    slowdown: float = math.nan
    remats: int = 0
    seconds_per_step: float = math.nan


@dataclass
class BudgetSearch:
    config: TrainConfig
    unbounded: Floors
    max_slowdown: float | None  # None: no limit (--max-slowdown none)
    probes: list[Probe]
    interrupted: bool = False  # Ctrl-C stopped the search: ``probes`` are those finished

    @property
    def lowest(self) -> Probe | None:
        ok = [p for p in self.probes if p.status == "ok"]
        return min(ok, key=lambda p: p.ratio) if ok else None


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``find_budget``'s probes; ``search`` holds those that finished."""

    def __init__(self, search: BudgetSearch):
        super().__init__(f"interrupted after {len(search.probes)} probes")
        self.search = search


def probe(config: TrainConfig, ratio: float, unbounded: Floors) -> Probe:
    """Train ``config.steps`` steps at ``ratio`` of the unbounded peak on a fresh allocator."""
    budget = int(ratio * unbounded.peak)
    if budget < unbounded.floor and config.dealloc != "banish":  # not a floor under banish
        return Probe(ratio, budget, "below floor")
    run = dataclasses.replace(config, ratio=ratio, budget=None, evaluate=False)
    try:
        with isolated_allocator(config.device):
            try:
                result = train(run, unbounded=unbounded)
            except ThrashError:
                return Probe(ratio, budget, "thrash")
            except BudgetError:
                return Probe(ratio, budget, "oom")
            stats = result.stats
            return Probe(
                ratio,
                budget,
                "ok",
                stats["slowdown"],
                stats["remats"],
                result.seconds / len(result.losses),
            )
    finally:
        gc.collect()


def find_budget(
    config: TrainConfig,
    max_slowdown: float | None = 2.0,
    unbounded: Floors | None = None,
    known: Sequence[Probe] = (),
) -> BudgetSearch:
    """Probe ratios of the unbounded peak, coarse then bisecting to ``RESOLUTION``, for the
    lowest at which ``config.steps`` steps train within ``max_slowdown``. ``known`` probes
    (same config and limit) are used instead of running those ratios again. Ctrl-C during
    a probe raises ``SearchInterrupted`` with the probes that finished."""
    config = dataclasses.replace(config, max_slowdown=max_slowdown)
    if unbounded is None:
        with isolated_allocator(config.device):
            unbounded = measure_unbounded(config)
        gc.collect()
    done = {round(p.ratio, 2): p for p in known}

    def search(interrupted: bool = False) -> BudgetSearch:
        probes = sorted(done.values(), key=lambda p: -p.ratio)
        return BudgetSearch(config, unbounded, max_slowdown, probes, interrupted)

    try:
        _probe_down(config, unbounded, done)
    except KeyboardInterrupt:
        raise SearchInterrupted(search(interrupted=True)) from None
    return search()


def _probe_down(config: TrainConfig, unbounded: Floors, done: dict[float, Probe]) -> None:
    """Probe the coarse ratios down to the first failure, then bisect; each probe goes
    into ``done`` (by its ratio, rounded) as it finishes."""

    def run(ratio: float) -> Probe:
        if round(ratio, 2) not in done:
            done[round(ratio, 2)] = probe(config, ratio, unbounded)
        return done[round(ratio, 2)]

    ok, failed = 1.0, None
    for ratio in COARSE:
        p = run(ratio)
        if p.status != "ok":
            failed = ratio
            break
        ok = ratio
    if failed is None:
        return
    if config.dealloc != "banish":
        floor = math.ceil(unbounded.floor_ratio / RESOLUTION) * RESOLUTION
        failed = max(failed, floor - RESOLUTION)
    while ok - failed > RESOLUTION * 1.5:
        ratio = round(round((ok + failed) / 2 / RESOLUTION) * RESOLUTION, 2)
        if ratio >= ok or ratio <= failed:
            break
        if run(ratio).status == "ok":
            ok = ratio
        else:
            failed = ratio


class _Capture:
    """A trace recorder entered by ``train`` around its steps, kept for reading after."""

    def __init__(self, device: str):
        self.device = device
        self.recorder = None

    def __enter__(self):
        from . import sim

        self._cm = sim.record(device=self.device)
        self.recorder = self._cm.__enter__()
        return self.recorder

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def record_trace(config: TrainConfig):
    """The simulator trace of ``config.steps`` unbounded training steps (a budget does not
    change what a run records: the same ops, reads and releases in the same order).
    Recording starts before the task is built, so the parameters are constants from the
    start, resident as in the live run, not from their first use."""
    capture = _Capture(config.device)
    run = dataclasses.replace(config, ratio=None, budget=None, evaluate=False)
    try:
        with isolated_allocator(config.device), capture:
            train(run)
    finally:
        gc.collect()
    return capture.recorder.trace()


def simulate_probe(trace, config: TrainConfig, ratio: float, unbounded: Floors) -> Probe:
    """``probe``'s question answered by the simulator on ``trace`` (same budget in bytes,
    same slowdown limit, checked as the live runtime checks it, against the compute
    expected by the end of each step (the trace's STEP marks); the config's runtime
    settings), for comparing it with the live run."""
    from . import sim

    budget = int(ratio * unbounded.peak)
    options = config.options.replace(budget=budget)
    result = sim.simulate(trace, thrash=None, outputs=False, options=options, live_guard=True)
    if result.status != "ok":
        return Probe(ratio, budget, result.status)
    return Probe(ratio, budget, "ok", result.slowdown, result.remats)
