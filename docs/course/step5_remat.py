"""Step 5: rematerialization, with cascades and locking (docs/course/step5_remat.md).

Fill in ``lock`` and ``rematerialize`` below, then check your work:

    python -m minidtr.course check 5

Every op and every read locks its input storages first, so that nothing evicts
them while the kernel runs. ``lock`` does that when they are all resident; when one
is evicted, ``rematerialize`` rebuilds it first, as the paper's pseudocode does:

    rematerialize(t):
        for each input s of t's recipe, evicted ones first:
            if s is evicted: rematerialize(s)
            lock(s)
        replay t's recipe (the same op on the same inputs: the same bits)
        unlock the inputs

Both are methods of the runtime's ``Rematerializer`` (``minidtr/runtime/remat.py``);
the grader puts yours in their place, so each takes the rematerializer, ``remat``,
first. What you may use of it:

- ``remat.allocator``: its ``clock`` and ``eviction.candidates.touch(storage)`` (tell
  the candidate set that a storage was used: call it whenever you set
  ``last_access``);
- ``remat.lock_one(storage, locked)``: lock a storage, tell the candidate set, append
  it to the list ``locked``; it leaves ``last_access`` as it is (a lock is not a use:
  stamp the access's own inputs yourself, as ``lock`` does);
- ``remat.unlock(locked)``: unlock every storage of a list;
- ``remat.replay(recipe, link)``: make room for a recipe's outputs and run it, its
  inputs being resident and locked; ``link`` says where it sits in its cascade, for
  the event log (``Cascade.link`` below gives it);
- ``remat.rematerialize(storages, trigger)``: your ``rematerialize`` (call it this
  way from ``lock``).

And from ``minidtr.runtime.remat``: ``producer_of(storage)``, the recipe that
rebuilds an evicted storage (it has ``parents``, the distinct storages it reads, and
``outputs``, weak references to what it makes: ``ref()`` is the storage or None),
``rebuild_need(storage)``, a key to sort evicted storages by how much memory
their rebuild needs, least first, and ``reads_staleness(allocator)``, whether the
heuristic in force has a staleness term.
"""

from __future__ import annotations

from collections.abc import Sequence

from minidtr.runtime.remat import (  # noqa: F401 (for you to use)
    CascadeLink,
    Rematerializer,
    producer_of,
    reads_staleness,
    rebuild_need,
)
from minidtr.runtime.storage import Storage


def lock(
    remat: Rematerializer, storages: Sequence[Storage], trigger: str = "read"
) -> Sequence[Storage]:
    """Lock every storage for an access and return what was locked (the access unlocks
    it when done). When every one is resident (``buffer`` is not None) and belongs to
    this allocator (``storage.allocator is remat.allocator``): add a lock to each
    (``locks += 1``), set its ``last_access`` to the clock and touch it; return
    ``storages``. Otherwise return ``remat.rematerialize(storages, trigger)``."""
    # TODO(step 5)
    raise NotImplementedError("lock")


def rematerialize(
    remat: Rematerializer, storages: Sequence[Storage], trigger: str
) -> list[Storage]:
    """Lock every storage of ``storages`` (an access's inputs), rebuilding the evicted ones
    first; return the list of what was locked. ``trigger`` names the access (an op's
    name, ``read``) in the event log.

    Locking a list of inputs (the access's, or those of a recipe being replayed):

    1. If these are the access's own inputs, mark each used now (``last_access`` = the
       clock, and touch it); a recipe's inputs, read to rebuild something, are not
       marked (a rebuild is not a use by the program: staleness counts from the
       program's last use). Sort the evicted ones by ``rebuild_need``; the others wait.
    2. Take the *last* evicted one (``pop()``: the one whose rebuild needs the most
       memory). If it is resident again (a replay refilled it meanwhile), just lock it.
       Otherwise lock the inputs of its recipe (``producer_of(it).parents``) the same
       way, recursively: that rebuilds whatever of them is evicted; replay the recipe
       (``remat.replay(recipe, cascade.link(...))``); unlock the recipe's inputs; lock
       the storage you rebuilt. Repeat until no evicted input is left.
    3. The inputs that were resident at first are locked last, all together, once
       every evicted one is back. Rebuilding may have evicted some of them (to make
       room): rebuild those first, as in 2, then check again. One exception: when
       these are the access's own inputs, some are evicted and the heuristic does not
       read staleness (``not reads_staleness(remat.allocator)``: h_MSPS, h_size), lock
       the resident ones at once, before any rebuild.

    So a long chain holds locks only on what it has rebuilt. If something goes wrong
    (an exception), unlock what you locked before letting it go on.

    The event log records, with each remat, its cascade: make one ``Cascade`` per call
    of ``rematerialize`` and pass ``cascade.link(owner)`` to ``remat.replay``, where
    ``owner`` is the storage whose recipe's inputs you are locking when you rebuild
    this one, or None for the access's own inputs.
    """
    # TODO(step 5): a recursive function that locks a list of inputs does it all.
    raise NotImplementedError("rematerialize")


class Cascade:
    """The remats of one access, for the event log: its number is taken at its first
    replay (given: bookkeeping, not the algorithm)."""

    def __init__(self, remat: Rematerializer, trigger: str):
        self.remat, self.trigger, self.number = remat, trigger, None

    def link(self, owner: Storage | None) -> CascadeLink | None:
        """What ``remat.replay`` records of a replay needed by ``owner``'s rebuild (None:
        by the access itself); None when the runtime keeps no event log."""
        if self.remat.allocator.runtime.events is None:
            return None
        if self.number is None:
            self.remat.cascades += 1
            self.number = self.remat.cascades
        return CascadeLink(self.number, self.trigger, None if owner is None else owner.id)
