"""The audit (``Runtime(audit=True)``): a recomputation must give the bits of the first
computation, and a kernel may neither write into its inputs nor change its op.

DTR replaces an evicted value by running its recipe again, so it relies on every op
being a pure function of its inputs and its static attributes (docs/ops.md). An op that
is not (a forward that draws from NumPy's global generator, a kernel that writes into
its input, state kept on a shared op object) makes a budgeted run differ from an
unbounded one far from where it happened: a loss differs, many ops later. The audit
checks the contract where it breaks, and names the op:

- when an op's outputs are first computed, each is fingerprinted (``Fingerprint``): its
  bytes are kept (up to ``COPY_LIMIT`` bytes, else their CRC-32), with the op, its
  attributes then and, for an op of the user's (not one of minidtr's own), where it was
  applied (``call_site``: the first frame outside minidtr's machinery, the user's module
  and line);
- every replay (``Rematerializer.replay``) compares each output with its fingerprint
  before anything is refilled, and raises ``RecomputeMismatch`` at the first
  difference: the op, where it was applied, the storage, the output index and the first
  differing element;
- while a kernel runs, its NumPy inputs are read-only, so a write raises at once
  (``InputMutation``, naming the op; CuPy arrays have no such flag, so their bytes are
  compared before and after the kernel instead), and its op's attributes must be the
  same after it as before, what its containers hold included (``OpStateChanged``).

While an active runtime audits, every op takes the general path (``Allocator.
compute_general``): the accelerator's hot path declines, as it does for an event log.
The audit changes no decision. Fingerprints are held weakly, by storage: they go when
the storage's metadata goes.
"""

from __future__ import annotations

import contextlib
import os
import reprlib
import sys
import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backend
from .errors import InputMutation, OpStateChanged, RecomputeMismatch

# Audit under every runtime, as if each had ``audit=True`` (``MINIDTR_AUDIT=1`` for the
# pytest plugin): the project's own tests run so to show the audit raises no false alarm.
EVERYWHERE = False

# Outputs up to this many bytes keep a copy of their bytes (the first differing element
# can then be named); larger ones keep their CRC-32 only.
COPY_LIMIT = 1 << 20

# Modules whose frames are minidtr's machinery, not where an op was applied; contextlib
# and functools are the decorators' frames (``@no_grad()``).
MACHINERY = (
    "minidtr.ops",
    "minidtr.runtime",
    "minidtr.nn",
    "minidtr.optim",
    "minidtr.autograd",
    "minidtr.tensor",
    "minidtr.modes",
    "minidtr.testing.gradients",
    "contextlib",
    "functools",
)


def check_outputs(
    op: Any, metas: Sequence[tuple], results: Any, inputs: Sequence = (), xp: Any = None
) -> None:
    """Raise if what a kernel returned (an array, or a tuple of ``op.n_outputs``) differs
    from the (shape, dtype) its op declared, or if an output shares memory with an input
    or another output (``allocator.CHECK_OPS``: the test suite checks every kernel so;
    ``Op.check_results``: ops defined outside minidtr, always)."""
    n = op.n_outputs
    if n != 1 and not (type(results) in (tuple, list) and len(results) == n):
        raise TypeError(
            f"{op.name}: forward returned {_returned(results)}, not a tuple of its "
            f"{n} outputs (n_outputs = {n})"
        )
    outputs = (results,) if n == 1 else results
    if len(metas) != n:
        check_metas(op, metas)
    for i, ((shape, dtype), r) in enumerate(zip(metas, outputs, strict=True)):
        if not (hasattr(r, "shape") and hasattr(r, "dtype") and hasattr(r, "flags")):
            raise TypeError(
                f"{op.name}: forward returned {_returned(r)} as output {i}, not an array "
                "of the array module it was given (xp)"
            )
        if r.shape != shape or r.dtype != dtype:
            check_metas(op, metas)
            raise AssertionError(
                f"{op.name}: output {i} is {r.shape} {r.dtype}, but the op declared "
                f"{shape} {dtype} (a bug in the op)"
            )
    if xp is not None and not op.is_view:
        check_own_memory(op, outputs, inputs, xp)


def check_own_memory(op: Any, outputs: Sequence, inputs: Sequence, xp: Any) -> None:
    """Each output must own its memory: an output that is an input (or a view of one, or
    of another output) would be counted twice, freed with the other's eviction, or
    changed through it; one that is a view of a larger scratch array would keep all of
    it alive while the budget counts the view. (Views are ops of their own,
    ``Op.is_view``.)"""
    for i, r in enumerate(outputs):
        others = [("input", j, a) for j, a in enumerate(inputs)]
        others += [("output", j, o) for j, o in enumerate(outputs[:i])]
        for what, j, other in others:
            if r.size and other.size and xp.may_share_memory(r, other):
                raise AssertionError(
                    f"{op.name}: output {i} ({r.shape} {r.dtype}) shares memory with {what} "
                    f"{j} ({other.shape} {other.dtype}): forward returned it, or a view "
                    "of it; return a new array (a copy: xp.array(x)), so that each value "
                    "owns its memory (a bug in the op)"
                )
        owner = r
        while getattr(owner, "base", None) is not None:
            owner = owner.base
        held = getattr(owner, "nbytes", r.nbytes)
        if held > r.nbytes:
            raise AssertionError(
                f"{op.name}: output {i} ({r.shape} {r.dtype}, {r.nbytes:,} bytes) is a view "
                f"of a {held:,}-byte array that it keeps alive: the budget would count "
                f"{r.nbytes:,} bytes; return a new array (a copy: xp.array(x)), so that "
                "each value owns its memory (a bug in the op)"
            )


def check_metas(op: Any, metas: Any) -> None:
    """Raise a clear error if ``infer`` returned anything but a list of ``op.n_outputs``
    (shape, dtype) pairs (a tuple of ints and a NumPy dtype each)."""
    n = op.n_outputs
    sequence = (list, tuple)
    if not (
        type(metas) in sequence
        and len(metas) == n
        and all(type(m) in sequence and len(m) == 2 and _is_meta(*m) for m in metas)
    ):
        raise TypeError(
            f"{op.name}: infer must return a list of {n} (shape, dtype) pair(s), one per "
            f"output, as [((2, 3), np.dtype('float32'))]; it returned {metas!r}"
        ) from None


def _is_meta(shape: Any, dtype: Any) -> bool:
    return (
        type(shape) is tuple and all(type(d) is int for d in shape) and isinstance(dtype, np.dtype)
    )


def _returned(value: Any) -> str:
    kind = type(value).__name__
    return f"a {kind} of {len(value)}" if type(value) in (tuple, list) else f"a {kind}"


IMPURE_HINT = (
    "An op must compute the same bits from the same inputs and static attributes every "
    "time; the usual cause is an impure user op (a forward that draws from a global random "
    "generator such as np.random, reads state that changes between calls, or keeps state "
    "on the op object), not minidtr."
)


OWN_OP_HINT = (
    "minidtr's own ops compute the same bits from the same inputs, and the inputs of a "
    "recomputation are checked before it: unless a kernel of its backend is "
    "nondeterministic, this is a bug in minidtr; please report it with the program."
)


def call_site() -> Site:
    """Where the op being run was applied: the first frame outside minidtr's machinery
    (``MACHINERY``)."""
    frame = sys._getframe(1)
    machinery = _MACHINERY_CODE
    while frame is not None:
        code = frame.f_code
        inside = machinery.get(code)
        if inside is None:
            inside = machinery[code] = frame.f_globals.get("__name__", "").startswith(MACHINERY)
        if not inside:
            return Site(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return Site("?", 0, "?")


_MACHINERY_CODE: dict[Any, bool] = {}  # code object -> whether its module is in MACHINERY


@dataclass(frozen=True, slots=True)
class Site:
    """A place in the user's code (formatted only when an error is raised)."""

    path: str
    line: int
    function: str

    def __str__(self) -> str:
        path = self.path
        if os.path.isabs(path) and not os.path.relpath(path).startswith(".."):
            path = os.path.relpath(path)
        return f"{path}:{self.line} in {self.function}"


def attributes(op: Any) -> dict[str, Any]:
    """The op's own attributes (a shallow copy of its ``__dict__``; empty for slots)."""
    own = getattr(op, "__dict__", None)
    return dict(own) if own is not None else {}


def host_array(array: Any) -> np.ndarray:
    """``array`` on the host, C-contiguous (a copy of a device array), of its own shape
    (``np.ascontiguousarray`` would make a 0-d array 1-d)."""
    if not isinstance(array, np.ndarray):
        array = backend.to_host(array)
    return np.require(array, requirements="C")


def bytes_of(array: np.ndarray) -> np.ndarray:
    """A C-contiguous host array's bytes, as a flat uint8 view."""
    return array.reshape(-1).view(np.uint8)


def digest(array: np.ndarray) -> int:
    """CRC-32 of a C-contiguous host array's bytes."""
    return zlib.crc32(bytes_of(array))


def describe_difference(a: np.ndarray, b: np.ndarray) -> str:
    """Where two arrays first differ, bit for bit: shapes, dtypes, the first element."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    where = f"shape {a.shape} {a.dtype}"
    if a.dtype.itemsize not in (1, 2, 4, 8) or a.dtype.kind not in "biuf":
        return f"{where}: the bytes differ"
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    bits_a = np.ascontiguousarray(a).view(unsigned)
    bits_b = np.ascontiguousarray(b).view(unsigned)
    differ = np.argwhere(np.atleast_1d(bits_a != bits_b))
    if len(differ) == 0:
        return f"{where}: the bytes differ"
    index = tuple(int(i) for i in differ[0]) if a.ndim else ()
    first = f"{a[index]!s} vs {b[index]!s}"
    if a.dtype.kind == "f" and (a[index] == b[index] or np.isnan(a[index])):
        first += f" (bits {int(bits_a[index]):#x} vs {int(bits_b[index]):#x})"
    if a.ndim == 0:
        return f"{where}: {first}"
    return (
        f"{where}: {len(differ)} of {a.size} elements differ, the first at index {index}: {first}"
    )


@dataclass(slots=True)
class Application:
    """One application of an op, as the audit saw it when its outputs were first computed."""

    op: Any
    site: Site | None  # None for minidtr's own ops
    attributes: dict[str, Any]

    def describe(self) -> str:
        return describe_op(self.op, self.site)

    def changed_attributes(self) -> str:
        """The op's attributes that differ now from when it was applied, as a sentence."""
        now = attributes(self.op)
        changed = [
            f"{name!r} ({reprlib.repr(self.attributes.get(name))} then, "
            f"{reprlib.repr(now.get(name))} now)"
            for name in sorted(set(self.attributes) | set(now))
            if not _same(self.attributes.get(name), now.get(name))
        ]
        if not changed:
            return ""
        return f" The op's attributes changed since it was applied: {', '.join(changed)}."


def describe_op(op: Any, site: Site | None) -> str:
    cls = type(op)
    name = getattr(op, "name", cls.__name__)
    where = "one of minidtr's own ops" if site is None else f"applied at {site}"
    return f"op {name!r} ({cls.__module__}.{cls.__qualname__}, {where})"


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # arrays and other values whose == is not one bool
        return False


@dataclass(slots=True)
class Fingerprint:
    """What the first computation of one output gave: its bytes (``copy``, up to
    ``COPY_LIMIT``) or their CRC-32, and the application that made it."""

    application: Application
    shape: tuple[int, ...]
    dtype: np.dtype
    crc: int
    copy: np.ndarray | None

    @classmethod
    def of(cls, application: Application, array: Any) -> Fingerprint:
        if type(array) is np.ndarray and array.nbytes <= COPY_LIMIT:  # the common case
            return cls(application, array.shape, array.dtype, 0, array.copy())
        host = host_array(array)
        copy = np.array(host, copy=True) if host.nbytes <= COPY_LIMIT else None
        crc = 0 if copy is not None else digest(host)
        return cls(application, host.shape, host.dtype, crc, copy)

    def difference(self, array: Any) -> str | None:
        """None when ``array`` has the first computation's bits, else what differs."""
        host = host_array(array)
        if host.shape != self.shape or host.dtype != self.dtype:
            return f"shape/dtype {self.shape} {self.dtype} vs {host.shape} {host.dtype}"
        if self.copy is not None:
            if np.array_equal(bytes_of(self.copy), bytes_of(host)):
                return None
            return describe_difference(self.copy, host)
        crc = digest(host)
        if crc == self.crc:
            return None
        return (
            f"shape {self.shape} {self.dtype}: the bytes differ (CRC-32 {self.crc:#010x} vs "
            f"{crc:#010x}; outputs over {COPY_LIMIT:,} bytes keep only a CRC, so the first "
            "differing element is not known)"
        )


class Audit:
    """An allocator's audit: the fingerprints of the outputs computed while auditing, by
    storage (held weakly), and the guarded kernel runs."""

    def __init__(self) -> None:
        self.prints: weakref.WeakKeyDictionary[Any, Fingerprint] = weakref.WeakKeyDictionary()
        # ops whose attributes a first kernel run left as they were: a kernel that keeps
        # state on its op does so every time (replays are watched every time)
        self.watched: weakref.WeakSet[Any] = weakref.WeakSet()

    def run(
        self,
        run_kernel: Callable[..., tuple[Any, float]],
        op: Any,
        device: str | None,
        arrays: list,
        metas: Sequence[tuple],
    ) -> tuple[Any, float]:
        """``run_kernel(op, device, arrays, metas)`` (``Allocator.run_kernel``), guarded
        (the op's attributes at its first run only)."""
        try:
            watch = op not in self.watched
        except TypeError:  # an op without weak references: watched every time
            watch = True
        if watch or device != "cpu":  # its first run, or arrays on a device: the whole guard
            results = guarded(op, device, arrays, lambda: run_kernel(op, device, arrays, metas))
            with contextlib.suppress(TypeError):
                self.watched.add(op)
            return results
        frozen = freeze(arrays)  # what ``guarded`` does for NumPy inputs, inline
        try:
            return run_kernel(op, device, arrays, metas)
        except ValueError as error:
            if frozen and "read-only" in str(error):
                raise mutation(op, f"one of its inputs ({error})") from error
            raise
        finally:
            if frozen:
                thaw(frozen)

    def computed(self, op: Any, outputs: Sequence[Any]) -> None:
        """Fingerprint the outputs (storages) of an op that just ran for the first time."""
        # where it was applied: for the user's ops (a walk of the stack, the audit's main
        # cost on small ops), not for minidtr's own
        own = type(op).__module__.startswith("minidtr.")
        application = Application(op, None if own else call_site(), attributes(op))
        for storage in outputs:
            if storage.buffer is not None:
                self.prints[storage] = Fingerprint.of(application, storage.buffer)

    def replay(self, recipe: Any, xp: Any, arrays: list) -> Any:
        """Run a recipe's op again (guarded) and check every output that has a fingerprint;
        returns what ``op.forward`` returned."""
        op = recipe.op
        results = guarded(op, recipe.device, arrays, lambda: op.forward(xp, *arrays))
        outputs = (results,) if op.n_outputs == 1 else results
        for index, (ref, result) in enumerate(zip(recipe.outputs, outputs, strict=True)):
            storage = ref()
            record = self.prints.get(storage) if storage is not None else None
            if record is None:
                continue
            difference = record.difference(result)
            if difference is not None:
                application = record.application
                hint = IMPURE_HINT if application.site is not None else OWN_OP_HINT
                raise RecomputeMismatch(
                    f"recomputing {application.describe()} gave other bits than its first "
                    f"computation: output {index} (storage #{storage.id}): {difference}."
                    f"{application.changed_attributes()} {hint}",
                    op,
                    str(application.site or ""),
                )
        return results


def audit_for(allocator: Any) -> Audit | None:
    """The allocator's audit while an active runtime audits (its own, kept while so), else
    None; never for the simulator's allocators (no device, no values)."""
    if allocator.device is None:
        return None
    if not EVERYWHERE and not any(runtime.audit for runtime in allocator.runtimes):
        return None
    return allocator.audit or Audit()


def guarded(op: Any, device: str | None, arrays: list, kernel: Callable[[], Any]) -> Any:
    """Run ``kernel()`` with ``arrays`` (its inputs) read-only and ``op``'s attributes
    watched; raise ``InputMutation`` or ``OpStateChanged`` naming the op."""
    if device is None:  # the simulator's placeholders: no values to guard
        return kernel()
    own = getattr(op, "__dict__", None)
    before = dict(own) if own else None
    held = contents(own) if own else None
    frozen = freeze(arrays)
    on_device = [
        (i, array, digest(host_array(array)))
        for i, array in enumerate(arrays)
        if not isinstance(array, np.ndarray) and backend.is_device_array(array)
    ]
    try:
        results = kernel()
    except ValueError as error:
        if frozen and "read-only" in str(error):
            raise mutation(op, f"one of its inputs ({error})") from error
        raise
    finally:
        thaw(frozen)
    for i, array, crc in on_device:
        if digest(host_array(array)) != crc:
            raise mutation(op, f"its input {i}")
    if own and not _unchanged(before, own, held) or not own and before:
        names = changed_names(before or {}, own or {}, held or {})
        site = call_site()
        raise OpStateChanged(
            f"{describe_op(op, site)} changed the op object's own attributes "
            f"{', '.join(map(repr, names))} while its kernel ran: an op holds only static "
            "attributes, shared by every application of it (its recomputations, other "
            "calls); keep what backward needs in retain_inputs/retain_outputs instead.",
            op,
            str(site),
        )
    return results


def freeze(arrays: list) -> list[np.ndarray]:
    """Make the writeable NumPy arrays among ``arrays`` read-only; returns them."""
    frozen = []
    for array in arrays:
        if (type(array) is np.ndarray or isinstance(array, np.ndarray)) and array.flags.writeable:
            array.setflags(write=False)
            frozen.append(array)
    return frozen


def thaw(frozen: list[np.ndarray]) -> None:
    """Make the arrays writeable again; a view of another of them only once its base is."""
    while frozen:
        waiting = []
        for array in frozen:
            try:
                array.setflags(write=True)
            except ValueError:  # its base is still read-only
                waiting.append(array)
        if len(waiting) == len(frozen):
            raise RuntimeError("the audit could not make its inputs writeable again")
        frozen = waiting


def _unchanged(
    before: dict[str, Any] | None, now: dict[str, Any], held: dict[str, list] | None
) -> bool:
    if before is None or len(before) != len(now):
        return False
    for name, value in now.items():  # noqa: SIM110  (a loop: no generator per kernel)
        if before.get(name, _unchanged) is not value:
            return False
    return not held or all(_same_contents(flat, flatten(now[name])) for name, flat in held.items())


# Mutable containers whose contents the audit compares (``contents``): state kept in
# ``self.saved["x"] = x`` changes no attribute's identity. Tuples are looked into for the
# containers they hold.
CONTAINERS = (list, dict, set, bytearray, tuple)

# How deep the audit looks into nested containers (a dict of lists is 2 deep), and how
# many items of each it keeps: a change further in goes unseen.
CONTENTS_DEPTH = 3
CONTENTS_ITEMS = 256


def contents(own: dict[str, Any]) -> dict[str, list]:
    """The contents of the op's attributes that are containers, by name (``flatten``);
    empty when it has none, the usual case."""
    return {name: flatten(value) for name, value in own.items() if type(value) in CONTAINERS}


def flatten(value: Any, depth: int = CONTENTS_DEPTH) -> list:
    """A container's items, and those of the containers in it down to ``depth``, in one
    list: each container's length, then its items (a dict's keys and values); held by
    reference, so nothing is copied and no object dies to have its id reused."""
    flat: list = [len(value)]
    items = value.items() if type(value) is dict else value
    for count, item in enumerate(items):
        if count == CONTENTS_ITEMS:
            break
        if type(value) is dict:
            flat.append(item[0])
            item = item[1]
        flat.append(item)
        if depth > 1 and type(item) in CONTAINERS:
            flat.extend(flatten(item, depth - 1))
    return flat


def _same_contents(before: list, now: list) -> bool:
    """Whether two ``flatten`` lists hold the same objects (lengths compared by value)."""
    if len(before) != len(now):
        return False
    for a, b in zip(before, now, strict=True):
        if a is not b and not (type(a) is int and type(b) is int and a == b):
            return False
    return True


def changed_names(before: dict[str, Any], now: dict[str, Any], held: dict[str, list]) -> list[str]:
    """The names of the attributes that are other objects now, or whose contents changed."""
    return sorted(
        name
        for name in before.keys() | now.keys()
        if before.get(name) is not now.get(name)
        or name in held
        and not _same_contents(held[name], flatten(now[name]))
    )


def mutation(op: Any, what: str) -> InputMutation:
    site = call_site()
    return InputMutation(
        f"{describe_op(op, site)} wrote into {what} while its kernel ran: a kernel must leave "
        "its inputs as they are (each is a value of its own, which other ops read and its "
        "recipe recomputes as it was); write into a new array (y = x * 2, not x *= 2).",
        op,
        str(site),
    )
