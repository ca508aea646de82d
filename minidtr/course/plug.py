"""Plugging the student's functions into the reference policy, for one graded run.

The reference policy is plain modules (docs/design.md, "Reading the policy"), so a
student's function with the reference's signature can take the place of the
reference's for the length of a ``with`` block: ``plugged((module_or_class, name,
function), ...)``. Nothing of minidtr is changed outside the block, whatever happens
inside it.

An error in the student's code must not go unseen: some of it runs when a Tensor
dies, inside ``__del__``, where Python only prints an exception and goes on. So
each plugged function records the first error it raises (a ``BudgetError`` is an
answer, not an error), and the block raises it at its end.

While plugged, the eviction search does not run Python's cycle collector before
giving up (``eviction.COLLECT_BEFORE_FAILING``): the programs make no cycles, and
the student's ``make_room`` would not run it either.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..runtime import eviction
from ..runtime.errors import BudgetError

Replacement = tuple[Any, str, Callable[..., Any]]


def recording(function: Callable[..., Any], errors: list[BaseException]) -> Callable[..., Any]:
    """``function``, noting in ``errors`` any exception it raises but a BudgetError."""

    @functools.wraps(function)
    def plugged_function(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except BudgetError:
            raise
        except Exception as error:
            errors.append(error)
            raise

    return plugged_function


@contextlib.contextmanager
def plugged(*replacements: Replacement) -> Iterator[None]:
    """Put each ``function`` in place of ``owner.name`` inside the block; raise the first
    error one of them raised (even one Python swallowed in ``__del__``) at its end."""
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in replacements]
    errors: list[BaseException] = []
    collect = eviction.COLLECT_BEFORE_FAILING
    hook = sys.unraisablehook
    try:
        eviction.COLLECT_BEFORE_FAILING = False
        sys.unraisablehook = lambda unraisable: None  # recorded by the wrapper already
        for owner, name, function in replacements:
            setattr(owner, name, recording(function, errors))
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)
        eviction.COLLECT_BEFORE_FAILING = collect
        sys.unraisablehook = hook
    if errors:
        raise errors[0]


@contextlib.contextmanager
def reference() -> Iterator[None]:
    """The reference policy as it is, under the same conditions as ``plugged``."""
    with plugged():
        yield
