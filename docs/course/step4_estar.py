"""Step 4: e* as a walk (docs/course/step4_estar.md).

Fill in the three functions below, then check your work:

    python -m minidtr.course check 4

Evicting a resident storage t makes it one more evicted node of the graph. Its
*evicted ancestors* (reachable through evicted parents) would be rebuilt first
when t is rebuilt; its *evicted descendants* (reachable through evicted children)
would need t to be rebuilt. e*(t) is both; h_DTR charges t their cost.

A storage's parents are ``storage.parents`` (the distinct storages its recipe
reads), its children ``storage.live_children()`` (those computed from it that still
exist). A storage is evicted when its ``buffer`` is None, unless it was
``banished`` (freed for good: it is no one's neighbour any more).
"""

from __future__ import annotations

from minidtr.runtime.storage import Storage


def evicted_ancestors(storage: Storage) -> list[Storage]:
    """The evicted storages reachable from ``storage`` through evicted parents, each once
    (not ``storage`` itself): what rebuilding it would rebuild first. Any order."""
    # TODO(step 4): a walk with a stack and a set of what was seen.
    raise NotImplementedError("evicted_ancestors")


def evicted_descendants(storage: Storage) -> list[Storage]:
    """The evicted storages reachable from ``storage`` through evicted children, each
    once: what would need it to be rebuilt. Any order."""
    # TODO(step 4)
    raise NotImplementedError("evicted_descendants")


def estar_cost(storage: Storage) -> float:
    """c(e*(t)): the summed ``cost`` of the evicted ancestors and descendants."""
    # TODO(step 4)
    raise NotImplementedError("estar_cost")
