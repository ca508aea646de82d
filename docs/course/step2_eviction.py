"""Step 2: the budget check and the eviction loop (docs/course/step2_eviction.md).

Fill in the two functions below, then check your work:

    python -m minidtr.course check 2

Before any buffer is made, the allocator asks for room. When the budget cannot hold
the new bytes, ``make_room`` evicts one victim at a time until they fit; the victim
is the unlocked candidate with the lowest score (``choose_victim``). The grader puts
your functions in place of minidtr's own (``minidtr/runtime/victims.py`` and
``Eviction.make_room`` in ``minidtr/runtime/eviction.py``): read those only after.
"""

from __future__ import annotations

from typing import Any

from minidtr.runtime.errors import BudgetError  # noqa: F401 (make_room raises it)
from minidtr.runtime.eviction import Eviction
from minidtr.runtime.storage import Storage
from minidtr.runtime.victims import Choice, shortlist_of  # noqa: F401


def choose_victim(pooled: list[Storage], heuristic: Any, context: Any, record: bool) -> Choice:
    """Search ``pooled`` (the candidates, in the order they became candidates) for the
    victim, and return what the search found as a ``Choice``:

    - ``victim``: the storage with the lowest ``heuristic.score(storage, context)``
      among those not locked (``storage.locks == 0``); among equal scores, the first
      in ``pooled``. None when every one is locked (or there is none);
    - ``score``: its score (``math.inf`` when there is no victim);
    - ``runner_up``: ``(id, score)`` of the second lowest (the first among equals
      again), or None when fewer than two were scored;
    - ``shortlist``: with ``record``, ``shortlist_of(seen, heuristic, context)`` where
      ``seen`` lists the ``(score, storage)`` of every storage scored, in order;
      without it, None;
    - ``scored``: how many storages were scored.

    Score each storage once: a heuristic may draw a random number per score.
    """
    # TODO(step 2): one pass over pooled, keeping the best two.
    raise NotImplementedError("choose_victim")


def make_room(eviction: Eviction, target: int, op_name: str, needed: int) -> None:
    """Evict until at most ``target`` bytes are resident.

    The resident bytes are ``eviction.allocator.ledger.memory`` (the ledger also knows
    ``budget``, ``pinned_bytes`` and ``constant_bytes``). Each round, ask
    ``eviction.choose_victim()`` (it pools the candidates, takes the heuristic in force
    and calls your ``choose_victim``) and evict its victim with
    ``eviction.evict(choice.victim, "budget", choice)`` (the choice goes into the event
    log). When there is no victim, raise
    ``BudgetError(op_name, needed, budget, memory, pinned_bytes, constant_bytes,
    eviction.locked_bytes())``: its message tells the user what filled the budget.
    """
    # TODO(step 2): the loop.
    raise NotImplementedError("make_room")
