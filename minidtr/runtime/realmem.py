"""Measuring real memory beside the counted bytes: ``Runtime(measure_real=True)``.

The ledger counts what the allocator reserves: every resident buffer and, while a
kernel runs, the workspace its op declares. ``RealMemory`` measures what is really
allocated, so the two can be compared (``rt.stats()``, ``minidtr train
--measure-real``, docs/memory.md):

- on NumPy, with ``tracemalloc`` (NumPy reports every array buffer to it). Around
  every kernel (an op's, a rematerialization's, a constant's ``make_array``) it
  reads how far the traced bytes rose while the kernel ran. ``real_peak`` is the
  most bytes of arrays at once: the arrays resident before a kernel (the ledger's
  count, less what it reserved for that kernel) plus what the kernel allocated at
  its worst, its outputs and every temporary. ``traced_peak`` is what the process
  held at its worst: the bytes resident when the runtime was entered plus
  everything traced since (arrays and Python objects alike, the graph's metadata
  among them), kernels or not;
- on CuPy, the memory pool's peak (every device array is allocated from it, through
  the hook of ``backend.install_cuda_oom_handler``): the bytes resident at entry
  plus how far the pool's used bytes rose. Python objects are not on the device:
  ``traced_peak`` is the same figure.

Tracing every Python allocation makes a run slower (about 1.5-3x on the bundled
models), which is why it is asked for.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import backend

if TYPE_CHECKING:
    from .allocator import Allocator
    from .runtime import Runtime


class RealMemory:
    """The meter of one allocator while at least one measuring runtime is active on it."""

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.runtimes: list[Runtime] = []
        self.device = allocator.device
        self.started_tracing = False
        self.pool_meter: backend.PoolMeter | None = None
        entry = allocator.ledger.memory
        if self.device == "cuda":
            self.pool_meter = backend.PoolMeter()
        else:
            if not tracemalloc.is_tracing():
                tracemalloc.start()
                self.started_tracing = True
            self.base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
        self.entry = entry

    def add(self, runtime: Runtime) -> None:
        self.runtimes.append(runtime)
        self.note(self.allocator.ledger.memory, self.entry)

    def remove(self, runtime: Runtime) -> bool:
        """Stop measuring for ``runtime``; True when no runtime is left (the meter ends)."""
        self.fold()
        self.runtimes.remove(runtime)
        if self.runtimes:
            return False
        if self.pool_meter is not None:
            self.pool_meter.close()
        elif self.started_tracing:
            tracemalloc.stop()
        return True

    def note(self, arrays: int, traced: int) -> None:
        for runtime in self.runtimes:
            stats = runtime.stats_
            if stats.real_peak is None or arrays > stats.real_peak:
                stats.real_peak = arrays
            if stats.traced_peak is None or traced > stats.traced_peak:
                stats.traced_peak = traced

    def fold(self) -> None:
        """Take in the peak since the last kernel (what ran between kernels)."""
        if self.pool_meter is not None:
            peak = self.entry + self.pool_meter.growth()
            self.note(peak, peak)
        else:
            traced = self.entry + tracemalloc.get_traced_memory()[1] - self.base
            self.note(0, traced)

    def measure(self, run: Callable[[], Any], reserved: int) -> Any:
        """``run()``, a kernel for which the ledger has reserved ``reserved`` bytes (its
        outputs and workspace), measured; returns what it returns."""
        if self.pool_meter is not None:
            result = run()
            self.fold()
            return result
        before, peak = tracemalloc.get_traced_memory()
        self.note(0, self.entry + peak - self.base)
        tracemalloc.reset_peak()
        resident = self.allocator.ledger.memory - reserved
        result = run()
        peak = tracemalloc.get_traced_memory()[1]
        self.note(resident + peak - before, self.entry + peak - self.base)
        return result


def start(allocator: Allocator, runtime: Any) -> None:
    """Measure real memory for ``runtime`` (``measure_real``): the allocator's kernels then
    run through the meter (``measured_run_kernel``)."""
    if allocator.meter is None:
        allocator.meter = RealMemory(allocator)
        # an instance attribute over the method, for this allocator
        allocator.run_kernel = measured_run_kernel(allocator)
    allocator.meter.add(runtime)


def stop(allocator: Allocator, runtime: Any) -> None:
    """The end of ``start``: kernels run unmeasured again once no runtime measures."""
    if allocator.meter.remove(runtime):
        allocator.meter = None
        del allocator.run_kernel  # the method again


def measured_run_kernel(allocator: Allocator) -> Callable:
    """``Allocator.run_kernel`` measured by the allocator's meter: the allocator's own while
    a measuring runtime is active (an instance attribute over the method, so that the
    unmeasured path pays nothing for it)."""
    plain = type(allocator).run_kernel
    meter = allocator.meter

    def run_kernel(op: Any, device: str | None, arrays: list, metas: Any) -> tuple[Any, float]:
        reserved = allocator.kernel_workspace
        for shape, dtype in metas:
            size = dtype.itemsize
            for d in shape:
                size *= d
            reserved += size
        return meter.measure(lambda: plain(allocator, op, device, arrays, metas), reserved)

    return run_kernel


# What a kernel may allocate beyond the workspace its op declares, uncounted: NumPy's
# iterator buffers (a ufunc on operands it cannot walk as one flat run, fewer than
# ``numpy.getbufsize()`` elements of them, copies them through buffers: up to three
# operands of 8,192 elements of 8 bytes) and a few small arrays and Python objects.
KERNEL_SLACK = 3 * 8192 * 8 + 16 * 1024


class KernelRecord:
    """What one kernel allocated (``watch_kernels``): its op, the shapes of its inputs, the
    workspace it declared, and, measured, the bytes beyond its outputs at its worst
    (``extra``) and those it left allocated besides its outputs when it returned
    (``retained``: an array kept by the op, or an output that is a view of a larger one;
    and the Python objects of the ``count`` output arrays, about 100 bytes each)."""

    __slots__ = ("op", "shapes", "outputs", "count", "declared", "extra", "retained")

    def __init__(self, op, shapes, outputs, count, declared, extra, retained):
        self.op, self.shapes, self.outputs, self.count = op, shapes, outputs, count
        self.declared, self.extra, self.retained = declared, extra, retained

    def __repr__(self) -> str:
        return (
            f"{self.op}{self.shapes}: outputs {self.outputs:,}, declared {self.declared:,}, "
            f"extra {self.extra:,}, retained {self.retained:,}"
        )


class watch_kernels:  # noqa: N801 (used as a context manager, like a function)
    """Measure every kernel an allocator runs inside the ``with`` (NumPy, with
    tracemalloc): ``records`` gets a ``KernelRecord`` per kernel, each op's declared
    workspace next to what its kernel allocated. How tests/test_workspace.py checks that
    every op declares at least what it needs; write your op's ``workspace`` with it."""

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.records: list[KernelRecord] = []
        self.declared = 0

    def __enter__(self) -> watch_kernels:
        self.started = not tracemalloc.is_tracing()
        if self.started:
            tracemalloc.start()
        allocator, plain = self.allocator, type(self.allocator).run_kernel
        self.before = vars(allocator).get("run_kernel")
        inner = self.before or (lambda *a: plain(allocator, *a))

        def run_kernel(op: Any, device: str | None, arrays: list, metas: Any):
            outputs = sum(_nbytes(shape, dtype) for shape, dtype in metas)
            declared = allocator.kernel_workspace
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            result = inner(op, device, arrays, metas)
            now, peak = tracemalloc.get_traced_memory()
            shapes = tuple(tuple(a.shape) for a in arrays)
            extra, retained = peak - start - outputs, now - start - outputs
            count = len(metas)
            self.records.append(
                KernelRecord(op.name, shapes, outputs, count, declared, extra, retained)
            )
            return result

        allocator.run_kernel = run_kernel
        return self

    def __exit__(self, *exc) -> None:
        if self.before is None:
            del self.allocator.run_kernel
        else:
            self.allocator.run_kernel = self.before
        if self.started:
            tracemalloc.stop()


def _nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    size = dtype.itemsize
    for d in shape:
        size *= d
    return size
