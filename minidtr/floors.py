"""A model's physical floor, measured on an unbounded run of the live runtime.

Constants (parameters, optimizer state, the batch, finished gradients) are never
evicted, and an op runs only with its inputs and outputs resident. So at every op
the runtime holds at least the constants alive then plus that op's non-constant
inputs and outputs and its kernel's workspace; the largest such sum over a run is
its *floor*: below it no eviction policy can run that op order, under eager or
ignore deallocation. (The constants counted include those alive only because a
recipe reads them; banish drops the recipes of a dead storage's children, so it can
free such constants sooner and run below the floor.) ``FloorMeter`` is an allocator
observer that takes this maximum as the ops run (the simulator computes the same
figure from a trace: ``minidtr sim info``).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

from .runtime.observers import Observer, add_observer, observers_of, remove_observer
from .runtime.registry import allocator_for
from .runtime.storage import Cell, Recipe, Storage, workspace_of


@dataclass
class Floors:
    """What an unbounded run needed: its peak and the two parts of its floor (bytes)."""

    peak: int  # everything resident at the worst moment, constants included
    constants: int  # the most bytes of constants alive at once
    floor: int  # the most bytes one op needs at once: constants alive + inputs, outputs, workspace
    floor_op: str = ""  # the op that needs it
    # the compute of the run's first step in the cost model (0 when not measured): what a
    # budgeted run of the same program expects its first step to compute (the thrash guard)
    first_step_cost: float = 0.0
    measured_steps: int = 0  # the training steps measured (0: not measured on training steps)

    @property
    def constant_ratio(self) -> float:
        return self.constants / self.peak

    @property
    def floor_ratio(self) -> float:
        return self.floor / self.peak

    @property
    def largest_op(self) -> int:
        """The working set beyond the constants at the floor's op (an upper bound on it
        when the constants peaked elsewhere)."""
        return self.floor - self.constants


class FloorMeter(Observer):
    """Allocator observer: the most constant bytes alive at once, and the most bytes any
    one op (or read) needs resident at once."""

    def __init__(self, allocator):
        self.allocator = allocator
        self.constants = allocator.constant_bytes
        self.floor = allocator.constant_bytes
        self.floor_op = ""
        # constants only because they were resident (a used-up loss): under a budget they
        # may have been evicted first, so the floor does not count them as constants
        self.conditional: weakref.WeakSet[Storage] = weakref.WeakSet()

    def _need(self, storages: list[Storage], op: str, workspace: int = 0) -> None:
        conditional = self.conditional
        constants = self.allocator.constant_bytes - sum(s.nbytes for s in conditional)
        self.constants = max(self.constants, constants)
        seen: set[int] = set()
        need = constants + workspace
        for storage in storages:
            if (storage.op is not None or storage in conditional) and id(storage) not in seen:
                seen.add(id(storage))
                need += storage.nbytes
        if need > self.floor:
            self.floor, self.floor_op = need, op

    def on_compute(self, recipe: Recipe, cells: list[Cell]) -> None:
        outputs = [c.storage for c in cells if not c.is_view]
        self._need([*recipe.parents, *outputs], recipe.op.name, workspace_of(recipe))

    def on_read(self, cell: Cell) -> None:
        self._need([cell.storage], "read")

    def on_constant(self, storage: Storage) -> None:
        self._need([], storage.name)

    def on_make_constant(self, storage: Storage, if_resident: bool = False) -> None:
        self._need([], storage.name)

    def on_make_constant_if_resident(self, storage: Storage) -> None:
        if storage.producer is None:
            self.conditional.add(storage)


@contextlib.contextmanager
def measure_floors(device: str = "cpu") -> Iterator[FloorMeter]:
    """Observe the device's allocator inside the ``with``; read ``.constants`` and
    ``.floor`` from the meter afterwards. Run it unbounded: under a budget the same op
    order needs the same floor, but the measurement is meant as the model's own."""
    allocator = allocator_for(device)
    if any(isinstance(o, FloorMeter) for o in observers_of(allocator)):
        raise RuntimeError(f"the {device} allocator's floors are already being measured")
    meter = FloorMeter(allocator)
    add_observer(allocator, meter)
    try:
        yield meter
    finally:
        remove_observer(allocator, meter)
