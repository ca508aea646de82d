"""Record a live minidtr run as a trace in the prototype's format.

A ``Recorder`` is an allocator observer (``allocator.observer``). The
allocator calls it after each op (``on_compute``), constant
(``on_constant``), read (``on_read``), new handle (``on_add_ref``) and dropped
handle (``on_release``), in program order, so the trace it builds replays the
same decisions. The mapping:

- every live ``Tensor`` handle is one trace name;
- an op is a ``CALL`` whose arguments are names of its input cells, whose
  results are its outputs (``ALIAS 0`` for a view, which in minidtr always
  views its first input) and whose TIME is the cost the runtime charged
  (exact with ``cost="flops"``, so a replay makes the same decisions), and its
  WORKSPACE the scratch bytes its op declares (``Op.workspace``), when it has any;
  outputs made under ``as_constants()`` are marked ``CONSTANT_RESULTS``;
- the first handle on a new result or constant takes the name the CALL or
  CONSTANT defined; any further handle is a ``COPY``;
- ``Tensor.numpy()`` (a read) is a ``CALL`` named ``read`` with one argument,
  no results and TIME 0: the replay locks (and if needed rematerializes) the
  same storage at the same point;
- a value that drops its recipe (``allocator.make_constant``, how autograd keeps
  finished gradients) is an ``ANNOTATE CONSTANT`` of one of its names; one that
  drops it only if resident (a used-up loss) carries ``IF_RESIDENT``, recorded
  whether or not it was resident, so the trace is the same under any budget;
- a handle that dies while the allocator is busy (a garbage-collector pass inside
  an op) is reported by the allocator when that access is done, where its death
  takes effect, so its ``RELEASE`` follows the op's ``CALL``;
- a training step's start (``Runtime.mark_step``) is an ``ANNOTATE STEP``;
- a value that existed before recording began is recorded as a ``CONSTANT``
  when it is first used (an approximation: start recording before the program
  creates its tensors). Pinning is not recorded.

"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ..runtime.observers import Observer, add_observer, observers_of, remove_observer
from ..runtime.registry import allocator_for
from ..runtime.storage import Cell, Recipe, Storage, workspace_of
from .trace import (
    STEP,
    Annotate,
    Call,
    Constant,
    Copy,
    Instruction,
    MakeConstant,
    Release,
    Result,
    Trace,
    make_trace,
)


class Recorder(Observer):
    """Builds a trace from allocator events; ``trace()`` returns it."""

    def __init__(self, name: str = "recorded"):
        self.name = name
        self.instructions: list[Instruction] = [Annotate("START")]
        # id(cell) -> the cell and the names of its live handles (a live handle holds the
        # cell anyway, and the entry goes with the last name, so no lifetime is extended)
        self._held: dict[int, tuple[Cell, list[str]]] = {}
        self._unclaimed: dict[int, str] = {}  # id(cell or storage) -> name defined, not held
        self._next = 0

    def _fresh(self) -> str:
        self._next += 1
        return f"t{self._next}"

    def _hold(self, cell: Cell, name: str) -> None:
        self._held.setdefault(id(cell), (cell, []))[1].append(name)

    def _name_of(self, cell: Cell) -> str:
        held = self._held.get(id(cell))
        if held:
            return held[1][-1]
        name = self._unclaimed.get(id(cell))
        if name is not None:
            return name
        return self._adopt(cell)

    def _adopt(self, cell: Cell) -> str:
        """A cell made before recording started: from now on it is a constant input."""
        name = self._fresh()
        self.instructions.append(Constant(name, cell.storage.nbytes))
        self._hold(cell, name)
        return name

    # ---- the allocator's observer protocol ------------------------------------------------

    def on_constant(self, storage: Storage) -> None:
        name = self._fresh()
        self.instructions.append(Constant(name, storage.nbytes))
        self._unclaimed[id(storage)] = name

    def on_compute(self, recipe: Recipe, cells: list[Cell]) -> None:
        args = tuple(self._name_of(c) for c in recipe.inputs)
        results = []
        constant = False
        for cell in cells:
            name = self._fresh()
            if cell.is_view:
                results.append(Result(name, cell.nbytes, 0))
            else:
                results.append(Result(name, cell.storage.nbytes, -1))
                constant = cell.storage.producer is None
            self._unclaimed[id(cell)] = name
        self.instructions.append(
            Call(
                recipe.op.name,
                args,
                tuple(results),
                recipe.run_cost,
                constant,
                workspace=workspace_of(recipe),
            )
        )

    def on_read(self, cell: Cell) -> None:
        self.instructions.append(Call("read", (self._name_of(cell),), (), 0.0))

    def on_add_ref(self, cell: Cell) -> None:
        key = id(cell)
        name = self._unclaimed.pop(key, None)
        if name is None and cell.recipe is None:
            name = self._unclaimed.pop(id(cell.storage), None)
        if name is None:
            held = self._held.get(key)
            if not held:
                self._adopt(cell)
                return
            name = self._fresh()
            self.instructions.append(Copy(name, held[1][-1]))
        self._hold(cell, name)

    def on_release(self, cell: Cell) -> None:
        key = id(cell)
        held = self._held.get(key)
        if not held:
            return  # a handle made before recording started
        names = held[1]
        self.instructions.append(Release(names.pop()))
        if not names:
            del self._held[key]

    def on_step(self) -> None:
        """The runtime marked the start of a training step (``Runtime.mark_step``)."""
        self.instructions.append(Annotate(STEP))

    def on_make_constant(self, storage: Storage, if_resident: bool = False) -> None:
        for cell, names in self._held.values():
            if cell.storage is storage:
                self.instructions.append(MakeConstant(names[-1], if_resident=if_resident))
                return

    def on_make_constant_if_resident(self, storage: Storage) -> None:
        self.on_make_constant(storage, if_resident=True)

    # ---- results ------------------------------------------------------------------------------

    def annotate(self, annotation: str) -> None:
        """Mark a point of the program (e.g. ``"BACKWARD"``)."""
        self.instructions.append(Annotate(annotation))

    def trace(self) -> Trace:
        return make_trace(self.instructions, self.name)

    def close(self) -> None:
        """Forget the recorded program's values; the instructions stay.

        While recording, ``_held`` keeps each handled cell so its id names it; once the
        allocator no longer reports to this recorder, those cells (and their storages)
        would outlive the program's handles and count as constants in later runtimes.
        ``record`` calls this on exit.
        """
        self._held.clear()
        self._unclaimed.clear()


@contextlib.contextmanager
def record(
    path: str | os.PathLike | None = None, device: str = "cpu", name: str | None = None
) -> Iterator[Recorder]:
    """Record everything the device's allocator does inside the ``with`` as a trace;
    write it to ``path`` (the prototype's JSON-lines format) on exit when given.

    ``with sim.record("step.log") as rec: ...`` then ``sim.load_log("step.log")``
    or ``rec.trace()``.
    """
    from .trace import log_label, write_log

    allocator = allocator_for(device)
    if any(isinstance(o, Recorder) for o in observers_of(allocator)):
        raise RuntimeError(f"the {device} allocator is already being recorded")
    label = name or (log_label(path) if path else "recorded")
    recorder = Recorder(label)
    add_observer(allocator, recorder)
    try:
        yield recorder
    finally:
        remove_observer(allocator, recorder)
        recorder.close()
    if path is not None:
        write_log(recorder.trace(), path)
