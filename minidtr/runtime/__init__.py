"""The DTR runtime: storages and recipes, the budgeted allocator with its eviction
manager, the heuristics, and the ``Runtime`` policy object."""

from .allocator import Allocator, allocator_for
from .heuristics import HEURISTIC_NAMES, Heuristic, ablation_names, make_heuristic
from .options import RuntimeOptions
from .runtime import BudgetError, Runtime, Stats, ThrashError
from .storage import Cell, Recipe, Storage

__all__ = [
    "Allocator",
    "BudgetError",
    "Cell",
    "HEURISTIC_NAMES",
    "Heuristic",
    "Recipe",
    "Runtime",
    "RuntimeOptions",
    "Stats",
    "Storage",
    "ThrashError",
    "ablation_names",
    "allocator_for",
    "make_heuristic",
]
