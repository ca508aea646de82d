"""Rematerialization: lock what an access reads, rebuilding whatever was evicted.

Every op and every read locks its input storages first, so that nothing evicts
them while the kernel runs. When all of them are resident that is a count per
storage (``lock``). Otherwise ``rematerialize`` rebuilds the evicted ones, as
the paper's pseudocode does, but with an explicit stack instead of recursion
(a chain of any length needs no Python stack):

    rematerialize(t):
        for each input s of t's recipe, evicted ones first:
            if s is evicted: rematerialize(s)
            lock(s)
        replay t's recipe (the same op on the same inputs: the same bits)
        unlock the inputs

Replaying a recipe refills every evicted output of it (a multi-output op's
siblings too). Making room for a replay may evict other values, even ones this
access read a moment ago, which is why inputs are locked as they come back.

Staleness counts from the last time the *program* used a value: an access stamps
what it reads (when it is requested), and a rebuild stamps nothing, neither the
values it rebuilds nor the inputs it reads. A chain rebuilt for one access keeps
the stamps of its values' last real uses, so the heuristic sees it as what it is,
needed once and long ago, and evicts it before the values the program reads now.
(Stamping rebuilds as uses made the intermediates of a rebuilt chain the freshest
values resident: h_LRU then thrashed from 0.4-0.6 of the peak, docs/simulator.md.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import backend
from .storage import Recipe, Storage, workspace_of
from .views import array_of

if TYPE_CHECKING:
    from .allocator import Allocator


def with_workspace(name: str, workspace: int) -> str:
    """An op's name as a budget error gives it when its kernel needs a workspace."""
    return (
        f"{name} (its outputs and {workspace:,} bytes of kernel workspace)" if workspace else name
    )


def rebuild_need(storage: Storage, limit: int = 64) -> tuple[int, int]:
    """Roughly how much memory rematerializing ``storage`` takes: the bytes of its evicted
    ancestry (walked through evicted parents, at most ``limit`` storages); then newest first."""
    total = 0
    seen: set[int] = set()
    stack = [storage]
    while stack and len(seen) < limit:
        s = stack.pop()
        if s.id in seen:
            continue
        seen.add(s.id)
        total += s.nbytes
        stack.extend(p for p in s.parents if p.buffer is None)
    return total, storage.id


@dataclass(slots=True)
class Frame:
    """One level of ``rematerialize``'s stack: a recipe to replay once its inputs are
    resident and locked (``recipe`` is None for the access itself, at the bottom)."""

    recipe: Storage | Recipe | None  # a storage that is its own recipe, or a shared Recipe
    evicted: list[Storage]  # inputs still to rebuild; ``pop()`` yields the one to rebuild next
    deferred: list[Storage]  # inputs resident when asked for: locked together at the end
    locked: list[Storage]  # inputs locked so far (unlocked once the recipe has run)


@dataclass(slots=True)
class CascadeLink:
    """Where a replay sits in its access's cascade, for its remat event: the cascade's
    number, the access that started it (``trigger``) and ``parent``, the output of the
    replay whose input this one rebuilds, or None when the access itself needs it."""

    cascade: int
    trigger: str
    parent: int | None
    workspace: int = 0  # the replay's workspace, shown on its first remat event


class Rematerializer:
    """Owns: ``cascades``, the number of accesses that rematerialized something (which
    numbers the remat events)."""

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.cascades = 0

    def lock_cells(self, storages: Sequence[Storage], op: Any, cells: Sequence[Any]) -> Any:
        """``lock`` for ``op``, which reads ``cells`` (whose storages are ``storages``): the
        op and the cells matter only to ``prototype.py``'s rematerializer."""
        return self.lock(storages, op.name)

    def lock(self, storages: Sequence[Storage], trigger: str = "read") -> Sequence[Storage]:
        """Lock every storage for an access; returns what it locked (the access unlocks it
        when done). ``trigger`` names the access in the remat events."""
        allocator = self.allocator
        for storage in storages:
            if storage.buffer is None or storage.allocator is not allocator:
                return self.rematerialize(storages, trigger)
        clock = allocator.clock
        touch = allocator.eviction.candidates.touch
        for storage in storages:
            storage.locks += 1
            storage.last_access = clock  # an access counts from when it is requested
            touch(storage)
        return storages

    def rematerialize(self, storages: Sequence[Storage], trigger: str) -> list[Storage]:
        """Lock every storage, rebuilding the evicted ones first (and, before each rebuild,
        the evicted inputs of its recipe, and so on up). Returns what it locked.

        The bottom frame is the access itself, each frame above it a recipe to replay
        once its inputs are back. A frame rebuilds its evicted inputs one by one, locking
        each as it comes back, and locks the inputs that were already resident only at
        the end, all at once (rebuilding any evicted meanwhile). So a long chain holds
        locks only on what it has rebuilt, not on everything resident along the way.
        (The access's own resident inputs are locked at once under a heuristic that
        does not read staleness: ``reads_staleness``.)
        When several inputs are evicted, the one whose rebuild needs the most memory
        goes first (as in Sethi-Ullman register allocation), so that little is held
        while it runs."""
        frames = [self.frame(None, storages)]
        cascade = None  # this access's number in the remat events, taken at its first replay
        try:
            while True:
                frame = frames[-1]
                if frame.evicted:
                    target = frame.evicted[-1]
                    if target.buffer is not None:  # rebuilt meanwhile, as a sibling
                        self.lock_one(frame.evicted.pop(), frame.locked)
                    else:
                        producer = producer_of(target)
                        frames.append(self.frame(producer, producer.parents))
                elif frame.deferred:
                    self.lock_deferred(frame)
                elif frame.recipe is None:
                    return frame.locked
                else:
                    frames.pop()
                    link = None
                    if self.allocator.runtime.events is not None:
                        if cascade is None:
                            self.cascades += 1
                            cascade = self.cascades
                        parent = frames[-2].evicted[-1].id if len(frames) > 1 else None
                        link = CascadeLink(cascade, trigger, parent)
                    self.replay_frame(frame, frames[-1], link)
        except BaseException:
            for frame in frames:
                self.unlock(frame.locked)
            raise

    def made_views(self, recipe: Recipe, cells: list) -> None:
        """A view op made ``cells`` (only ``prototype.py``'s rematerializer keeps track)."""

    def frame(self, recipe: Storage | Recipe | None, inputs: Sequence[Storage]) -> Frame:
        allocator = self.allocator
        touch = allocator.eviction.candidates.touch
        evicted: list[Storage] = []
        deferred: list[Storage] = []
        locked: list[Storage] = []
        for storage in inputs:
            if storage.allocator is not allocator:
                # another allocator's value (made outside an isolated run): a fixed input
                # here, rebuilt, counted and locked by its owner, never evicted by this one
                storage.allocator.lock_for_another(storage)
                locked.append(storage)
                continue
            if recipe is None:  # the access itself: a use by the program, stamped now
                storage.last_access = allocator.clock
                touch(storage)
            (evicted if storage.buffer is None else deferred).append(storage)
        if len(evicted) > 1:
            evicted.sort(key=rebuild_need)
        if recipe is None and evicted and deferred and not reads_staleness(allocator):
            for storage in deferred:  # the access's own inputs: held through its rebuilds
                self.lock_one(storage, locked)
            deferred = []
        return Frame(recipe, evicted, deferred, locked)

    def lock_deferred(self, frame: Frame) -> None:
        """A frame's evicted inputs are all back: lock its resident ones now, unless some
        were evicted meanwhile (to make room for the rebuilds): those are rebuilt first."""
        evicted = [s for s in frame.deferred if s.buffer is None]
        if evicted:
            frame.deferred = [s for s in frame.deferred if s.buffer is not None]
            evicted.sort(key=rebuild_need)
            frame.evicted = evicted
        else:
            for storage in frame.deferred:
                self.lock_one(storage, frame.locked)
            frame.deferred = []

    def replay_and_unlock(
        self, recipe: Storage | Recipe, locked: list, link: CascadeLink | None
    ) -> None:
        """Replay ``recipe`` under the thrash guard, then unlock its inputs, even if it
        failed."""
        guard = self.allocator.guard
        try:
            outermost = guard.begin()
            try:
                self.replay(recipe, link)
            finally:
                if outermost:
                    guard.end()
        finally:
            self.unlock(locked)

    def replay_frame(self, frame: Frame, below: Frame, link: CascadeLink | None) -> None:
        """Replay a frame whose inputs are all locked, unlock them, and lock the outputs
        that the frame below was waiting for before anything else can evict them."""
        self.replay_and_unlock(frame.recipe, frame.locked, link)
        for ref in frame.recipe.outputs:
            output = ref()
            if output is not None and output.buffer is not None and output in below.evicted:
                below.evicted.remove(output)
                self.lock_one(output, below.locked)

    def lock_one(self, storage: Storage, locked: list[Storage]) -> None:
        storage.locks += 1
        self.allocator.eviction.candidates.touch(storage)
        locked.append(storage)

    def unlock(self, storages: Sequence[Storage]) -> None:
        for storage in storages:
            storage.locks -= 1
            if storage.evict_on_unlock and storage.locks == 0:
                storage.allocator.lifetimes.unlocked_dead(storage)  # its owner's policy

    def replay(self, recipe: Storage | Recipe, link: CascadeLink | None = None) -> None:
        """Recompute a recipe whose inputs are resident and locked; refill every evicted
        output (siblings included) and drop the duplicates of resident ones. The
        cost-model thrash guard is checked first. The kernel's workspace is reserved
        with the outputs, as when it first ran, and released after it."""
        allocator = self.allocator
        allocator.guard.check_replay(recipe)
        arrays = [array_of(cell) for cell in recipe.inputs]
        total = sum(recipe.out_nbytes)
        workspace = workspace_of(recipe)
        name = with_workspace(recipe.op.name, workspace)
        allocator.reserve(total + workspace, name, (*recipe.out_nbytes, workspace))
        allocator.kernel_workspace = workspace
        try:
            results = replay_kernel(allocator, recipe, arrays, total)
        except BaseException:
            allocator.unreserve(total + workspace)
            raise
        finally:
            allocator.kernel_workspace = 0
        allocator.ledger.memory -= workspace
        if workspace and link is not None:
            link.workspace = workspace  # shown on the replay's first remat event
        if recipe.op.n_outputs == 1:
            results = (results,)
        allocator.clock += recipe.run_cost
        stats = allocator.stats
        stats.remats += 1
        stats.remat_cost += recipe.run_cost
        addresses = allocator.addresses
        outputs = zip(recipe.outputs, recipe.out_nbytes, results, strict=True)
        for i, (ref, nbytes, result) in enumerate(outputs):
            storage = ref()
            if storage is not None and storage.buffer is None and not storage.banished:
                if addresses is not None:
                    addresses.take(i, storage)
                self.refill(storage, result, recipe, link)
            else:
                allocator.ledger.memory -= nbytes
        if addresses is not None:
            addresses.drop()  # the workspace and the outputs resident already

    def refill(
        self, storage: Storage, result: Any, recipe: Storage | Recipe, link: CascadeLink | None
    ) -> None:
        """Put a replay's result back into an evicted storage."""
        allocator = self.allocator
        storage.buffer = result
        allocator.eviction.left_evicted(storage)
        if storage.evictable:
            allocator.eviction.candidates.add(storage)
        if storage.external_refs == 0:
            allocator.lifetimes.dead_remats.append(storage)
        extra: dict[str, Any] = {}
        if link is not None:
            extra = {"cascade": link.cascade, "trigger": link.trigger, "parent": link.parent}
            if link.workspace:
                extra["workspace"] = link.workspace
                link.workspace = 0  # on the first output's event only
        allocator.record(
            "remat", storage, cost=recipe.run_cost, replay=allocator.stats.remats, **extra
        )


def reads_staleness(allocator: Allocator) -> bool:
    """Whether the heuristic in force reads a storage's staleness: the formula heuristics
    say (``Heuristic.staleness``); the others (random, learned, window, a user's object)
    are taken to. Without that term (h_MSPS, h_size) the access's own resident inputs are
    locked at once, before its evicted ones are rebuilt, as the paper's simulator locks
    them: otherwise they are evicted whenever they score lowest, to make room for those
    rebuilds, and then rebuilt too. With it, the access's stamp mostly keeps them, and
    locking them at once too changed no cell of the measured grid but lowered one
    trace's reach, so those heuristics keep every frame's rule (the figures: docs/
    simulator.md, "Replaying as the paper's simulator")."""
    return getattr(allocator.runtime.heuristic, "staleness", True)


def producer_of(storage: Storage) -> Storage | Recipe:
    recipe = storage.producer
    if recipe is None:
        raise RuntimeError(f"{storage!r} was banished and can no longer be recomputed")
    return recipe


def replay_kernel(allocator: Any, recipe: Recipe, arrays: list, nbytes: int) -> Any:
    """Run a recipe's kernel again (``Rematerializer.replay`` has reserved ``nbytes`` for
    its outputs and the allocator's ``kernel_workspace``); what ``op.forward`` returns.
    Under the audit the outputs must be the bits of the first computation
    (``Audit.replay``); with ``measure_real`` the kernel's real memory is measured."""
    op = recipe.op
    xp = backend.xp_for(recipe.device) if recipe.device is not None else None
    audit, meter = allocator.audit, allocator.meter
    if audit is None and meter is None:
        return op.forward(xp, *arrays)
    if audit is None:
        kernel = lambda: op.forward(xp, *arrays)  # noqa: E731
    else:
        kernel = lambda: audit.replay(recipe, xp, arrays)  # noqa: E731
    if meter is None:
        return kernel()
    return meter.measure(kernel, nbytes + allocator.kernel_workspace)
