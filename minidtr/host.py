"""glibc's malloc thresholds, which the ``minidtr`` command sets for its own process.

glibc serves a request above its mmap threshold (adaptive, 128 KiB at start, raised up
to 32 MiB as large blocks are freed) with fresh pages from the system and returns them
on free, and it gives the top of its heap back past its trim threshold. A training step
that frees a buffer and asks for one of the same size again then pays for its pages
again: an unbudgeted step of the small DenseNet takes about 8,700 minor page faults,
and 3 with the thresholds fixed (``python benchmarks/malloc_faults.py --ratio 1``).
Under a budget memory is reused and the difference is small.

The library never changes the host process's allocator: a program that imports
minidtr keeps its own settings. The ``minidtr`` command is a process of its own, so it
fixes both thresholds when it starts (``steady_malloc``) unless the environment already
sets them (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) or asks it not to
(``MINIDTR_DEFAULT_MALLOC=1``). The price: up to 128 MiB of freed memory stays in the
process instead of going back to the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

MMAP_THRESHOLD = 32 << 20  # glibc's largest adaptive threshold
TRIM_THRESHOLD = 128 << 20
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def steady_malloc() -> str:
    """Fix glibc's mmap threshold (32 MiB) and trim threshold (128 MiB) for this process;
    returns what was done, in words."""
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    if mallopt is None:
        return "malloc as is (no glibc mallopt)"
    m_trim_threshold, m_mmap_threshold = -1, -3
    if mallopt(m_mmap_threshold, MMAP_THRESHOLD) != 1:
        return "malloc as is (mallopt refused)"
    if mallopt(m_trim_threshold, TRIM_THRESHOLD) != 1:
        return "malloc as is (mallopt refused)"
    return "glibc mmap threshold 32 MiB, trim threshold 128 MiB"


def tune_for_command() -> str:
    """``steady_malloc`` for the ``minidtr`` command, unless the environment sets the
    thresholds itself or says ``MINIDTR_DEFAULT_MALLOC=1``."""
    if os.environ.get("MINIDTR_DEFAULT_MALLOC") == "1":
        return "malloc as is (MINIDTR_DEFAULT_MALLOC=1)"
    if any(name in os.environ for name in ENVIRONMENT):
        return "malloc as the environment sets it"
    return steady_malloc()
