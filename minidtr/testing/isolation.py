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

from ..runtime import allocator as allocator_module


@contextlib.contextmanager
def isolated_allocator(device: str = "cpu") -> Iterator[allocator_module.Allocator]:
    """Run the block with a new allocator for ``device`` (yielded); restore the previous
    one on exit, whatever happens inside."""
    fresh = allocator_module.Allocator(device)
    allocators = allocator_module._ALLOCATORS
    previous = allocators.get(device)
    allocators[device] = fresh
    try:
        yield fresh
    finally:
        if previous is None:
            allocators.pop(device, None)
        else:
            allocators[device] = previous


@contextlib.contextmanager
def isolated_allocators() -> Iterator[None]:
    """Run the block with no allocator at all: each device gets a new one on first use
    inside. On exit every allocator of before is restored and those of the block are
    dropped. (What the pytest plugin wraps around each test.)"""
    allocators = allocator_module._ALLOCATORS
    saved = dict(allocators)
    allocators.clear()
    try:
        yield
    finally:
        allocators.clear()
        allocators.update(saved)
