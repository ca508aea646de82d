"""Accelerates ``lifetime.useful_dead``: the same search, asked again only when its answer
may have changed.

Under a budget every dead storage kept resident is asked again after each access
whether it is still useful (``Lifetimes.free_dead_remats``): on the recurrent models
that search, 100 to 250 storages deep, was a tenth of a budgeted step. Here:

- ``search`` walks the weak references in place (the reference builds a list of live
  children at each storage it visits), in the same order, visiting the same storages
  and stopping at the same point, so the answer is the same. It leaves the children
  lists unpruned (``live_children`` drops dead references as it goes; ``tell_parents``
  prunes them as they grow, which bounds them either way).
- ``Usefulness`` remembers each *yes* with the storages the search saw (its *region*:
  those whose children it read are among them), and answers yes again until one of
  the things that search read may have changed: a storage of the region, or a child of
  one, is evicted, rebuilt, banished, dropped from the candidates or, evicted, loses
  its last handle (``changed``, called by the candidate table and by
  ``FastPath.release``; a resident storage's handles are not read). A resident child
  of the region that is evicted and that the search would read no further (it is a
  witness, or none of its children is evicted) joins the region instead, the yes
  kept (``evicted``): two budgeted Tree-LSTM steps at 0.3 search 63 times, not 221.
  Nothing else can turn a yes into a no: a new child is
  resident when it is made (the search skips resident children), a new handle only
  makes a storage useful sooner, and a storage that is collected was on no path to the
  referenced storage found (that one holds its ancestors through its recipe), so the
  search only visits fewer storages before finding it. (Deaths during a pass of
  Python's cycle collector, which clears the weak references to the garbage before
  its finalizers run, wait until the pass is done: ``cycles.CycleCollection``; by
  then every handle among the garbage has died and been heard here.) A *no* is never
  remembered: the storage is freed at once.
- Most questions are noes (all of an LSTM's), each a full search. The one the search
  looks for, an evicted storage with a handle, is made after the storage asked about:
  within one allocator ids grow with creation, and every descendant of a storage is in
  its allocator until one of them is the parent of another allocator's storage
  (``Allocator.lends``). So when no evicted storage with a handle has a larger id, the
  answer is no without a search. ``witnesses`` holds every storage that became evicted
  with a handle (an eviction, ``CandidateTable.evicted``, or a handle made to an evicted
  value, ``Lifetimes.referenced_evicted``) by descending id, and drops those that are not
  so any more as they come to the top: one that becomes so again is pushed again. Only
  storages made after this object are asked about this way (``first_id``): evictions
  before it were not heard.
- When some are newer (an LSTM's recurrent state, a pending gradient: most of its
  questions), ``none_reached`` walks up from each of them along the paths the search
  walks down (parents that are evicted, nobody's, neither banished nor constants), only
  through storages newer than the one asked about (its descendants are). If no walk
  meets it, no path the search could take leads to a witness: the answer is no, without
  a search, whatever the search's order and its bound. A walk that meets it (or runs
  past ``USEFUL_SEARCH`` steps) tells nothing, and the search decides.
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from typing import TYPE_CHECKING

from ..lifetime import USEFUL_SEARCH
from ..storage import Storage

PRUNE_WITNESSES = 1024  # entries the witnesses' heap may hold before stale ones are dropped

if TYPE_CHECKING:
    from ..lifetime import Lifetimes


class Usefulness:
    """``lifetime.useful_dead`` for one allocator, its yeses kept (the module docstring).
    ``regions`` maps a storage's id to the ids of the storages the search that said yes
    saw; ids rather than storages, so that nothing is kept alive by it. ``witnesses`` is a
    heap of (minus id, push count, weak reference) of the storages evicted with a handle
    (some no longer so; the count orders a storage pushed twice without comparing its
    references)."""

    __slots__ = ("lifetimes", "regions", "witnesses", "pushes", "first_id", "prune_at")

    def __init__(self, lifetimes: Lifetimes | None):
        self.lifetimes = lifetimes
        self.regions: dict[int, set[int]] = {}
        self.witnesses: list[tuple[int, int, weakref.ref]] = []
        self.pushes = itertools.count()
        self.first_id = None if lifetimes is None else lifetimes.allocator.next_id + 1
        self.prune_at = PRUNE_WITNESSES

    def __call__(self, storage: Storage) -> bool:
        regions = self.regions
        if storage.id in regions:
            return True
        if self.none_below(storage) or self.none_reached(storage):
            return False
        region = search(storage)
        if region is None:
            return False
        kept_dead = self.lifetimes.kept_dead if self.lifetimes is not None else {}
        if len(regions) > 2 * len(kept_dead) + 64:  # drop what is no longer kept
            kept = {s.id for s in kept_dead}
            self.regions = regions = {k: v for k, v in regions.items() if k in kept}
        regions[storage.id] = region
        return True

    def referenced_evicted(self, storage: Storage) -> None:
        """``storage`` is evicted and has a handle (it was evicted, or a handle was made).
        Stale entries leave from the top when a question is asked; those below it are
        dropped, with duplicates, once the heap has doubled, so that a run that evicts
        much and asks little keeps a heap as large as its witnesses, not its evictions."""
        witnesses = self.witnesses
        heapq.heappush(witnesses, (-storage.id, next(self.pushes), weakref.ref(storage)))
        if len(witnesses) > self.prune_at:
            alive = {entry[0]: entry for entry in witnesses if is_witness(entry[2]())}
            self.witnesses = witnesses = list(alive.values())
            heapq.heapify(witnesses)
            self.prune_at = max(PRUNE_WITNESSES, 2 * len(witnesses))

    def none_below(self, storage: Storage) -> bool:
        """Whether no evicted storage with a handle can be below ``storage`` (the module
        docstring); False when that cannot be told this way."""
        first_id = self.first_id
        if first_id is None or storage.id < first_id or storage.allocator.lends:
            return False
        witnesses = self.witnesses
        while witnesses:
            top = witnesses[0][2]()
            if is_witness(top):
                return top.id < storage.id
            heapq.heappop(witnesses)
        return True

    def none_reached(self, storage: Storage) -> bool:
        """Whether no evicted storage with a handle is below ``storage`` along a path the
        search follows (evicted storages nobody references, neither banished nor
        constants): a walk up from each one made after it (the witnesses of larger ids,
        found as the heap's entries above that id), through such storages made after it,
        that never meets it. The search then answers no, whatever its order and bound.
        False when that cannot be told this way, or in more than ``USEFUL_SEARCH`` steps."""
        first_id = self.first_id
        if first_id is None or storage.id < first_id or storage.allocator.lends:
            return False
        heap, above = self.witnesses, -storage.id
        size = len(heap)
        starts = []
        stack = [0] if heap else []
        steps = 0
        while stack:  # the entries of larger ids: each parent's key is at most its children's
            position = stack.pop()
            key, _, ref = heap[position]
            if key >= above:
                continue  # it and the entries under it were made no later than ``storage``
            steps += 1
            if steps > USEFUL_SEARCH:  # a heap of many later witnesses: the search is cheaper
                return False
            witness = ref()
            if is_witness(witness):
                starts.append(witness)
            below = 2 * position + 1
            if below < size:
                stack.append(below)
                if below + 1 < size:
                    stack.append(below + 1)
        owner, lowest_id = storage.allocator, storage.id
        seen = set(starts)
        stack = starts
        while stack:
            steps += 1
            if steps > USEFUL_SEARCH:
                return False
            for parent in stack.pop().parents:
                if parent is storage:
                    return False
                if (
                    parent.id > lowest_id  # (a descendant of ``storage`` is made after it)
                    and parent.buffer is None
                    and parent.external_refs == 0  # (one with a handle is a start itself)
                    and not parent.banished
                    and parent.op is not None
                    and parent.allocator is owner
                    and parent not in seen
                ):
                    seen.add(parent)
                    stack.append(parent)
        return True

    def evicted(self, storage: Storage) -> None:
        """``storage`` was evicted: as ``changed``, except for the yeses that read it only as
        a resident child of a storage of their region (it is not in the region), when
        the search, asked again, would see it and read nothing more below it: it is a
        witness (the search stops there, if not before, with no more storages seen than
        before), or none of its children is evicted (it adds one storage to those seen
        and reads nothing else, so the bound is still not reached if the region had
        room for one more). Those keep their yes, with the storage added to the region."""
        regions = self.regions
        ids = [parent.id for parent in storage.parents]
        key = storage.id
        stale = []
        grown = []
        for k, region in regions.items():
            if key in region:
                stale.append(k)
            elif any(i in region for i in ids):
                grown.append(k)
        if grown:
            witness = storage.external_refs > 0
            if witness or not has_evicted_child(storage):
                for k in grown:
                    region = regions[k]
                    if witness or len(region) < USEFUL_SEARCH - 1:
                        region.add(key)
                    else:
                        stale.append(k)
            else:
                stale.extend(grown)
        for k in stale:
            del regions[k]

    def changed(self, storage: Storage) -> None:
        """``storage`` was rebuilt, banished or dropped from the candidates, or is evicted
        and losing its last handle: forget the yeses whose search read it (it, or a parent
        of it, is in their region)."""
        ids = [parent.id for parent in storage.parents]
        ids.append(storage.id)
        stale = [k for k, region in self.regions.items() if any(i in region for i in ids)]
        for key in stale:
            del self.regions[key]


def has_evicted_child(storage: Storage) -> bool:
    """``lifetime.has_evicted_child``, reading the children's weak references without
    building a list (a test on every death under a budget, and here: a child the search
    would see, evicted or banished)."""
    children = storage.children
    if type(children) is not list:
        child = children() if children else None
        return child is not None and child.buffer is None
    for ref in children:
        child = ref()
        if child is not None and child.buffer is None:
            return True
    return False


def is_witness(storage: Storage | None) -> bool:
    """Whether ``storage`` (None: collected) is evicted and has a handle."""
    return storage is not None and storage.buffer is None and storage.external_refs > 0


def search(storage: Storage) -> set[int] | None:
    """``lifetime.useful_dead(storage)``, decided the same way: when it is yes, the ids of
    the storages it saw (those whose children it read among them), else None."""
    seen = {storage}
    stack = [storage]
    while stack and len(seen) < USEFUL_SEARCH:
        children = stack.pop().children
        if type(children) is not list:
            if not children:
                continue
            children = (children,)
        for ref in children:
            child = ref()
            if child is None or child.buffer is not None or child in seen:
                continue
            seen.add(child)
            if child.banished or child.op is None:
                continue
            if child.external_refs > 0:
                return {s.id for s in seen}
            stack.append(child)
    return None
