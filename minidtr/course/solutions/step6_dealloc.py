"""Step 6: deallocation, eager, banish, and orphans (a reference solution).

When the program drops its last reference to a storage (its last Tensor dies),
the runtime's policy applies: ``ignore`` leaves it to the heuristic, ``banish``
frees it for good (its children become constants), ``eager`` evicts it at once,
keeping its recipe while an evicted child may need it. Eager eviction first
rebuilds the storage's *orphans* (evicted children that are still referenced)
when together they are no larger than it, and keeps the storage resident while
it is *useful* (an evicted, referenced storage below it would need it to be
rebuilt): either way an orphan's rebuild stays one op, at the fewer bytes.
"""

from __future__ import annotations

from minidtr.runtime.lifetime import Lifetimes, has_evicted_child
from minidtr.runtime.storage import Storage


def apply_policy(lifetimes: Lifetimes, storage: Storage) -> None:
    """The deallocation policy, for a storage whose last reference died."""
    if storage.external_refs:
        return  # a new handle was made meanwhile
    allocator = lifetimes.allocator
    runtime = allocator.runtime
    if runtime.dealloc == "ignore" or storage.banished:
        return
    if storage.locks:
        storage.evict_on_unlock = True  # the policy applies when it is unlocked
        return
    if runtime.dealloc == "banish" and lifetimes.banish(storage):
        return
    if storage.buffer is None or storage.op is None or storage.pinned:
        return  # not resident, or not evictable
    if (
        allocator.ledger.budget is not None
        and runtime.rebuild_orphans
        and lifetimes.pending_error is None
        and has_evicted_child(storage)
    ):
        orphans = orphans_of(storage)
        if orphans and sum(orphan.nbytes for orphan in orphans) <= storage.nbytes:
            try:
                lifetimes.rebuild_orphans(storage, orphans)
            except BaseException as error:  # noqa: BLE001 (raised by the next access)
                lifetimes.pending_error = error.with_traceback(None)
            if storage.buffer is None or storage.external_refs or storage.locks:
                return
        if lifetimes.pending_error is None and useful_dead(storage):
            lifetimes.kept_dead[storage] = None  # evicted ones below still need it
            return
    allocator.eviction.evict(storage, "dead")


def orphans_of(storage: Storage) -> list[Storage]:
    """The evicted children of ``storage`` that are still referenced and can be rebuilt,
    except those evicted again since they were last rebuilt as orphans, unread."""
    return [
        child
        for child in storage.live_children()
        if child.buffer is None
        and not child.banished
        and child.external_refs > 0
        and child.op is not None
        and child.orphan_rebuilt_at != child.last_access
    ]


def useful_dead(storage: Storage) -> bool:
    """Whether an evicted, referenced storage can be reached from ``storage`` through
    evicted children that nobody references (its rebuild would need ``storage``)."""
    seen = {id(storage)}
    stack = [storage]
    while stack:
        for child in stack.pop().live_children():
            if child.buffer is not None or id(child) in seen:
                continue
            seen.add(id(child))
            if child.banished or child.op is None:
                continue
            if child.external_refs > 0:
                return True
            stack.append(child)
    return False
