"""The ledger: every resident byte, counted, against the budget in force.

The budget is a hard limit on ``memory``, the bytes of every resident buffer:
activations, gradients, constants (inputs, parameters, optimizer state) and
pinned values alike. ``constant_bytes`` and ``pinned_bytes`` say how much of it
can never be evicted. ``budget`` is the tightest budget of the runtimes active
on the allocator (None: unbounded); each ``Runtime`` says what its own is, and
the allocator works out which one holds (``Allocator.apply_budget``).

Only the allocator changes these counts: it adds an op's output bytes before
the kernel runs (``Allocator.reserve``, after making room), with the kernel's
workspace (``Op.workspace``), which it takes away again when the kernel returns,
and takes the outputs' bytes away when a buffer is evicted or freed.
"""

from __future__ import annotations


class Ledger:
    """Counted bytes and the budget in force."""

    __slots__ = ("memory", "constant_bytes", "pinned_bytes", "budget")

    def __init__(self):
        self.memory = 0
        self.constant_bytes = 0
        self.pinned_bytes = 0
        self.budget: int | None = None

    def fits(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit the budget without evicting anything."""
        return self.budget is None or self.memory + nbytes <= self.budget

    def __repr__(self) -> str:
        return (
            f"Ledger(memory={self.memory:,}, constant={self.constant_bytes:,}, "
            f"pinned={self.pinned_bytes:,}, budget={self.budget})"
        )
