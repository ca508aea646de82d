"""Step 6: deallocation: eager, banish, orphans (docs/course/step6_dealloc.md).

Fill in the three functions below, then check your work:

    python -m minidtr.course check 6

When the program drops its last reference to a storage (its last Tensor dies),
the runtime's deallocation policy applies to it: ``apply_policy``. The grader puts
your functions in place of those of ``minidtr/runtime/lifetime.py``.

What a storage tells you: ``external_refs`` (the program's live Tensors of it),
``buffer`` (None: evicted), ``op`` (None: a constant), ``pinned``, ``locks``,
``banished``, ``live_children()``, ``last_access`` and ``orphan_rebuilt_at`` (its
``last_access`` when it was last rebuilt as an orphan).
"""

from __future__ import annotations

from minidtr.runtime.lifetime import Lifetimes, has_evicted_child  # noqa: F401
from minidtr.runtime.storage import Storage


def apply_policy(lifetimes: Lifetimes, storage: Storage) -> None:
    """The policy, for a storage whose last reference died. The runtime is
    ``lifetimes.allocator.runtime`` (its ``dealloc``: eager, banish or ignore, and
    ``rebuild_orphans``); the budget in force ``lifetimes.allocator.ledger.budget``.
    In order:

    1. A new reference was made meanwhile (``external_refs``): nothing to do.
    2. ``ignore``, or the storage is banished already: nothing to do.
    3. It is locked (an op is using it): set ``storage.evict_on_unlock = True`` (the
       policy applies again when it is unlocked) and stop.
    4. ``banish``: ``lifetimes.banish(storage)`` frees it for good and returns True
       when it could (it cannot while an evicted child needs it: go on then, and the
       rules below apply as under eager).
    5. Not resident, a constant, or pinned: nothing to evict.
    6. Under eager, or a banish that could not banish, with a budget in force,
       ``rebuild_orphans`` on and ``has_evicted_child(storage)``: if it has orphans
       (``orphans_of``) and together they are no larger than it (their ``nbytes``
       summed), rebuild them (``lifetimes.rebuild_orphans(storage, orphans)``); if that
       left it evicted, referenced again or locked, stop. Then, if it is still useful
       (``useful_dead``), keep it resident (``lifetimes.kept_dead[storage] = None``: it
       is freed once it is not) and stop.
    7. Evict it: ``lifetimes.allocator.eviction.evict(storage, "dead")``.
    """
    # TODO(step 6)
    raise NotImplementedError("apply_policy")


def orphans_of(storage: Storage) -> list[Storage]:
    """The *orphans* of ``storage``: its children that are evicted (not banished), still
    referenced by the program, made by an op, and not evicted again since they were
    last rebuilt as orphans without being used (``orphan_rebuilt_at`` equal to
    ``last_access``): rebuilding those once more would only repeat that eviction."""
    # TODO(step 6)
    raise NotImplementedError("orphans_of")


def useful_dead(storage: Storage) -> bool:
    """Whether the dead ``storage`` is still *useful*: whether a storage that the program
    references and that is evicted can be reached from it through evicted children
    nobody references (so that rebuilding that storage would need this one). Skip
    banished storages and constants on the way; visit each storage once."""
    # TODO(step 6): a walk down through evicted, unreferenced children.
    raise NotImplementedError("useful_dead")
