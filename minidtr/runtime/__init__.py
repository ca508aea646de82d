"""The DTR runtime: storages and recipes, the budgeted allocator with its eviction
manager, the heuristics, and the ``Runtime`` policy object.

The policy reads as the paper does, one short module a piece: the score
(``heuristics.py``), the victim search (``victims.py``), e* (``estar.py``; h_DTR^eq's
classes in ``eqclasses.py``), the budget check (``ledger.py``, ``eviction.py``),
rematerialization (``remat.py``) and the deallocation rules (``lifetime.py``);
``learned.py`` is the heuristic that learns next uses from the step before, watching
the allocator as any observer does (``observers.py``). The
allocator (``allocator.py``) composes them; ``fast/`` holds the accelerated
equivalents that run unless ``Runtime(reference=True)``.
"""

from .allocator import Allocator
from .errors import BudgetError, ThrashError
from .heuristics import HEURISTIC_NAMES, Heuristic, ScoreContext, ablation_names, make_heuristic
from .interrupts import deferred_interrupts
from .learned import Learned
from .observers import Observer
from .options import RuntimeOptions
from .registry import allocator_for
from .runtime import Runtime, Stats
from .storage import Cell, Recipe, Storage

__all__ = [
    "Allocator",
    "BudgetError",
    "Cell",
    "HEURISTIC_NAMES",
    "Heuristic",
    "Learned",
    "Observer",
    "Recipe",
    "Runtime",
    "RuntimeOptions",
    "ScoreContext",
    "Stats",
    "Storage",
    "ThrashError",
    "ablation_names",
    "allocator_for",
    "deferred_interrupts",
    "make_heuristic",
]
