"""A fresh allocator for each graded run, so that runs cannot see each other's storages."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..runtime import registry
from ..runtime.allocator import Allocator


@contextlib.contextmanager
def fresh_allocator(device: str = "cpu") -> Iterator[Allocator]:
    """Serve ``device`` from a new allocator inside the block (ids and the clock start
    from zero, nothing else is resident); the previous allocators are back on exit."""
    allocator = Allocator(device)
    saved = registry.installed()
    registry.install(device, allocator)
    try:
        yield allocator
    finally:
        registry.restore(saved)
