"""``RuntimeOptions``: a runtime's settings in one frozen object, with their defaults and checks.

``md.Runtime(budget=..., heuristic=...)`` builds one from its keywords;
``Runtime.from_options`` takes one; ``TrainConfig``, the simulator (``simulate``,
``Replayer``, ``sweep``) and both command lines (``minidtr train``, ``minidtr sim``)
carry one instead of passing the settings one keyword at a time. The checks run when
the object is made, so a bad setting is reported before any work starts.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backend import DEVICES

DEALLOC_POLICIES = ("eager", "banish", "ignore")
COST_MODELS = ("time", "flops")
FITS = ("bytes", "contiguous")
PLACEMENTS = ("best", "first", "split")
# The default thrash guard (see docs/cli.md): above what the runs the docs call trainable
# cost (up to about 3.3x in the cost model, 3.6x in wall time), far below what thrashing
# runs reach.
DEFAULT_MAX_SLOWDOWN = 4.0
DEFAULT_MAX_WALL_SLOWDOWN = 10.0
MAX_BUDGET = 2**63 - 1  # bytes: what an int64 holds


def check_budget(value: Any) -> int | None:
    """``value`` as a budget: None, or a number of bytes >= 0 that fits in int64 (rounded
    down to a whole byte)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"budget must be a number of bytes or None, got {type(value).__name__} {value!r}"
        )
    # a Python int or float from here on: a NumPy float16 budget compared with 2**63 overflowed
    value = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not math.isfinite(value):
        raise ValueError(f"budget must be a finite number of bytes or None, got {value}")
    if value < 0:
        raise ValueError(f"budget must be >= 0 bytes or None, got {value}")
    if value > MAX_BUDGET:
        raise ValueError(f"budget must be at most {MAX_BUDGET:,} bytes (2**63 - 1), got {value:g}")
    if 0 < value < 1:
        raise ValueError(
            f"budget is a number of bytes, got {value}: for a fraction of the unbounded peak, "
            "measure the peak first (md.Runtime().stats()['peak_memory']) and give "
            "int(fraction * peak), or use minidtr train --ratio"
        )
    return int(value)  # a fraction of a byte is rounded down: 0.3 * peak is a fine budget


def check_limit(name: str, value: Any) -> float | None:
    """A thrash limit: None (no limit) or a finite or infinite number > 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number > 1 or None, got {type(value).__name__}")
    if math.isnan(value) or value <= 1.0:
        raise ValueError(
            f"{name} must be > 1 (a slowdown: 2 means twice as slow) or None to disable "
            f"the guard, got {value}"
        )
    return float(value)


@dataclass(frozen=True)
class RuntimeOptions:
    """The settings of a ``Runtime``; each field is a keyword of ``md.Runtime``.

    budget: bytes, a hard limit on resident bytes; None = unbounded. A number that is
        not whole is rounded down to whole bytes (``0.3 * peak`` is a fine budget);
        one between 0 and 1 is refused, as a ratio given where bytes were meant.
    heuristic: a name from ``minidtr.runtime.heuristics`` (dtr, dtr_eq, dtr_local,
        msps, lru, size, random, or an ablation-grid name), or an object with a
        ``name`` (a string) and ``score(storage, context)`` (lower = evicted first). The name is
        checked where it is used (a live ``Runtime`` refuses the simulator's trace
        heuristics, which ``simulate`` accepts).
    dealloc: what happens when the last reference to a storage dies:
        ``eager`` evicts it (metadata kept while evicted children may need it),
        ``banish`` frees it for good and makes its children unevictable,
        ``ignore`` leaves it resident until the heuristic evicts it.
    cost: ``time`` (measured ns), ``flops`` (a deterministic estimate from
        each op's flop and byte counts) or ``f(op, in_metas, out_metas) -> float``,
        a finite number >= 0 (anything else is a ``ValueError`` naming the op).
    sample: score only about sqrt(n) candidates per eviction (random stride).
    min_size: skip candidates smaller than this fraction of the mean candidate size.
    record_events: keep a log of every alloc/evict/remat/free/banish (``events``);
        budget evictions carry the lowest-scoring candidates with their score terms,
        remats their cascade (``minidtr explain``), ``mark_step`` adds step marks.
    seed: an integer; seeds the random heuristic and candidate sampling.
    device: ``cpu`` or ``cuda``: the allocator the runtime applies to.
    max_slowdown: the thrash guard in the cost model: raise ``ThrashError`` instead of
        running a rematerialization that would take the recompute cost so far past
        (this - 1) x the larger of the compute so far and the compute expected by the
        end of the current step (``Runtime.mark_step``; nothing is expected before the
        first mark, so there the slowdown so far, (compute + remat) / compute, is
        what is limited), and when the slowdown so far passes this at a step mark or
        when the runtime exits. So a run that ends without the error, and every prefix
        of it that ends at a step mark, has a slowdown within this. Recomputations
        asked for (``minidtr.testing.recompute``) are not charged, nor those of inner
        runtimes (nested, under their own guards), which ``stats()`` still counts.
        Default 4; None disables it. Must be > 1.
    max_wall_slowdown: the thrash guard in wall time: raise ``ThrashError`` once the
        runtime has been active for ``WALL_GUARD_AFTER`` seconds and eviction work
        (searching for victims, evicting, recomputing) has made its wall time more
        than this many times the rest (wall_time / (wall_time - overhead_time)). It
        catches runs whose time goes to the eviction search rather than to
        recomputation, which the cost model does not see. Inner runtimes' eviction
        work counts as the rest here (``Runtime.charged_overhead_time``). Default 10;
        None disables it. Must be > 1.
    rebuild_orphans: under ``eager`` deallocation, before evicting a dead storage,
        rematerialize its evicted children that are still referenced, so their
        rebuild does not come to need it (``minidtr.runtime.lifetime``). False is the
        paper's plain eager eviction.
    keep_dead_remats: storages that nobody references, rematerialized only to rebuild
        others, all stay resident as ordinary candidates after the access that needed
        them (the paper's simulator); by default they stay only while an evicted,
        referenced storage below them needs them (``minidtr.runtime.lifetime``).
    reference: run the reference policy only: the plain code of docs/design.md's
        "reading the policy" (the score, the loop over the candidates, e* walked at
        every score, the budget check, the replay, the deallocation rules), without the
        accelerator (``minidtr.runtime.fast``). Every decision is the same, only slower
        (tested); for reading and stepping through in a debugger.
    as_prototype: decide as the paper's simulator (simrd's eager runtime) does, rule by
        rule: its staleness stamp, locking order, candidate order and tie-breaking, scores,
        plain eager eviction that forgets nothing (``minidtr.runtime.prototype``). It sets
        the deallocation rules itself, so it refuses the settings it would override
        (``dealloc`` other than eager, ``rebuild_orphans=False``, ``keep_dead_remats``,
        ``sample``, ``min_size``, ``fit="contiguous"``); it runs the reference policy. For replays
        (``minidtr sim --as-prototype``), where budgets are relative to the simulator's
        own unbounded peak.
    audit: check the op contract as the run goes (``minidtr.runtime.audit``): every output
        is fingerprinted when first computed and every recomputation must give the same
        bits (else ``RecomputeMismatch``, naming the op and where it was applied); inputs
        are read-only while a kernel runs (``InputMutation``) and a kernel must not change
        its op's attributes (``OpStateChanged``). Changes no decision; ops take the
        general path meanwhile (slower). On by default in ``minidtr.testing``'s checks.
    measure_real: measure real memory beside the counted bytes: ``stats()`` then gives
        ``real_peak``, the most bytes of arrays at once (kernels' temporaries included),
        and ``traced_peak``, what the process held at its worst (Python objects too),
        with tracemalloc on NumPy and the memory pool's peak on CuPy
        (``minidtr.runtime.realmem``). Slower: every Python allocation is traced.
    fit: when a new value fits. ``bytes`` (the paper's rule, the default): when the
        resident bytes plus its own stay within the budget. ``contiguous``: when one
        free block of an arena of ``budget`` bytes holds it, rounded up to 512 bytes;
        the heuristic's victims are evicted until one does, and ``stats()`` measures the
        fragmentation (``minidtr.runtime.placement``, docs/memory.md).
    placement: under ``fit="contiguous"``, which free block a value takes: ``split`` (the
        default: requests of at most 1/256 of the arena from its top end, constants laid
        out there too, the rest best-fit from the bottom; ``minidtr.runtime.arena``),
        ``best`` (the smallest that holds it) or ``first`` (the lowest address that does).
    """

    budget: int | None = None
    heuristic: str | Any = "dtr"
    dealloc: str = "eager"
    cost: str | Callable[..., float] = "time"
    sample: bool = False
    min_size: float = 0.0
    record_events: bool = False
    seed: int = 0
    device: str = "cpu"
    max_slowdown: float | None = DEFAULT_MAX_SLOWDOWN
    max_wall_slowdown: float | None = DEFAULT_MAX_WALL_SLOWDOWN
    rebuild_orphans: bool = True
    keep_dead_remats: bool = False
    reference: bool = False
    as_prototype: bool = False
    audit: bool = False
    measure_real: bool = False
    fit: str = "bytes"
    placement: str = "split"

    def __post_init__(self) -> None:
        set_field = object.__setattr__  # frozen: the checks store the normalized values
        for name in SWITCHES:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        if not isinstance(self.seed, numbers.Integral) or isinstance(self.seed, bool):
            raise TypeError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.min_size, numbers.Real) or isinstance(self.min_size, bool):
            raise TypeError(f"min_size must be a number, got {self.min_size!r}")
        set_field(self, "budget", check_budget(self.budget))
        set_field(self, "max_slowdown", check_limit("max_slowdown", self.max_slowdown))
        set_field(
            self, "max_wall_slowdown", check_limit("max_wall_slowdown", self.max_wall_slowdown)
        )
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; expected one of {DEVICES}")
        if self.dealloc not in DEALLOC_POLICIES:
            raise ValueError(
                f"unknown dealloc {self.dealloc!r}; expected one of {DEALLOC_POLICIES}"
            )
        if not callable(self.cost) and self.cost not in COST_MODELS:
            raise ValueError(
                f"unknown cost {self.cost!r}; expected one of {COST_MODELS} or a callable"
            )
        if self.fit not in FITS:
            raise ValueError(f'fit must be "bytes" or "contiguous", got {self.fit!r}')
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f'placement must be "best", "first" or "split", got {self.placement!r}'
            )
        if self.placement != "split" and self.fit != "contiguous":
            raise ValueError(
                f'placement={self.placement!r} acts only with fit="contiguous" (it picks the '
                f"free block of the arena a value takes), got fit={self.fit!r}"
            )
        if not isinstance(self.heuristic, str) and not (
            hasattr(self.heuristic, "score")
            and isinstance(getattr(self.heuristic, "name", None), str)
        ):
            raise TypeError(
                "heuristic must be a name (such as 'dtr') or an object with a name (a "
                f"string) and a score(storage, context) method, got "
                f"{type(self.heuristic).__name__} {self.heuristic!r}"
            )
        if self.heuristic == "window" and self.fit != "contiguous":
            raise ValueError(
                "heuristic 'window' evicts a run of adjacent blocks of the arena: it needs "
                f'fit="contiguous", got fit={self.fit!r}'
            )
        if not 0.0 <= self.min_size < 1.0:
            raise ValueError(
                f"min_size is a fraction of the mean size in [0, 1), got {self.min_size}"
            )
        if self.as_prototype:
            check_prototype(self)

    def replace(self, **changes: Any) -> RuntimeOptions:
        """A copy with ``changes`` (field names), checked again."""
        return dataclasses.replace(self, **changes)


def check_prototype(options: RuntimeOptions) -> None:
    """``as_prototype`` sets these itself: refuse one given otherwise, naming it."""
    overridden = [
        (options.dealloc != "eager", f"dealloc={options.dealloc!r}", "its deallocation is eager"),
        (not options.rebuild_orphans, "rebuild_orphans=False", "it never rebuilds orphans"),
        (options.keep_dead_remats, "keep_dead_remats=True", "it keeps dead remats itself"),
        (options.sample, "sample=True", "it scores every candidate"),
        (options.min_size > 0, f"min_size={options.min_size}", "it scores every candidate"),
        (options.fit != "bytes", f"fit={options.fit!r}", "it counts bytes, without addresses"),
    ]
    for given, setting, why in overridden:
        if given:
            raise ValueError(f"as_prototype sets this itself ({why}): drop {setting}")


SWITCHES = (  # the options that are True or False
    "sample",
    "record_events",
    "rebuild_orphans",
    "keep_dead_remats",
    "reference",
    "as_prototype",
    "audit",
    "measure_real",
)
OPTION_NAMES = tuple(f.name for f in dataclasses.fields(RuntimeOptions))
