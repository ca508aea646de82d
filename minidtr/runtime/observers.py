"""Several observers of one allocator.

An allocator reports what a program does (ops computed, constants, reads, handles made
and dropped, storages that died, steps) to one ``observer``: a trace recorder, a floor
meter, the ``learned`` heuristic. When more than one watch at once, the allocator's
observer is an ``Observers`` that passes each report to each, in the order they came.
``add_observer`` and ``remove_observer`` keep that arrangement; with a single observer
the allocator calls it directly.

The reports are the methods of ``Observer``; an observer subclasses it and overrides
those it needs.
"""

from __future__ import annotations

from typing import Any

HOOKS = (
    "on_constant",
    "on_compute",
    "on_read",
    "on_add_ref",
    "on_release",
    "on_make_constant",
    "on_make_constant_if_resident",
    "on_death",
    "on_step",
)


class Observer:
    """What an allocator reports, in program order; each does nothing here."""

    def on_constant(self, storage: Any) -> None:
        """A new constant (an input, a parameter)."""

    def on_compute(self, recipe: Any, cells: list[Any]) -> None:
        """An op ran for the first time (not a recomputation): its recipe and outputs."""

    def on_read(self, cell: Any) -> None:
        """The program read a value (``Tensor.numpy()``, ``item()``)."""

    def on_add_ref(self, cell: Any) -> None:
        """A new handle (a ``Tensor``) to a value."""

    def on_release(self, cell: Any) -> None:
        """A handle died (while an access runs: once it is done)."""

    def on_death(self, storage: Any) -> None:
        """The last handle to a storage died (at once)."""

    def on_make_constant(self, storage: Any, if_resident: bool = False) -> None:
        """A value dropped its recipe (a finished gradient)."""

    def on_make_constant_if_resident(self, storage: Any) -> None:
        """A value drops its recipe if it is resident (a used-up loss)."""

    def on_step(self) -> None:
        """A training step starts (``Runtime.mark_step``)."""


class Observers:
    """Passes each report to every member that has it, in order (its members do not
    change: ``add_observer`` makes a new one)."""

    def __init__(self, members: list[Any]):
        self.members = members

    def __getattr__(self, hook: str):
        if hook not in HOOKS:
            raise AttributeError(hook)
        methods = [m for member in self.members if (m := getattr(member, hook, None))]

        def report(*args: Any, **kwargs: Any) -> None:
            for method in methods:
                method(*args, **kwargs)

        setattr(self, hook, report)  # found directly from now on
        return report


def observers_of(allocator: Any) -> list[Any]:
    observer = allocator.observer
    if observer is None:
        return []
    return list(observer.members) if isinstance(observer, Observers) else [observer]


def add_observer(allocator: Any, observer: Any) -> None:
    """Let ``observer`` hear ``allocator``'s reports too (after those already there)."""
    members = observers_of(allocator)
    if any(member is observer for member in members):
        return
    members.append(observer)
    allocator.observer = members[0] if len(members) == 1 else Observers(members)


def remove_observer(allocator: Any, observer: Any) -> None:
    """Stop ``observer`` hearing ``allocator``'s reports (nothing if it did not)."""
    members = [member for member in observers_of(allocator) if member is not observer]
    allocator.observer = (
        None if not members else members[0] if len(members) == 1 else Observers(members)
    )
