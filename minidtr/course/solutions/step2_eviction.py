"""Step 2: the budget check and the eviction loop (a reference solution).

Before any buffer is made, the allocator asks for room. When the budget cannot hold
the new bytes, ``make_room`` evicts one victim at a time until they fit; the victim
is the unlocked candidate with the lowest score (``choose_victim``).
"""

from __future__ import annotations

import math
from typing import Any

from minidtr.runtime.errors import BudgetError
from minidtr.runtime.eviction import Eviction
from minidtr.runtime.storage import Storage
from minidtr.runtime.victims import Choice, shortlist_of


def choose_victim(pooled: list[Storage], heuristic: Any, context: Any, record: bool) -> Choice:
    """The unlocked storage of ``pooled`` with the lowest ``heuristic.score(storage,
    context)`` (the first among equals), the runner-up, and with ``record`` the
    shortlist of the lowest few for the event log."""
    best = runner_up = None
    best_score = runner_score = math.inf
    seen: list[tuple[float, Storage]] = []
    for storage in pooled:
        if storage.locks:
            continue
        value = heuristic.score(storage, context)
        seen.append((value, storage))
        if best is None or value < best_score:
            runner_up, runner_score = best, best_score
            best, best_score = storage, value
        elif runner_up is None or value < runner_score:
            runner_up, runner_score = storage, value
    runner = None if runner_up is None else (runner_up.id, runner_score)
    shortlist = shortlist_of(seen, heuristic, context) if record else None
    return Choice(best, best_score, runner, shortlist, len(seen))


def make_room(eviction: Eviction, target: int, op_name: str, needed: int) -> None:
    """Evict victims (``eviction.choose_victim()``) until at most ``target`` bytes are
    resident (``eviction.allocator.ledger.memory``); ``BudgetError`` when none is left."""
    ledger = eviction.allocator.ledger
    while ledger.memory > target:
        choice = eviction.choose_victim()
        if choice.victim is None:
            raise BudgetError(
                op_name,
                needed,
                ledger.budget,
                ledger.memory,
                ledger.pinned_bytes,
                ledger.constant_bytes,
                eviction.locked_bytes(),
            )
        eviction.evict(choice.victim, "budget", choice)
