"""An address model: an arena of ``size`` bytes cut into blocks, some free, some used.

A byte budget says a value fits when the resident bytes plus its own stay under the
budget. A real allocator hands out *address ranges*, and then a value fits only if one
free range is long enough: two free blocks of 100 MB that are not adjacent cannot
serve a request of 200 MB. The difference between the two rules is fragmentation.
This module is that second rule, with nothing else in it: no storages, no eviction,
no NumPy. ``placement.py`` connects it to the allocator.

The arena is a line of addresses ``[0, size)`` tiled by ``Block`` records, each
either used or free, so that at every moment:

- the blocks never overlap and cover the arena exactly (their sizes sum to ``size``);
- no two free blocks are adjacent (a freed block merges with its free neighbours:
  *coalescing*), so a free block is as long as the free range it stands for.

**Alignment.** Every request is rounded up to a multiple of ``alignment`` (512 bytes
by default, what CUDA caching allocators round to), and blocks are cut at such
multiples, so every used block starts on an aligned address. A 1-byte value takes
512 bytes of the arena: the rounding is part of what the arena measures.

**Placement.** ``place(nbytes)`` picks a free block that holds the rounded request,
*splits* it (the request takes its low end, the rest stays free) and returns the used
part. Which free block:

- ``best`` (default): the smallest that is large enough, the lowest address among
  equals. It keeps large free blocks whole for large requests; CUDA's caching
  allocator does the same. O(log n) to find, by bisection in the free blocks sorted
  by (size, start).
- ``first``: the lowest address that is large enough. Simpler to explain, tends to
  leave small splinters at the bottom; found by a scan of the free blocks in address
  order (O(free blocks)).
- ``split``: small requests (at most ``SMALL_SHARE`` of the arena) from the *top* end,
  the highest free block that holds them, cut at its high end; the others best-fit from
  the bottom. Small values are mostly constants (biases, norms' statistics, finished
  gradients, optimizer state) that stay for good: at the top they no longer stand
  between activations, which the bottom then keeps in long runs (a crude form of
  Coop's cost-density partitioning; PyTorch serves small requests from a pool of their
  own for the same reason). ``place(..., high=True)`` sends any request to the top.

``free(block)`` *merges* it with a free block just before it and one just after it.
Both neighbours are found in O(1) from dictionaries keyed by start and end address;
keeping the sorted lists costs an insertion or deletion in a Python list (a memmove,
fast for the thousands of blocks a simulation holds).

``blocks()`` walks every block in address order (used and free), and
``blocks_from(address)`` from a given address on: what a heuristic that evicts a
*contiguous window* of blocks slides over (Coop, NeurIPS 2023). ``cheapest_window``
is that slide: given what freeing each used block would cost (infinite for one that
cannot be freed), the run of adjacent blocks that would hold a request at the lowest
total cost, in one pass.

``listener`` (None by default) hears of every block added to and removed from the
address order, with its index there: the accelerator keeps the blocks as arrays
from it (``fast/addresses.py``), which the window heuristic's decision reads.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

ALIGNMENT = 512
POLICIES = ("best", "first", "split")
# under "split", a request of at most this share of the arena is small: 1/256 did best of
# 1/2048 ... 1/100 on benchmarks/fragmentation.py's traces (docs/memory.md)
SMALL_SHARE = 1 / 256


def aligned(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``."""
    return -(-nbytes // alignment) * alignment


@dataclass(slots=True, eq=False)
class Block:
    """The range ``[start, start + size)`` of the arena, free or used. ``owner`` is what
    the user of the arena put there (``placement.py``: a weak reference to the storage),
    None while free or not yet given one. Compared by identity: two blocks are the same
    block only if they are one object."""

    start: int
    size: int
    free: bool = True
    owner: Any = None

    @property
    def end(self) -> int:
        return self.start + self.size


class Arena:
    """``size`` bytes of addresses cut into blocks; see the module docstring."""

    def __init__(self, size: int, policy: str = "best", alignment: int = ALIGNMENT):
        if policy not in POLICIES:
            raise ValueError(f"placement policy must be one of {POLICIES}, got {policy!r}")
        if not isinstance(alignment, int) or alignment < 1:
            raise ValueError(f"alignment must be a whole number of bytes >= 1, got {alignment!r}")
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"an arena's size must be a whole number of bytes >= 0, got {size!r}")
        self.size = size
        self.policy = policy
        self.alignment = alignment
        self.free_bytes = 0
        self.starts: list[int] = []  # every block's start, sorted
        self.at: dict[int, Block] = {}  # start -> block
        self.ending: dict[int, Block] = {}  # end -> block
        self.by_size: list[tuple[int, int]] = []  # (size, start) of the free blocks, sorted
        self.free_starts: list[int] = []  # the free blocks' starts, sorted
        self.peak_end = 0  # the highest end a block placed from the bottom ever had
        self.listener = None  # told of each block added and removed (fast/addresses.py)
        if size:
            self._add(Block(0, size))

    # ---- the two operations ----------------------------------------------------------

    def place(self, nbytes: int, owner: Any = None, high: bool | None = None) -> Block | None:
        """A used block of ``nbytes`` rounded up to the alignment, cut from a free block
        chosen by the policy; None when no free block is large enough (nothing changes).
        Under ``split``, ``high`` says which end it comes from (None: the top end when
        it is small, ``is_small``)."""
        need = aligned(nbytes, self.alignment)
        if need <= 0:
            raise ValueError(f"a block must hold at least 1 byte, asked for {nbytes}")
        if self.policy == "split":
            if high if high is not None else self.is_small(need):
                return self._place_high(need, owner)
            found = self._best(need)
        else:
            found = self._best(need) if self.policy == "best" else self._first(need)
        if found is None:
            return None
        self._remove(found)
        if found.size > need:  # split: the rest stays free, just above
            self._add(Block(found.start + need, found.size - need))
        block = Block(found.start, need, False, owner)
        self._add(block)
        if block.end > self.peak_end:
            self.peak_end = block.end
        return block

    def free(self, block: Block) -> Block:
        """Free a used block and merge it with its free neighbours; returns the free block
        that now covers its range."""
        if block.free or self.at.get(block.start) is not block:
            raise ValueError(f"{block} is not a used block of this arena")
        self._remove(block)
        start, end = block.start, block.end
        before = self.ending.get(start)
        if before is not None and before.free:
            self._remove(before)
            start = before.start
        after = self.at.get(end)
        if after is not None and after.free:
            self._remove(after)
            end = after.end
        merged = Block(start, end - start)
        self._add(merged)
        return merged

    # ---- what it measures ------------------------------------------------------------

    def largest_free(self) -> int:
        """The size of the largest free block: the largest request that fits now."""
        return self.by_size[-1][0] if self.by_size else 0

    def fits(self, nbytes: int) -> bool:
        return aligned(nbytes, self.alignment) <= self.largest_free()

    def fragmentation(self) -> float:
        """1 - largest free block / free bytes: 0 when the free space is one block, near
        1 when it is splintered into many small ones (0 when nothing is free)."""
        if not self.free_bytes:
            return 0.0
        return 1.0 - self.largest_free() / self.free_bytes

    def touched(self) -> int:
        """The address space in use now: up to the end of the highest used block, or
        under ``split``, whose values grow from both ends towards each other, all but the
        largest free block."""
        if self.policy == "split":
            return self.size - self.largest_free()
        return self.used_end()

    def used_end(self) -> int:
        """The end of the highest used block (0 when none is used)."""
        if not self.starts:
            return 0
        last = self.at[self.starts[-1]]
        return last.start if last.free else last.end

    @property
    def used_bytes(self) -> int:
        return self.size - self.free_bytes

    # ---- walking the blocks (in address order) ---------------------------------------

    def blocks(self) -> Iterator[Block]:
        """Every block, free and used, lowest address first."""
        at = self.at
        for start in list(self.starts):
            yield at[start]

    def blocks_from(self, address: int) -> Iterator[Block]:
        """The blocks from the one that holds ``address`` on, in address order."""
        i = max(0, bisect.bisect_right(self.starts, address) - 1)
        at = self.at
        for start in self.starts[i:]:
            yield at[start]

    def block_at(self, address: int) -> Block | None:
        """The block that holds ``address`` (None outside the arena)."""
        if not 0 <= address < self.size:
            return None
        return self.at[self.starts[bisect.bisect_right(self.starts, address) - 1]]

    def cheapest_window(
        self, nbytes: int, cost: Callable[[Block], float]
    ) -> tuple[float, list[Block]] | None:
        """The run of adjacent blocks whose sizes sum to at least ``nbytes`` (rounded up to
        the alignment) that would cost least to free, with that cost: free blocks cost
        nothing, a used one ``cost(block)`` (>= 0; ``math.inf`` for one that cannot be
        freed, which no window crosses). The lowest address wins among equal costs; None
        when no run holds the request.

        One pass with two ends: costs are never negative, so for each first block the
        cheapest run is the shortest that holds the request; the far end only moves
        forward, and each block's cost is asked for once. A run's cost is the exact sum
        of its costs (``math.fsum``), so that ``fast/windows.py``, which finds the same
        runs by prefix sums, compares the same numbers."""
        blocks = list(self.blocks())
        costs = [0.0 if b.free else cost(b) for b in blocks]
        found = shortest_runs_cheapest([b.size for b in blocks], costs, self.aligned(nbytes))
        if found is None:
            return None
        total, first, end = found
        return total, blocks[first:end]

    def aligned(self, nbytes: int) -> int:
        return aligned(nbytes, self.alignment)

    # ---- resizing --------------------------------------------------------------------

    def resize(self, size: int) -> None:
        """Grow or shrink the arena at its top end. Shrinking cannot cut a used block:
        the caller frees what lies above ``size`` first (``used_end() <= size``)."""
        if size < self.used_end():
            raise ValueError(
                f"cannot shrink the arena to {size:,} bytes: a used block ends at "
                f"{self.used_end():,}"
            )
        if size == self.size:
            return
        top_start = self.size
        if self.starts:
            last = self.at[self.starts[-1]]
            if last.free:
                self._remove(last)
                top_start = last.start
        self.size = size
        if size > top_start:
            self._add(Block(top_start, size - top_start))

    # ---- the invariants (for tests and debugging) ------------------------------------

    def check(self) -> None:
        """Raise AssertionError unless the module docstring's invariants hold and every
        index agrees with the blocks."""
        expected, free, free_blocks = 0, 0, []
        previous: Block | None = None
        for start in self.starts:
            block = self.at[start]
            assert block.start == expected, f"gap or overlap at {expected}: {block}"
            assert block.size > 0, f"empty block {block}"
            assert self.ending[block.end] is block, f"end index wrong for {block}"
            if block.free:
                assert previous is None or not previous.free, f"adjacent free {previous} {block}"
                free += block.size
                free_blocks.append(block)
            else:
                assert block.start % self.alignment == 0, f"unaligned {block}"
            expected, previous = block.end, block
        assert expected == self.size, f"blocks cover {expected}, the arena is {self.size}"
        assert len(self.at) == len(self.ending) == len(self.starts)
        assert free == self.free_bytes, f"free bytes {self.free_bytes}, blocks say {free}"
        assert self.by_size == sorted((b.size, b.start) for b in free_blocks)
        assert self.free_starts == [b.start for b in free_blocks]

    def __repr__(self) -> str:
        return (
            f"Arena({self.size:,} B, {self.policy}-fit, {len(self.starts)} blocks, "
            f"{self.free_bytes:,} free, largest free {self.largest_free():,})"
        )

    # ---- internals -------------------------------------------------------------------

    def _best(self, need: int) -> Block | None:
        i = bisect.bisect_left(self.by_size, (need, -1))
        if i == len(self.by_size):
            return None
        return self.at[self.by_size[i][1]]

    def is_small(self, need: int) -> bool:
        """Whether ``split`` places a request of ``need`` (aligned) bytes at the top end."""
        return need <= self.size * SMALL_SHARE

    def _place_high(self, need: int, owner: Any) -> Block | None:
        """``split``'s top end: the free block of the highest address that holds ``need``,
        cut at its high end (at an aligned address, so a sliver under the alignment may
        stay free above it)."""
        at = self.at
        for i in range(len(self.free_starts) - 1, -1, -1):
            found = at[self.free_starts[i]]
            start = (found.end - need) // self.alignment * self.alignment
            if start >= found.start:
                break
        else:
            return None
        self._remove(found)
        if start > found.start:
            self._add(Block(found.start, start - found.start))
        block = Block(start, need, False, owner)
        self._add(block)
        if block.end < found.end:
            self._add(Block(block.end, found.end - block.end))
        return block

    def _first(self, need: int) -> Block | None:
        at = self.at
        for start in self.free_starts:
            block = at[start]
            if block.size >= need:
                return block
        return None

    def _add(self, block: Block) -> None:
        index = bisect.bisect_left(self.starts, block.start)
        self.starts.insert(index, block.start)
        if self.listener is not None:
            self.listener.added(index, block)
        self.at[block.start] = block
        self.ending[block.end] = block
        if block.free:
            bisect.insort(self.by_size, (block.size, block.start))
            bisect.insort(self.free_starts, block.start)
            self.free_bytes += block.size

    def _remove(self, block: Block) -> None:
        index = bisect.bisect_left(self.starts, block.start)
        del self.starts[index]
        if self.listener is not None:
            self.listener.removed(index)
        del self.at[block.start]
        del self.ending[block.end]
        if block.free:
            del self.by_size[bisect.bisect_left(self.by_size, (block.size, block.start))]
            del self.free_starts[bisect.bisect_left(self.free_starts, block.start)]
            self.free_bytes -= block.size


def shortest_runs(sizes: list[int], costs: list[float], need: int) -> Iterator[tuple[int, int]]:
    """Each start's shortest run ``[first, end)`` of blocks (address order) whose ``sizes``
    sum to at least ``need`` with no ``inf`` among its ``costs``, lowest start first. One
    pass with two ends: the far end only moves forward."""
    end = size = 0
    for first in range(len(sizes)):
        if end <= first:  # an empty run: start it here
            end, size = first, 0
        while size < need and end < len(sizes) and costs[end] < math.inf:
            size += sizes[end]
            end += 1
        if size >= need:
            yield first, end
        if end > first:  # the first block leaves the run
            size -= sizes[first]


def shortest_runs_cheapest(
    sizes: list[int],
    costs: list[float],
    need: int,
    run_cost: Callable[[int, int], float] | None = None,
) -> tuple[float, int, int] | None:
    """``Arena.cheapest_window``'s slide over plain lists (address order): the cheapest of
    the ``shortest_runs``, as ``(cost, first, end)``, the lowest ``first`` among equal
    costs; None when there is none. A run's cost is the exact sum of its ``costs``, or
    ``run_cost(first, end)`` when given (a cost that is not a sum: the window heuristic
    counting a neighbourhood once; it must never fall when a run grows, so that the
    shortest run from a start is still its cheapest)."""
    best: tuple[float, int, int] | None = None
    for first, end in shortest_runs(sizes, costs, need):
        total = math.fsum(costs[first:end]) if run_cost is None else run_cost(first, end)
        if best is None or total < best[0]:
            best = (total, first, end)
    return best
