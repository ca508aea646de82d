"""``as_prototype``: the eviction rules of the paper's simulator, as a mode of this runtime.

The DTR paper's figures come from its authors' simulator (simrd, its eager runtime). Where
minidtr's own rules differ from it, this mode follows the simulator instead, rule by rule,
so that a replay gives the paper's numbers cell for cell (docs/simulator.md):

- **Staleness stamp.** An access stamps every storage it reads when it *begins*, before any
  of them is rebuilt; a rebuild does not stamp what it rebuilt, and locking does not stamp
  either. So a chain rebuilt for one access looks as stale as the moment that access began.
  (minidtr's default stamps a rebuilt storage again when its rebuild ends.)
- **Locking order.** A rebuild locks the inputs that are resident first, all of them, and
  then rebuilds the evicted ones in the order the recipe reads them, locking each as it
  comes back (minidtr's default rebuilds the largest rebuild first and locks the resident
  inputs only at the end).
- **Candidate order and ties.** Candidates are kept in the order they last became
  evictable: made, rebuilt, or unlocked by their last lock (a locked storage leaves the
  pool and comes back at the end). The lowest score wins, and among equal scores the
  *last* candidate; a score of exactly 0 wins at once (the first one met). The outputs of a
  multi-output op join in the order the simulator gives them: the second output first, the
  first output last.
- **Scores.** The paper's formulas with its edge cases: a zero size or staleness makes the
  score infinite (the storage goes only when nothing else can), and h_LRU's score is the
  last access itself.
- **Nothing is forgotten.** A dead storage is evicted at once (plain eager eviction, no
  orphan rebuild), is rebuilt when a rebuild needs it, and then stays resident as an
  ordinary candidate. Its metadata is kept for the whole run, so a dead, evicted storage
  still counts in the evicted neighbourhood (e*) and in h_DTR^eq's classes of the storages
  around it; and a multi-output op's cost counts once per output storage there, since each
  output is a storage of its own.
- **h_DTR^eq's classes** are kept from the first eviction on (dead ones included), not built
  when the first search needs them, so their over-approximation has the simulator's
  history.
- **e* and h_MSPS's ancestors** are the simulator's regions, kept incrementally, not walked
  at every score; an op's outputs are in its graph, not yet computed, while its inputs are
  rebuilt, and the regions walked meanwhile count them (``prototype_regions.py``).
- **Views** are defined until their storage is evicted; a view is computed again (its op's
  cost, a rematerialization) before its next use, through its chain of views first.

Only the reference policy implements these (``Runtime(reference=True)``); in this mode the
accelerator (``fast/``) stands aside, so the two cannot disagree. The mode keeps every
storage's metadata for the whole run: meant for replays, not for long live runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .candidates import Candidates
from .estar import WalkedNeighbourhood
from .heuristics import COST_TERMS, Heuristic
from .prototype_regions import SimulatorRegions
from .remat import CascadeLink, Rematerializer, producer_of
from .storage import Cell, Recipe, Storage, ViewCell
from .victims import Choice, shortlist_of

if TYPE_CHECKING:
    from .allocator import Allocator


class PrototypeCandidates(Candidates):
    """The candidates in the simulator's pool order (module docstring), and every storage
    ever made a candidate, kept alive (``kept``): the simulator never forgets one."""

    __slots__ = ("kept", "_first", "fresh")

    def __init__(self, storages: Iterable[Storage] = ()):
        super().__init__(storages)
        self.kept: list[Storage] = list(self._order)
        self._first: Storage | None = None  # output 0 of the multi-output op being made
        self.fresh: list[Storage] = []  # the outputs of the op being run (its regions')

    def add(self, storage: Storage) -> None:
        """A new output (or an unpinned storage) joins at the end. Output 0 of a
        multi-output op moves behind its siblings as they join."""
        self.made_evictable(storage)
        self.kept.append(storage)
        self.fresh.append(storage)
        shared = storage.shared
        if shared is None:
            return
        if storage.index == 0:
            self._first = storage
        elif self._first is not None and self._first.shared is shared:
            self.made_evictable(self._first)

    def made_evictable(self, storage: Storage) -> None:
        """``storage`` (re)joins the pool: at the end."""
        order = self._order
        order.pop(storage, None)
        order[storage] = None


@dataclass(slots=True)
class CellFrame:
    """One level of the simulator's rebuild: a recipe (a storage's, or a view's when
    ``view`` is set; None for the access itself) whose inputs are rebuilt and locked first.
    ``waiting`` holds the undefined inputs, last first (``pop()`` gives the next)."""

    recipe: Storage | Recipe | None
    view: ViewCell | None
    inputs: Sequence[Cell]
    waiting: list[Cell]
    locked: list[Storage]  # one entry per input locked so far (an input read twice: two)


class PrototypeRematerializer(Rematerializer):
    """Locking and rebuilding as the simulator does them (module docstring), on cells: a
    view is *defined* while its storage is resident and has not been rebuilt since the view
    was last computed; an undefined view is computed again (its op's cost) before use."""

    def __init__(self, allocator: Allocator):
        super().__init__(allocator)
        self.rebuilds: dict[Storage, int] = {}  # how many times each storage was rebuilt
        self.view_at: dict[ViewCell, int] = {}  # its storage's rebuilds when last computed
        self.siblings: dict[Recipe, list[ViewCell]] = {}  # a view op's outputs
        self.op_access: Sequence[Storage] | None = None  # what the op being run locked

    def made_views(self, recipe: Recipe, cells: list[ViewCell]) -> None:
        self.siblings[recipe] = cells
        for cell in cells:
            self.view_at[cell] = self.rebuilds.get(cell.storage, 0)

    def defined(self, cell: Cell) -> bool:
        storage = cell.storage
        if storage.buffer is None:
            return False
        return not cell.is_view or self.view_at.get(cell, 0) == self.rebuilds.get(storage, 0)

    def lock(self, storages: Sequence[Storage], trigger: str = "read") -> Sequence[Storage]:
        return self.lock_read(storages, trigger, storages)

    def lock_cells(self, storages: Sequence[Storage], op: Any, cells: Sequence[Cell]) -> Any:
        """An op is asked for: its outputs join the simulator's regions, not computed yet
        (prototype_regions.py), until it is done (``unlock`` of what this returns). They
        cost the op's TIME in a replay (a trace op's); a live op's cost is known only once
        it has run, so there they count 0."""
        regions = self.regions()
        if regions is not None:
            outputs = 0 if op.is_view else op.n_outputs
            regions.op_started(storages, outputs, getattr(op, "time", 0.0))
            self.allocator.eviction.candidates.fresh = []
        try:
            locked = self.lock_read(storages, op.name, cells)
        except BaseException:
            if regions is not None:
                regions.op_done(())
            raise
        self.op_access = locked
        return locked

    def regions(self) -> SimulatorRegions | None:
        """The simulator's regions while a heuristic in force reads them (h_DTR, h_MSPS)."""
        eviction = self.allocator.eviction
        if eviction.tracking != "estar" or not isinstance(eviction.neighbourhood, SimulatorRegions):
            return None
        return eviction.neighbourhood

    def lock_read(
        self, storages: Sequence[Storage], trigger: str, cells: Sequence[Cell]
    ) -> list[Storage]:
        """Lock the storage of each cell read, once per time it is read (an op reading a
        value twice locks it twice, as the simulator does)."""
        allocator = self.allocator
        for cell in cells:
            if cell.storage.allocator is not allocator or not self.defined(cell):
                return self.rematerialize(cells, trigger)
        clock = allocator.clock
        locked = [cell.storage for cell in cells]
        for storage in locked:
            storage.last_access = clock
        for storage in locked:
            storage.locks += 1
        return locked

    def rematerialize(self, cells: Sequence[Cell], trigger: str) -> list[Storage]:
        """Each frame has locked its defined inputs when it was opened; it rebuilds the
        others first to last, locking each as it comes back, then its recipe runs."""
        frames = [self.open(None, None, cells)]
        cascade = None
        try:
            while True:
                frame = frames[-1]
                waiting = frame.waiting
                while waiting and self.defined(waiting[-1]):  # back (or a sibling's)
                    self.hold(waiting.pop().storage, frame.locked)
                if waiting:
                    frames.append(self.frame_for(waiting[-1]))
                    continue
                frame.locked = [c.storage for c in frame.inputs]  # unlocked in this order
                if frame.recipe is None:
                    return frame.locked
                frames.pop()
                if frame.view is not None:
                    self.redefine(frame)
                    continue
                link = None
                if self.allocator.runtime.events is not None:
                    if cascade is None:
                        self.cascades += 1
                        cascade = self.cascades
                    parent = frames[-1].waiting[-1].storage.id if len(frames) > 1 else None
                    link = CascadeLink(cascade, trigger, parent)
                self.replay_cells(frame, link)
        except BaseException:
            for frame in frames:
                self.unlock(frame.locked)
            raise

    def frame_for(self, cell: Cell) -> CellFrame:
        """The frame that makes ``cell`` defined: its view op again (which first makes the
        viewed cell defined, rebuilding the storage if it is evicted), or the recipe of its
        storage."""
        if cell.is_view:
            return self.open(cell.view_recipe, cell, cell.view_recipe.inputs)
        producer = producer_of(cell.storage)
        return self.open(producer, None, producer.inputs)

    def open(
        self, recipe: Storage | Recipe | None, view: ViewCell | None, inputs: Sequence[Cell]
    ) -> CellFrame:
        """Every input's storage stamped now, the defined inputs locked now."""
        allocator = self.allocator
        clock = allocator.clock
        locked: list[Storage] = []
        waiting: list[Cell] = []
        for cell in inputs:
            storage = cell.storage
            if storage.allocator is not allocator:
                storage.allocator.lock_for_another(storage)
                locked.append(storage)
            else:
                storage.last_access = clock
        for cell in inputs:
            if cell.storage.allocator is allocator:
                if self.defined(cell):
                    self.hold(cell.storage, locked)
                else:
                    waiting.append(cell)
        waiting.reverse()
        return CellFrame(recipe, view, inputs, waiting, locked)

    def hold(self, storage: Storage, locked: list[Storage]) -> None:
        """Lock without stamping."""
        storage.locks += 1
        locked.append(storage)

    def redefine(self, frame: CellFrame) -> None:
        """Compute a view op again on its locked input (it allocates nothing): every
        undefined output of it is defined again, at the op's cost, as a rematerialization."""
        allocator = self.allocator
        recipe = frame.recipe
        try:
            allocator.guard.check_replay(recipe)
            allocator.clock += recipe.run_cost
            stats = allocator.stats
            stats.remats += 1
            stats.remat_cost += recipe.run_cost
            for cell in self.siblings.get(recipe, [frame.view]):
                self.view_at[cell] = self.rebuilds.get(cell.storage, 0)
        finally:
            self.unlock(frame.locked)

    def replay_cells(self, frame: CellFrame, link: CascadeLink | None) -> None:
        """Replay a storage's recipe, then unlock its inputs in the recipe's order."""
        self.replay_and_unlock(frame.recipe, frame.locked, link)

    def refill(
        self, storage: Storage, result: Any, recipe: Storage | Recipe, link: CascadeLink | None
    ) -> None:
        """A rebuilt storage: resident again, at the end of the pool, not stamped; its views
        are undefined until computed again."""
        allocator = self.allocator
        storage.buffer = result
        self.rebuilds[storage] = self.rebuilds.get(storage, 0) + 1
        allocator.eviction.left_evicted(storage)
        if storage.evictable:
            allocator.eviction.candidates.made_evictable(storage)
        extra: dict[str, Any] = {}
        if link is not None:
            extra = {"cascade": link.cascade, "trigger": link.trigger, "parent": link.parent}
        allocator.record(
            "remat", storage, cost=recipe.run_cost, replay=allocator.stats.remats, **extra
        )

    def replay(self, recipe: Storage | Recipe, link: CascadeLink | None = None) -> None:
        """The base replay; then the regions of what it rebuilt are walked afresh."""
        super().replay(recipe, link)
        regions = self.regions()
        if regions is not None:
            regions.flush()

    def unlock(self, storages: Sequence[Storage]) -> None:
        """A storage whose last lock goes rejoins the pool at the end. The end of an op:
        its regions are brought up to date first, as the simulator does before unlocking."""
        if storages is self.op_access:
            self.op_access = None
            regions = self.regions()
            if regions is not None:
                candidates = self.allocator.eviction.candidates
                made, candidates.fresh = candidates.fresh, []
                regions.op_done(made)
        for storage in storages:
            storage.locks -= 1
            if storage.locks == 0:
                candidates = storage.allocator.eviction.candidates
                if storage in candidates:
                    candidates.made_evictable(storage)
                if storage.evict_on_unlock:
                    storage.allocator.lifetimes.unlocked_dead(storage)


def prototype_score(heuristic: Any, storage: Storage, context: Any) -> float:
    """The simulator's score of ``storage``: the paper's formula, infinite where its
    denominator is 0; h_LRU's is the last access itself."""
    if not isinstance(heuristic, Heuristic):
        return heuristic.score(storage, context)
    if heuristic.name == "lru":
        return storage.last_access
    top = COST_TERMS[heuristic.cost](storage, context)
    bottom = storage.nbytes if heuristic.size else 1
    if heuristic.staleness:
        bottom *= context.clock - storage.last_access
    return top / bottom if bottom > 0 else math.inf


def choose_victim(pooled: list[Storage], heuristic: Any, context: Any, record: bool) -> Choice:
    """The simulator's choice: the lowest score, the last among equals, the first score of
    exactly 0 at once."""
    best = runner_up = None
    best_score = runner_score = math.inf
    seen: list[tuple[float, Storage]] | None = [] if record else None
    scored = 0
    for storage in pooled:
        if storage.locks:
            continue
        value = prototype_score(heuristic, storage, context)
        scored += 1
        if seen is not None:
            seen.append((value, storage))
        if value <= best_score:
            if best is not None:
                runner_up, runner_score = best, best_score
            best, best_score = storage, value
        elif value <= runner_score:
            runner_up, runner_score = storage, value
        if value == 0:
            break
    runner = None if runner_up is None else (runner_up.id, runner_score)
    shortlist = None if seen is None else shortlist_of(seen, heuristic, context)
    return Choice(best, best_score, runner, shortlist, scored)


def select(allocator: Allocator, modes: Sequence[str]) -> None:
    """Put the mode's parts in place while the innermost runtime asks for it
    (``as_prototype``), the default ones otherwise; in the mode, keep the neighbourhood
    structure of the heuristic in force from the start (``modes``: those ``track`` keeps)."""
    runtime = allocator.runtime
    wanted = runtime is not None and runtime.as_prototype
    eviction = allocator.eviction
    current = allocator.remat
    if wanted and not isinstance(current, PrototypeRematerializer):
        eviction.candidates = PrototypeCandidates(eviction.candidates.in_order())
        eviction.neighbourhood = SimulatorRegions()
        allocator.remat = PrototypeRematerializer(allocator)
        allocator.remat.cascades = current.cascades
    elif not wanted and isinstance(current, PrototypeRematerializer):
        if isinstance(eviction.candidates, PrototypeCandidates):
            eviction.candidates = Candidates(eviction.candidates.in_order())
        if isinstance(eviction.neighbourhood, SimulatorRegions):
            eviction.neighbourhood = WalkedNeighbourhood()
        allocator.remat = Rematerializer(allocator)
        allocator.remat.cascades = current.cascades
    if wanted and allocator.ledger.budget is not None:
        mode = tracked(runtime, getattr(runtime.heuristic, "cost", None))
        eviction.track(mode if mode in modes else None)


def tracked(runtime: Any, mode: str | None) -> str | None:
    """The neighbourhood structure to keep for a heuristic's cost term: in the mode, the
    simulator's regions ("estar") serve h_MSPS's ancestors too."""
    if mode == "ancestors" and runtime.as_prototype:
        return "estar"
    return mode
