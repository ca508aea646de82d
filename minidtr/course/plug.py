"""Plugging the student's functions into the reference policy, for one graded run.

The reference policy is plain modules (docs/design.md, "Reading the policy"), so a
student's function with the reference's signature can take the place of the
reference's for the length of a ``with`` block: ``plugged((module_or_class, name,
function), ...)``. Nothing of minidtr is changed outside the block, whatever happens
inside it. While plugged, the eviction search does not run Python's cycle collector
before giving up (``eviction.COLLECT_BEFORE_FAILING``): the programs make no cycles,
and the student's ``make_room`` would not run it either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..runtime import eviction

Replacement = tuple[Any, str, Any]


@contextlib.contextmanager
def plugged(*replacements: Replacement) -> Iterator[None]:
    """Put each ``function`` in place of ``owner.name`` inside the block."""
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in replacements]
    collect = eviction.COLLECT_BEFORE_FAILING
    try:
        eviction.COLLECT_BEFORE_FAILING = False
        for owner, name, function in replacements:
            setattr(owner, name, function)
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)
        eviction.COLLECT_BEFORE_FAILING = collect


@contextlib.contextmanager
def reference() -> Iterator[None]:
    """The reference policy as it is, under the same conditions as ``plugged``."""
    with plugged():
        yield
