"""Passes of Python's cycle collector, as the deallocation policy needs to know them.

The collector clears every weak reference to the garbage before it runs any finalizer,
a Tensor's death among them: in the middle of a pass the children a storage knows of
(weakly) no longer include values whose handles are about to die, and a policy reading
them would decide on a graph half torn down. So deaths during a pass wait for its end
(``minidtr.runtime.lifetime``); this module keeps whether one is running, and where.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lifetime import Lifetimes


class CycleCollection:
    """Whether a pass of Python's cycle collector is running (``running``), and in which
    thread (``here``), kept by the ``gc.callbacks`` entry this module adds once. Deaths
    in that thread during a pass (the finalizers it runs) wait in their allocator's
    queue (``Lifetimes.died``); when the pass ends, the queues of the allocators that
    are not busy are settled (those that are settle when their access is done), so by
    the time ``gc.collect()`` returns the dead are freed. A death in another thread
    meanwhile (the pass lets other threads run between finalizers) is that thread's
    program releasing a value, applied at once, as it would be with no pass running:
    so a replay run in a thread pool decides what it decides alone."""

    def __init__(self) -> None:
        self.running = False
        self.thread: int | None = None  # the collecting thread's ident
        self.waiting: dict[int, weakref.ref[Lifetimes]] = {}  # by id: each once a pass

    def here(self) -> bool:
        """Whether a pass is running, in this thread."""
        return self.running and self.thread == threading.get_ident()

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.thread = threading.get_ident()
            self.running = True
            return
        self.running, self.thread = False, None
        waiting, self.waiting = self.waiting, {}
        for ref in waiting.values():
            lifetimes = ref()
            if lifetimes is not None:
                with lifetimes.allocator.lock:
                    lifetimes.settle()

    def wait(self, lifetimes: Lifetimes) -> None:
        """Settle ``lifetimes`` when the pass ends (once, however many die meanwhile)."""
        ref = self.waiting.get(id(lifetimes))
        if ref is None or ref() is not lifetimes:
            self.waiting[id(lifetimes)] = weakref.ref(lifetimes)


COLLECTION = CycleCollection()
gc.callbacks.append(COLLECTION)
