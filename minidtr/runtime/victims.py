"""Choosing the victim: score every unlocked candidate, evict the lowest.

The candidates are the resident, evictable storages (not constants, not
pinned), in the order they became candidates. A search considers a *pool* of
them: all of them, or (the prototype's speed-ups) only those of at least
``min_size`` times the mean size, and with ``sample`` only every k-th of those
from a random start, k = isqrt(n). Locked candidates (inputs of the op that is
running or being rebuilt) cannot go. Of the rest the one with the lowest score
wins, the first in candidate order among equals; the runner-up and, when the
runtime records events, the few lowest with the terms of their scores go into
the event log, so that every decision can be explained.

This loop is what ``Runtime(reference=True)`` runs; ``fast/search.py`` makes
the same choice from the columns of a candidate table.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable
from typing import Any, NamedTuple

from .storage import Storage

SHORTLIST = 5  # candidates recorded with each budget eviction (victim, runner-up, ...)


class Choice(NamedTuple):
    """The outcome of a search: the victim (None when every candidate is locked), its
    score, the runner-up as (id, score) or None, when events are recorded the
    ``SHORTLIST`` lowest-scoring candidates with their score terms, and how many
    candidates were scored."""

    victim: Storage | None
    score: float
    runner_up: tuple[int, float] | None
    shortlist: list[dict[str, Any]] | None
    scored: int


def pool_settings(runtime: Any, whole: bool) -> tuple[float, bool]:
    """``min_size`` and ``sample`` of a search: the runtime's, or neither for a search of
    every candidate (``Eviction.make_room``'s last try before a ``BudgetError``: they
    make searches cheaper, never a budget fail)."""
    return (0.0, False) if whole else (runtime.min_size, runtime.sample)


def pool(
    candidates: Iterable[Storage], min_size: float, sample: bool, sampler: random.Random
) -> list[Storage]:
    """The candidates a search considers, in candidate order: those of at least
    ``min_size`` times the mean size, then (with ``sample``) every k-th of them from a
    random start, k = isqrt(n)."""
    chosen = list(candidates)
    if min_size > 0.0 and chosen:
        mean = sum(s.nbytes for s in chosen) / len(chosen)
        threshold = min_size * mean
        chosen = [s for s in chosen if s.nbytes >= threshold]
    if sample and len(chosen) > 4:
        stride = max(1, math.isqrt(len(chosen)))
        chosen = chosen[sampler.randrange(stride) :: stride]
    return chosen


def choose_victim(pooled: list[Storage], heuristic: Any, context: Any, record: bool) -> Choice:
    """Score each unlocked storage of ``pooled`` with ``heuristic.score(storage,
    context)``; the lowest wins (the first among equals). With ``record``, the
    shortlist of the lowest few is kept for the event log."""
    best = runner_up = None
    best_score = runner_score = math.inf
    seen: list[tuple[float, Storage]] | None = [] if record else None
    scored = 0
    for storage in pooled:
        if storage.locks:
            continue
        value = heuristic.score(storage, context)
        scored += 1
        if seen is not None:
            seen.append((value, storage))
        if value < best_score or best is None:
            runner_up, runner_score = best, best_score
            best, best_score = storage, value
        elif value < runner_score or runner_up is None:
            runner_up, runner_score = storage, value
    runner = None if runner_up is None else (runner_up.id, runner_score)
    shortlist = None if seen is None else shortlist_of(seen, heuristic, context)
    return Choice(best, best_score, runner, shortlist, scored)


def finite_or_none(score: float) -> float | None:
    """A score as the event log keeps it: an infinite or NaN score (a heuristic of your own
    may give one) is null, since JSON has no such numbers."""
    return score if math.isfinite(score) else None


def shortlist_of(
    seen: list[tuple[float, Storage]], heuristic: Any, context: Any
) -> list[dict[str, Any]]:
    """The ``SHORTLIST`` lowest-scoring of (score, storage) pairs, lowest first, each with
    the terms of its score (recorded with a budget eviction)."""
    terms = getattr(heuristic, "terms", None)
    out = []
    for value, storage in heapq.nsmallest(SHORTLIST, seen, key=lambda pair: pair[0]):
        entry = {"id": storage.id, "op": storage.name, "score": finite_or_none(value)}
        if terms is not None:
            entry.update(terms(storage, context))
        out.append(entry)
    return out
