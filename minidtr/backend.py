"""Array backends: NumPy on ``"cpu"``, CuPy on ``"cuda"``.

This is the only module that imports cupy. Ops receive the array module as
``xp`` and call only functions that NumPy and CuPy share; the few that differ
(scatter-add, erf, seeded generators, the device allocator) live here.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

DEVICES = ("cpu", "cuda")


def _import_cupy():
    try:
        import cupy
    except ImportError as error:
        raise RuntimeError(
            "device='cuda' needs CuPy and a CUDA GPU: pip install 'minidtr[gpu]'"
        ) from error
    return cupy


def xp_for(device: str):
    """The array module (numpy or cupy) that holds buffers on ``device``."""
    if device == "cpu":
        return np
    if device == "cuda":
        return _import_cupy()
    raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def is_device_array(array: Any) -> bool:
    return type(array).__module__.split(".")[0] == "cupy"


def to_device(array: Any, device: str):
    """Copy ``array`` (host or device) into a fresh buffer on ``device``."""
    if device == "cpu":
        return np.array(to_host(array), copy=True)
    return xp_for("cuda").array(array, copy=True)


def to_host(array: Any) -> np.ndarray:
    if isinstance(array, np.ndarray | np.generic):
        return np.asarray(array)
    return array.get()


def synchronize(xp) -> None:
    """Wait for queued device work (so a measured op time is the kernel's, not its launch's)."""
    if xp is not np and xp is not None:
        xp.cuda.get_current_stream().synchronize()


def _read_only_scalars(value: float) -> dict:
    table = {}
    for t in (np.float16, np.float32, np.float64):
        array = np.full((), value, t)
        array.flags.writeable = False
        table[np.dtype(t)] = array
    return table


# 0.0 and 1.0 as 0-d arrays of each NumPy float dtype, made once (see ``zero``, ``one``)
_NUMPY_ZEROS = _read_only_scalars(0.0)
_NUMPY_ONES = _read_only_scalars(1.0)


def zero(xp, dtype):
    """0 as a 0-d array of ``dtype``, an operand for a kernel (``where``, ``maximum``): on
    NumPy's float dtypes one read-only array made once, which saves making one per call."""
    if xp is np:
        array = _NUMPY_ZEROS.get(dtype)
        if array is not None:
            return array
    return xp.zeros((), dtype=dtype)


# NumPy's maximum against a 0-d zero runs an element loop that is not vectorized, about
# four times slower than against an array of zeros (float32 and float64, NumPy 2.4); so
# ``relu`` takes a large contiguous array as rows of this many against one row of zeros
RELU_BLOCK = 1024
_RELU_ZEROS = {np.dtype(t): np.zeros(RELU_BLOCK, t) for t in (np.float32, np.float64)}
for _zeros in _RELU_ZEROS.values():
    _zeros.flags.writeable = False


def relu(xp, x, out=None):
    """``maximum(x, 0)`` (a NaN stays NaN), into ``out`` if given (``x`` itself allowed).
    On NumPy a float32 or float64 array of at least four blocks whose memory is one dense
    block (C-contiguous, or so with its axes permuted: the batch-last images of the window
    kernels), with ``out`` laid out alike, is taken in memory order by rows of
    ``RELU_BLOCK`` against a row of zeros, its tail against a 0-d zero: the same maximum
    of each element, so the same bits, 2.5 to 3 times faster."""
    zeros = _RELU_ZEROS.get(x.dtype) if xp is np else None
    if zeros is None or x.size < 4 * RELU_BLOCK:
        return xp.maximum(x, zero(xp, x.dtype), out=out)
    if out is None:
        out = np.empty_like(x)  # (x's layout)
    order = memory_order(x)
    if order is None or not out.transpose(order).flags.c_contiguous:
        return np.maximum(x, zero(np, x.dtype), out=out)
    flat, into = x.transpose(order).reshape(-1), out.transpose(order).reshape(-1)
    whole = x.size - x.size % RELU_BLOCK
    rows = (-1, RELU_BLOCK)
    np.maximum(flat[:whole].reshape(rows), zeros, out=into[:whole].reshape(rows))
    if whole < x.size:
        np.maximum(flat[whole:], zero(np, x.dtype), out=into[whole:])
    return out


def memory_order(x: np.ndarray) -> tuple[int, ...] | None:
    """The permutation of ``x``'s axes that lists them in memory order (largest stride
    first) when ``x`` then is C-contiguous (its memory one dense block), else None."""
    if x.flags.c_contiguous:
        return tuple(range(x.ndim))
    order = tuple(sorted(range(x.ndim), key=lambda axis: -abs(x.strides[axis])))
    return order if x.transpose(order).flags.c_contiguous else None


def one(xp, dtype):
    """1.0 as an operand of a kernel on ``dtype`` arrays: on NumPy a 0-d array of that dtype,
    which it takes about 0.4 µs faster per call than a Python float (a weak scalar, first
    promoted to the array's dtype: the floats computed are the same); elsewhere 1.0."""
    if xp is np:
        return _NUMPY_ONES.get(dtype, 1.0)
    return 1.0


def as_strided(xp, x, shape: tuple[int, ...], strides: tuple[int, ...], writeable: bool = False):
    """A strided view of ``x`` (no copy): windows of an image (read-only) for pooling, the
    rows of a run for the shifted products of convolution (``ops/shift.py``)."""
    if xp is np:
        return np.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=writeable)
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def scatter_add(xp, target, index, values) -> None:
    """``target[index] += values`` with repeated indices accumulated (in place).

    On the GPU the accumulation runs on the host: CuPy's scatter-add uses atomic adds,
    whose order (and so the floating-point result) changes from run to run, and a
    recomputed gradient must be bit-identical to the first one.
    """
    if xp is np:
        add_at(target, index, values)
        return

    def on_host(k):
        return k.get() if is_device_array(k) else k

    host = target.get()
    host_index = tuple(map(on_host, index)) if isinstance(index, tuple) else on_host(index)
    add_at(host, host_index, values.get())
    target[...] = xp.asarray(host)


ADD_AT_CHUNK = 8192  # flat indices ``add_at`` makes at a time (64 KB)
ADD_AT_FLAT = 1024  # values from which the flat scatter-add is the faster (about 5 us)


def add_at(target: np.ndarray, index: Any, values: np.ndarray) -> None:
    """``np.add.at(target, index, values)``: the same sums in the same order, so the same
    bits, and the same errors. When one integer array picks rows of a contiguous target
    (a gradient of indexing or of an embedding), the rows are added as a scatter-add
    over the flattened target, element by element in index order as ``np.add.at`` adds
    them, which NumPy runs on its fast one-dimensional path: from about a thousand
    values, where its fixed cost pays (3.6 times faster for 18,000 values). The flat
    indices are made ``ADD_AT_CHUNK`` at a time, in one buffer, and values not laid out
    contiguously (a gradient broadcast by a sum) are copied only when that few, so the
    kernel's scratch memory stays within NumPy's own buffers' size. An index out of
    range leaves ``target`` as it was and raises ``np.add.at``'s error."""
    rows = index[0] if type(index) is tuple and len(index) == 1 else index
    count = target.shape[0] if target.ndim else 0
    width = target.size // count if count else 0
    if (
        values.size < ADD_AT_FLAT
        or not width
        or type(rows) is not np.ndarray
        or not (rows.dtype.kind == "i" or rows.dtype.kind == "u" and rows.dtype.itemsize < 8)
        or target.ndim < 2
        or not target.flags.c_contiguous
        or values.dtype != target.dtype
        or values.shape != rows.shape + target.shape[1:]
        or not values.flags.c_contiguous
        and values.size > ADD_AT_CHUNK
    ):
        np.add.at(target, index, values)
        return
    rows = rows.reshape(-1)
    step = max(1, ADD_AT_CHUNK // width)
    if rows.size > step and not -count <= int(rows.min()) <= int(rows.max()) < count:
        np.add.at(target, index, values)  # (raises before adding anything)
        return
    flat_target = target.reshape(-1)
    flat_values = np.ascontiguousarray(values).reshape(-1)
    columns = np.arange(width, dtype=np.intp)
    buffer = np.empty((min(step, rows.size), width), dtype=np.intp)
    for start in range(0, rows.size, step):
        chunk = rows[start : start + step]
        flat = buffer[: chunk.size]
        np.multiply(chunk[:, None], width, out=flat, dtype=np.intp)  # (not in int8)
        flat += columns
        try:  # (a row out of range puts every one of its flat indices out of range)
            np.add.at(flat_target, flat.reshape(-1), flat_values[start * width :][: flat.size])
        except IndexError:
            np.add.at(target, index, values)  # one chunk, nothing added: its error
            raise


def erf(xp, x, out=None):
    """The error function, from SciPy (CPU) or cupyx (GPU); NumPy has none. With ``out``
    (``x`` itself allowed) the result goes there."""
    if xp is np:
        try:
            from scipy.special import erf as scipy_erf
        except ImportError as error:
            raise RuntimeError(
                "the exact erf (gelu with approximate='none') needs SciPy: "
                "pip install 'minidtr[scipy]', or use approximate='tanh'"
            ) from error
        if out is not None:
            return scipy_erf(x, out=out)
        return scipy_erf(x).astype(x.dtype, copy=False)
    from cupyx.scipy.special import erf as cupy_erf

    return cupy_erf(x) if out is None else cupy_erf(x, out=out)


def erf_is_slow(xp, dtype) -> bool:
    """Whether ``erf`` is SciPy's scalar loop on float32 values (about 11 ns a value on
    the CPU), where a polynomial in array operations is several times faster at float32's
    precision (``ops/normal.py``); float64 keeps SciPy's double-precision erf."""
    return xp is np and dtype == np.float32


def generator(xp, seed: int):
    """A random generator whose stream depends only on ``seed`` (and the backend), to
    draw from at once: on NumPy it is ``np.random.default_rng(seed)``'s stream, drawn
    from a bit generator of this thread set to that seed's starting state. Each dropout
    seed is drawn from again by the backward and by every recompute, and seeding (a
    ``SeedSequence``) costs five times as much as setting a state, so the starting
    states of recent seeds are kept, in ``_SEED_SLOTS`` slots by the seed's hash: a
    fixed amount of memory, and a seed that finds its slot taken is seeded again."""
    if xp is not np:
        return xp.random.default_rng(seed)
    slot = hash(seed) % _SEED_SLOTS
    kept = _seed_states[slot]
    if kept is None or kept[0] != seed:
        state = np.random.PCG64(seed).state["state"]
        kept = _seed_states[slot] = (seed, state["state"], state["inc"])
    bits = getattr(_thread_bits, "pcg64", None)
    if bits is None:
        bits = _thread_bits.pcg64 = np.random.PCG64(0)
    bits.state = {
        "bit_generator": "PCG64",
        "state": {"state": kept[1], "inc": kept[2]},
        "has_uint32": 0,
        "uinteger": 0,
    }
    return np.random.Generator(bits)


UNIFORM_CHUNK = 16384  # float32 uniforms drawn at once on NumPy


def uniform_chunks(xp, seed: int, size: int):
    """The first ``size`` float32 uniforms of ``generator(xp, seed)``'s stream, as
    arrays of ``UNIFORM_CHUNK`` at most (dropout's mask, a chunk at a time: scratch of
    64 KB, not of the tensor's size). NumPy's stream splits: each draw goes on where the
    last stopped, so the chunks are the stream. CuPy's is drawn at once."""
    rng = generator(xp, seed)
    step = UNIFORM_CHUNK if xp is np else max(size, 1)
    for start in range(0, size, step):
        yield rng.random(min(step, size - start), dtype=np.float32)


def uniform_chunk_size(device: str, size: int) -> int:
    """How many uniforms ``uniform_chunks`` draws at once on ``device``."""
    return min(size, UNIFORM_CHUNK) if device == "cpu" else size


_SEED_SLOTS = 64
_seed_states: list[tuple[int, int, int] | None] = [None] * _SEED_SLOTS  # seed, state, inc
_thread_bits = threading.local()


# The device pool's limit under a budget: the budget plus this share of it, the room left
# for what the budget does not count (blocks rounded up to 512 bytes, library scratch). A
# kernel that would pass it makes room the way the budget does, by eviction (the hook of
# ``install_cuda_oom_handler``): a real out-of-memory error can only come past the budget.
POOL_SLACK = 0.10
_POOL_METERS: list[PoolMeter] = []  # measuring the device pool's peak (``PoolMeter``)


class PoolMeter:
    """The peak of the CuPy memory pool's used bytes while it is open (every allocation
    through the hook of ``install_cuda_oom_handler`` takes a reading)."""

    def __init__(self):
        self.pool = _import_cupy().get_default_memory_pool()
        self.start = self.peak = self.pool.used_bytes()
        _POOL_METERS.append(self)

    def growth(self) -> int:
        """How far the used bytes rose above what they were at the start, at their worst."""
        return self.peak - self.start

    def close(self) -> None:
        _POOL_METERS.remove(self)


def limit_device_pool(budget: int | None) -> None:
    """Limit the CuPy memory pool, from which every device array and every kernel's
    temporaries are allocated, to ``budget`` plus ``POOL_SLACK`` (None: no limit)."""
    pool = _import_cupy().get_default_memory_pool()
    pool.set_limit(size=0 if budget is None else int(budget * (1 + POOL_SLACK)) + 1)


def install_cuda_oom_handler(free_bytes: Callable[[int], bool]) -> None:
    """Route CuPy's allocations through a hook that, on out-of-memory (the device's, or
    the pool's limit under a budget: ``limit_device_pool``), calls
    ``free_bytes(nbytes)`` (which evicts storages) and retries while it reports
    progress; when nothing is left to evict, Python's cycle collector runs once
    (arrays held by unreachable reference cycles are freed only by it) before
    the error is raised. The accounting and the eviction policy stay in the runtime.
    While a ``PoolMeter`` is open, each allocation reads the pool's used bytes."""
    cupy = _import_cupy()
    pool = cupy.get_default_memory_pool()

    def malloc(nbytes: int):
        collected = False
        while True:
            try:
                memory = pool.malloc(nbytes)
                if _POOL_METERS:
                    used = pool.used_bytes()
                    for meter in _POOL_METERS:
                        meter.peak = max(meter.peak, used)
                return memory
            except cupy.cuda.memory.OutOfMemoryError:
                pool.free_all_blocks()
                if free_bytes(nbytes):
                    continue
                if collected:
                    raise
                collected = True
                gc.collect()
                pool.free_all_blocks()

    cupy.cuda.set_allocator(malloc)
