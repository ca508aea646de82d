"""Fresh memory for a block of code: allocators of its own, the process's restored after.

minidtr keeps one allocator per device for the whole process, and everything
resident in it counts against a budget. Tests must not see each other's
leftovers: tensors kept alive by an earlier test, by a stored traceback (pytest
and hypothesis keep the exceptions of failed examples), or by a cache. Inside
``isolated_allocator`` (one device) or ``isolated_allocators`` (every device)
the ops allocate from new allocators, and on exit the previous ones are back in
place, untouched.

Tensors created before the block may still be used inside it: they stay in their
own allocator, do not count against budgets inside, and are never evicted by
them. Tensors created inside and kept after it belong to the block's allocator,
which no budget outside sees; read them with ``.numpy()`` before leaving.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..runtime import registry
from ..runtime.allocator import Allocator


@contextlib.contextmanager
def isolated_allocator(device: str = "cpu") -> Iterator[Allocator]:
    """Run the block with a new allocator for ``device`` (yielded); restore the previous
    one on exit, whatever happens inside."""
    fresh = Allocator(device)
    saved = registry.installed()
    registry.install(device, fresh)
    try:
        yield fresh
    finally:
        registry.restore(saved)


@contextlib.contextmanager
def isolated_allocators() -> Iterator[None]:
    """Run the block with no allocator at all: each device gets a new one on first use
    inside. On exit every allocator of before is restored and those of the block are
    dropped. (What the pytest plugin wraps around each test.)"""
    saved = registry.installed()
    registry.restore({})
    try:
        yield
    finally:
        registry.restore(saved)
