"""The accelerator: code that makes the same decisions as the reference policy, faster.

Each module says which reference function it accelerates and why it decides the
same; ``tests/test_reference.py`` runs whole programs both ways and compares
every event, and ``MINIDTR_CHECK_DECISIONS=1`` repeats each table decision with
the reference loop.

    table.py     the candidate set as NumPy columns, rows in insertion order
                 (``candidates.Candidates``)
    search.py    the victim search as array operations (``victims.choose_victim``)
    learned_search.py  ``learned``'s search, e* only where it can decide
                 (``victims.choose_victim``)
    eqterms.py   h_DTR^eq's term for many rows at once (``EquivalenceClasses.cost``)
    borders.py   each row's evicted neighbours, kept as columns for ``eqterms.py``
    mirror.py    the union-find classes as arrays (``eqclasses``)
    closures.py  c(e*) from cached closures (``estar.estar_cost``)
    hotpath.py   inlined ``compute`` and ``release`` for the common op and death
    usefulness.py  whether a dead storage is still useful, asked again only when
                 what the answer read changed (``lifetime.useful_dead``)
    addresses.py the arena's blocks as arrays in address order, with their values'
                 table rows, for the window heuristic (``window.WindowCosts``)
    windows.py   the window's slide as array operations (``Arena.cheapest_window``)

``install`` puts these in place of the reference pieces of an allocator and
``uninstall`` takes them away (``Allocator._select_policy_code``, by the innermost
runtime's ``reference`` setting). The reference pieces never import this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..candidates import Candidates
from ..estar import WalkedNeighbourhood
from ..storage import Storage
from .closures import CachedClosures
from .hotpath import FastPath
from .mirror import ClassMirror
from .search import TableSearch
from .table import CandidateTable

if TYPE_CHECKING:
    from ..allocator import Allocator

__all__ = ["CandidateTable", "FastPath", "install", "uninstall"]


def install(allocator: Allocator, order: list[Storage]) -> None:
    """Accelerate ``allocator``, whose candidates are ``order``."""
    eviction = allocator.eviction
    table = CandidateTable(allocator)
    table.relist(order)
    eviction.candidates = table
    eviction.neighbourhood = CachedClosures(eviction)
    eviction.eq_classes.listener = ClassMirror(table)
    eviction.search = TableSearch(eviction, table)
    allocator.fast = FastPath(allocator)
    # every death calls it: bound here rather than dispatched in Allocator.release
    allocator.release = allocator.fast.release
    allocator.lifetimes.is_useful = table.usefulness
    allocator.lifetimes.referenced_evicted = table.referenced_evicted


def uninstall(allocator: Allocator, order: list[Storage]) -> None:
    """Back to the reference pieces, with the candidates ``order``."""
    eviction = allocator.eviction
    for storage in order:
        storage.row = 0
    eviction.candidates = Candidates(order)
    eviction.neighbourhood = WalkedNeighbourhood()
    eviction.eq_classes.listener = None
    eviction.search = None
    if allocator.addresses is not None:
        allocator.addresses.arena.listener = None  # the window's block arrays (addresses.py)
    allocator.fast = None
    vars(allocator).pop("release", None)  # Allocator.release again
    vars(allocator.lifetimes).pop("is_useful", None)  # Lifetimes.is_useful again
    vars(allocator.lifetimes).pop("referenced_evicted", None)
