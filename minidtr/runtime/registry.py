"""Which allocator serves each device: one per device for the whole process.

Everything an op makes on a device is counted by that device's allocator, so
that a budget sees every byte, whether made inside a runtime or before it.
``allocator_for`` finds (or creates) it. Tests and property checks run code on
fresh allocators of their own (``minidtr.testing.isolated_allocator``), which
``install`` puts in place and ``restore`` takes away again; values made before
stay with the allocator that made them (a storage belongs to one allocator for
its whole life).
"""

from __future__ import annotations

import os
import threading

from .allocator import Allocator

# device -> its allocator. ``ops.op.apply`` reads it directly on every op; everything
# else goes through the functions below.
ALLOCATORS: dict[str, Allocator] = {}
_CREATING = threading.Lock()  # two threads' first ops on a device make one allocator
os.register_at_fork(  # (taken before the allocators' locks: allocator.py)
    before=_CREATING.acquire, after_in_parent=_CREATING.release, after_in_child=_CREATING.release
)


def allocator_for(device: str) -> Allocator:
    """The allocator of a device (created on first use)."""
    allocator = ALLOCATORS.get(device)
    if allocator is None:
        with _CREATING:
            allocator = ALLOCATORS.get(device)
            if allocator is None:
                allocator = ALLOCATORS[device] = Allocator(device)
    return allocator


def installed() -> dict[str, Allocator]:
    """The allocators in place now, by device (a copy: give it to ``restore``)."""
    return dict(ALLOCATORS)


def install(device: str, allocator: Allocator | None) -> None:
    """Serve ``device`` with ``allocator`` from now on (None: a new one on first use)."""
    if allocator is None:
        ALLOCATORS.pop(device, None)
    else:
        ALLOCATORS[device] = allocator


def restore(allocators: dict[str, Allocator]) -> None:
    """Put back the allocators ``installed`` returned (dropping any made since)."""
    ALLOCATORS.clear()
    ALLOCATORS.update(allocators)
