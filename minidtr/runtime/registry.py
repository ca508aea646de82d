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
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Inside the ``with``, a first Ctrl-C (SIGINT) does not interrupt whatever Python is
    doing: it asks every allocator to raise ``KeyboardInterrupt`` at its next consistent
    point (the start of an op, of a rematerialization, of a search for room), so an
    interrupted run leaves no half-made storage or miscounted byte behind. A second
    Ctrl-C interrupts at once. A Ctrl-C that no allocator acted on by the end of the
    ``with`` (the work inside ran no op after it) is raised there, not lost. Only in the
    main thread (elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if not ALLOCATORS or any(a.interrupt_requested for a in ALLOCATORS.values()):
            raise KeyboardInterrupt
        for allocator in ALLOCATORS.values():
            allocator.interrupt_requested = True

    previous = signal.signal(signal.SIGINT, handler)
    unanswered = False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
        for allocator in ALLOCATORS.values():
            unanswered = unanswered or allocator.interrupt_requested
            allocator.interrupt_requested = False
    if unanswered:
        raise KeyboardInterrupt
