"""``assert_remat_equivalent``: the property every DTR run must satisfy.

Run a function unbounded, then under each (budget, heuristic, dealloc): every
output and every gradient must be bit-identical, and the counted peak must stay
within the budget. A budget given as a float is a ratio of the unbounded run's
peak (constants included), as the paper measures; an int is bytes.

Every run (the unbounded reference included) gets an allocator of its own
(``isolation.py``), so nothing made before the call (by earlier tests, earlier
hypothesis examples, objects a stored traceback keeps alive) counts against a
budget, and nothing made inside is left in the process's allocators after it:
the results come back as host arrays.

The reference runs twice first: if the two runs differ (in their values, their
peak or the number of storages they made), the function is not deterministic and
no budgeted run could be compared with it (``NondeterminismError``). Unless
``audit=False``, the first unbounded run is audited (``Runtime(audit=True)``,
``minidtr.runtime.audit``), and a configuration whose results differ is run again
under the audit: an impure op is named where it breaks the contract, not where a loss
differs (the budgeted runs themselves go unaudited, at full speed).
A configuration that failed is tried first by the next call (hypothesis replays a
failing example many times while it shrinks it), so a replay that still fails
does not run the whole grid first. A budget under which the function cannot run is
handled as ``on_budget_error`` says (``"raise"``, ``"skip"`` or ``"record"``),
and the report gives the program's floor (``floor.py``).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import reprlib
import unittest
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..nn import Module
from ..runtime import BudgetError, Runtime
from ..runtime.audit import describe_difference
from ..runtime.errors import AuditError, RematMismatch
from ..tensor import Tensor
from .floor import THRASH_LIMIT, Floor, budget_floor, record_reference
from .isolation import isolated_allocator

ON_BUDGET_ERROR = ("raise", "skip", "record")

FIX_NONDETERMINISM = (
    "Make everything random inside the function depend on fixed seeds only: call "
    "md.manual_seed(seed) at its start (md.nn layers draw their initial weights, and "
    "md.dropout/md.randn without a seed draw, from the global generator), or give each layer "
    "rng=np.random.default_rng(seed) and each dropout/randn seed=...; build the model, "
    "optimizer and data inside the function too (an optimizer step on parameters made "
    "outside it changes its inputs from one run to the next)."
)


class NondeterminismError(AssertionError):
    """The function gave different results on two unbounded runs: it is not deterministic,
    so rematerialization cannot be checked against it."""


class InfeasibleBudget(BudgetError):
    """A configuration's budget is too small for the function (``on_budget_error="raise"``).

    ``error`` is the runtime's ``BudgetError`` (its numbers are copied here), ``label``
    the configuration, ``floor`` the program's floors (``minidtr.testing.floor.Floor``).
    """

    def __init__(
        self,
        message: str,
        error: BudgetError | None = None,
        label: str = "",
        floor: Floor | None = None,
    ):
        MemoryError.__init__(self, message)
        self.error, self.label, self.floor = error, label, floor
        for name in ("op", "needed", "budget", "memory", "pinned", "constant", "locked"):
            setattr(self, name, getattr(error, name, None))


def checked_budget(budget: Any) -> int | float:
    """Bytes (an integer >= 0) or a ratio of the unbounded peak (a finite float >= 0),
    NumPy's numbers too."""
    number = isinstance(budget, numbers.Real) and not isinstance(budget, bool | np.bool_)
    if number and math.isfinite(budget) and budget >= 0:
        return int(budget) if isinstance(budget, numbers.Integral) else float(budget)
    raise ValueError(
        "assert_remat_equivalent: a budget is bytes (an int >= 0) or a ratio of the unbounded "
        f"peak (a finite float >= 0), got {budget!r}"
    )


def sorted_keys(mapping: dict) -> list:
    """A dict's keys in an order that does not depend on how it was built, whatever their
    types (``sorted`` cannot compare an int with a str)."""
    return sorted(mapping, key=lambda key: (type(key).__name__, repr(key)))


def _flatten(value: Any, path: str = "out") -> list[tuple[str, np.ndarray]]:
    if isinstance(value, Tensor):
        return [(path, value.numpy())]
    if isinstance(value, Module):  # its parameters and buffers (running statistics)
        named = value.named_parameters() + value.named_buffers()
        return [kv for name, t in named for kv in _flatten(t, f"{path}.{name}")]
    if isinstance(value, np.ndarray | np.generic | float | int | bool):
        return [(path, np.asarray(value))]
    if isinstance(value, dict):
        return [kv for k in sorted_keys(value) for kv in _flatten(value[k], f"{path}[{k!r}]")]
    if isinstance(value, list | tuple):
        return [kv for i, v in enumerate(value) for kv in _flatten(v, f"{path}[{i}]")]
    if value is None:
        return []
    raise TypeError(
        f"cannot compare a {type(value).__name__} at {path}: return tensors, arrays, numbers, "
        "modules (their parameters and buffers) or lists, tuples and dicts of them"
    )


def run_under(
    fn: Callable[[], Any],
    runtime: Runtime,
    grads_of: Sequence[Tensor] = (),
    *,
    fresh: bool = True,
) -> list[tuple[str, np.ndarray]]:
    """Run ``fn`` inside ``runtime`` and return its outputs (and the ``.grad`` of each
    tensor in ``grads_of``) as named host arrays.

    With ``fresh`` (the default) the run gets a new allocator for ``runtime.device``,
    dropped afterwards: nothing made before counts against the budget and nothing made
    inside stays behind (read ``runtime.stats()`` for counters; its ``memory`` is then
    the process's allocator's). ``fresh=False`` runs on the current allocator. The
    ``.grad`` of ``grads_of`` is cleared for the run and restored after it.
    """
    if not isinstance(runtime, Runtime):
        raise TypeError(
            f"run_under: runtime must be an md.Runtime (md.Runtime(budget=..., "
            f"heuristic=...)), got {type(runtime).__name__} {reprlib.repr(runtime)}"
        )
    saved = [t.grad for t in grads_of]
    for t in grads_of:
        t.grad = None
    try:
        with isolated_allocator(runtime.device) if fresh else contextlib.nullcontext(), runtime:
            values = _flatten(fn())
            values += [
                (f"grad[{i}]", t.grad.numpy() if t.grad is not None else np.array(np.nan))
                for i, t in enumerate(grads_of)
            ]
    finally:
        for t, grad in zip(grads_of, saved, strict=True):
            t.grad = grad
    return values


def first_difference(
    expected: list[tuple[str, np.ndarray]], got: list[tuple[str, np.ndarray]]
) -> str | None:
    """None when both runs gave the same names and bit-identical arrays, else what differs."""
    names_a, names_b = [n for n, _ in expected], [n for n, _ in got]
    if names_a != names_b:
        return f"the outputs differ in structure: {names_a} vs {names_b}"
    for (name, a), (_, b) in zip(expected, got, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            return f"{name} differs: {describe_difference(a, b)}"
    return None


def _hypothesis_running() -> bool:
    try:
        import hypothesis
    except ImportError:
        return False
    return hypothesis.currently_in_test_context()


def _hypothesis_event(text: str) -> None:
    if _hypothesis_running():
        import hypothesis

        hypothesis.event(text)


# Configurations that failed lately, most recent first: the next call tries them first.
_FAILED: list[tuple] = []
_FAILED_KEPT = 16


@dataclass
class Reference:
    """One unbounded run: its values, and what it cost (compared between the two runs)."""

    values: list[tuple[str, np.ndarray]]
    peak: int
    storages: int
    ops: int

    def costs(self) -> dict[str, int]:
        return {"peak memory": self.peak, "storages made": self.storages, "ops run": self.ops}


def reference_run(
    fn: Callable[[], Any],
    grads_of: Sequence[Tensor] = (),
    cost: str | Callable[..., float] = "flops",
    device: str = "cpu",
    audit: bool = True,
) -> Reference:
    """Run ``fn`` unbounded on an allocator of its own; its values and costs."""
    runtime = Runtime(cost=cost, device=device, audit=audit)
    with isolated_allocator(device) as allocator:
        values = run_under(fn, runtime, grads_of, fresh=False)
        storages = allocator.next_id
    return Reference(values, runtime.stats_.peak_memory, storages, runtime.stats_.ops)


def check_deterministic(first: Reference, second: Reference) -> None:
    """Raise ``NondeterminismError`` unless two unbounded runs agree in their values and in
    their peak, storages made and ops run."""
    difference = first_difference(first.values, second.values)
    if difference is not None:
        raise NondeterminismError(
            f"the function is not deterministic: two unbounded runs of it gave different "
            f"results ({difference}), so budgeted runs cannot be compared with it. "
            f"{FIX_NONDETERMINISM}"
        )
    a, b = first.costs(), second.costs()
    differ = [f"{name} ({a[name]:,} vs {b[name]:,})" for name in a if a[name] != b[name]]
    if differ:
        raise NondeterminismError(
            f"the function is not deterministic: two unbounded runs of it gave the same values "
            f"but differ in {' and '.join(differ)}: the second run reused something the "
            "first made (a cache kept from one call to the next, such as an intermediate "
            "detached and kept), so budgets measured against the first run test something "
            "else than later runs do. Build everything inside the function, or empty such "
            "caches at its start."
        )


def _key(config: tuple, rebuild_orphans: bool, device: str) -> tuple:
    budget, heuristic, policy = config
    return (repr(budget), str(heuristic), policy, rebuild_orphans, device)


def failed_first(configs: list[tuple], rebuild_orphans: bool, device: str) -> list[int]:
    """The order to run ``configs`` in: those that failed lately first (most recent first),
    then the others as given."""
    failed = {key: rank for rank, key in enumerate(_FAILED)}
    rank = [failed.get(_key(c, rebuild_orphans, device), len(failed)) for c in configs]
    return sorted(range(len(configs)), key=lambda i: (rank[i], i))


def _note_failure(config: tuple, rebuild_orphans: bool, device: str) -> None:
    key = _key(config, rebuild_orphans, device)
    if key in _FAILED:
        _FAILED.remove(key)
    _FAILED.insert(0, key)
    del _FAILED[_FAILED_KEPT:]


def assert_remat_equivalent(
    fn: Callable[[], Any],
    budgets: Iterable[float | int] | float | int = (0.5,),
    heuristics: Iterable[str] = ("dtr",),
    dealloc: Iterable[str] | str = ("eager",),
    grads_of: Sequence[Tensor] = (),
    cost: str | Callable[..., float] = "flops",
    on_budget_error: str = "raise",
    device: str = "cpu",
    rebuild_orphans: bool = True,
    max_slowdown: float | None = THRASH_LIMIT,
    allow_budget_error: bool | None = None,
    audit: bool = True,
) -> list[dict]:
    """Assert ``fn`` gives bit-identical results under every budget x heuristic x dealloc.

    ``fn`` takes no arguments and returns tensors/arrays/numbers/modules (nested lists,
    tuples, dicts allowed; a module stands for its parameters and buffers); it must be
    deterministic: it is run unbounded twice first, and ``NondeterminismError`` names the
    first output that differs, or the peak, storages made or ops run if only those do.
    Build inputs, model and optimizer inside it from fixed seeds. ``grads_of`` are leaves
    whose ``.grad`` is compared too. Budgets are bytes (int) or ratios of the unbounded
    peak (float); one budget may be given alone, as one heuristic or policy may.

    Every run has memory of its own (see the module docstring). With ``audit`` (the
    default) the first unbounded run is audited (``Runtime(audit=True)``): a kernel that
    writes into its input or changes its op's attributes raises at once, naming the op
    (``InputMutation``, ``OpStateChanged``); and a budgeted run that differs is run again
    audited, so that an op whose recomputation differs is named (``RecomputeMismatch``, a
    ``RematMismatch``) rather than the output where the difference ended up.
    ``on_budget_error`` says what a budget too small for ``fn`` does:
      ``"raise"``: raise ``InfeasibleBudget`` (a ``BudgetError``) naming the
      configuration and the program's floor;
      ``"record"``: go on; its report has ``status="infeasible"``, the error and the floor;
      ``"skip"``: check every configuration that fits, then reject the example
      (``hypothesis.assume(False)``) under hypothesis, or skip the test
      (``unittest.SkipTest``, which pytest reports as skipped) otherwise.
    After a BudgetError the same memory must still run ``fn`` unbounded to the same
    results (the runtime is left usable). ``allow_budget_error=True`` is the older
    spelling of ``on_budget_error="record"``.

    ``max_slowdown`` (20 by default, None for no limit) stops a budgeted run that
    recomputes so much that it is that many times slower than its compute (a
    ``ThrashError``, a ``BudgetError``): such a budget counts as infeasible, so a property
    test does not hang on a budget where the heuristic thrashes.
    ``device`` selects whose allocator the budgets apply to; ``rebuild_orphans`` is passed
    to each budgeted ``Runtime``. Configurations that failed in an earlier call run first.
    Returns one report (a dict: ``label``, ``status``, ``ratio`` and the runtime's
    ``stats()``) per budgeted run, in the order given.
    """
    if allow_budget_error is not None:
        on_budget_error = "record" if allow_budget_error else "raise"
    if on_budget_error not in ON_BUDGET_ERROR:
        raise ValueError(
            f"on_budget_error must be one of {ON_BUDGET_ERROR}, got {on_budget_error!r}"
        )
    if isinstance(budgets, numbers.Real | str):  # one budget, as one heuristic's name is
        budgets = [budgets]
    budgets = [checked_budget(budget) for budget in budgets]
    heuristics = [heuristics] if isinstance(heuristics, str) else list(heuristics)
    deallocs = [dealloc] if isinstance(dealloc, str) else list(dealloc)
    for name, given in (("budgets", budgets), ("heuristics", heuristics), ("dealloc", deallocs)):
        if not given:  # nothing would be checked, and the test would pass
            raise ValueError(f"assert_remat_equivalent: {name} is empty: give at least one")
    first = reference_run(fn, grads_of, cost, device, audit)
    if not first.values:  # every run would compare equal, and the test would pass
        raise ValueError(
            "assert_remat_equivalent: fn returned nothing to compare (None, or empty "
            "lists, tuples or dicts) and grads_of is empty: return what the runs must agree "
            "on (the losses, the model: tensors, arrays, numbers, modules or lists, tuples "
            "and dicts of them)"
        )
    check_deterministic(first, reference_run(fn, grads_of, cost, device, audit=False))
    checker = Checker(
        fn, first, grads_of, cost, device, rebuild_orphans, max_slowdown, on_budget_error, audit
    )
    configs = [(b, h, p) for b in budgets for h in heuristics for p in deallocs]
    reports: dict[int, dict] = {}
    for i in failed_first(configs, rebuild_orphans, device):
        try:
            report = checker.check(*configs[i])
        except Exception:
            _note_failure(configs[i], rebuild_orphans, device)
            raise
        if report is not None:
            reports[i] = report
    if checker.infeasible and on_budget_error == "skip":
        if _hypothesis_running():
            import hypothesis

            hypothesis.assume(False)
        raise unittest.SkipTest("; ".join(checker.infeasible))
    return [reports[i] for i in sorted(reports)]


class Checker:
    """Runs ``fn`` under one configuration after another and compares each run with the
    unbounded ``reference`` (``assert_remat_equivalent``'s loop)."""

    def __init__(
        self,
        fn: Callable[[], Any],
        reference: Reference,
        grads_of: Sequence[Tensor],
        cost: str | Callable[..., float],
        device: str,
        rebuild_orphans: bool,
        max_slowdown: float | None,
        on_budget_error: str,
        audit: bool,
    ):
        self.fn, self.expected, self.peak = fn, reference.values, reference.peak
        self.grads_of, self.cost, self.device = grads_of, cost, device
        self.rebuild_orphans, self.max_slowdown = rebuild_orphans, max_slowdown
        self.on_budget_error, self.audit = on_budget_error, audit
        self.floors: dict[tuple[str, str], Floor] = {}
        self.trace: list = []
        self.infeasible: list[str] = []
        self.no_culprit = ""  # what the audit found when a configuration differed

    def floor_of(self, heuristic: str, policy: str) -> Floor:
        if (heuristic, policy) not in self.floors:
            if not self.trace:
                recorded = record_reference(self.fn, self.cost, self.device, self.grads_of)
                self.trace.append(recorded[0])
            self.floors[heuristic, policy] = budget_floor(
                self.fn,
                heuristic,
                policy,
                cost=self.cost,
                device=self.device,
                rebuild_orphans=self.rebuild_orphans,
                trace=self.trace[0],
                peak=self.peak,
                max_slowdown=self.max_slowdown,
            )
        return self.floors[heuristic, policy]

    def check(self, budget: float | int, heuristic: str, policy: str) -> dict | None:
        """Run one configuration; its report, or None for an infeasible one that is left
        out (``"skip"`` under hypothesis). Raises on a mismatch (after an audited run of
        the configuration, which names an impure op if there is one)."""
        peak = self.peak
        nbytes = int(budget * peak) if isinstance(budget, float) else int(budget)
        label = (
            f"budget={nbytes:,} bytes ({nbytes / max(peak, 1):.3f} of the unbounded "
            f"peak {peak:,}), heuristic={heuristic}, dealloc={policy}"
            + ("" if self.rebuild_orphans else ", rebuild_orphans=False")
        )
        got, error, again, stats = self.run(nbytes, heuristic, policy, audit=False)
        report = {"label": label, "ratio": nbytes / max(peak, 1), **stats}
        if error is not None:
            return self.infeasible_report(report, label, error, again, heuristic, policy)
        difference = first_difference(self.expected, got)
        if difference is None and stats["peak_memory"] > nbytes:
            difference = f"the counted peak {stats['peak_memory']:,} bytes passed the budget"
        if difference is not None:
            if self.audit:
                self.audited(label, nbytes, heuristic, policy)
            raise RematMismatch(f"{label}: {difference}{self.no_culprit}")
        _hypothesis_event("minidtr: budget feasible")
        return {**report, "status": "ok"}

    def run(self, nbytes: int, heuristic: str, policy: str, audit: bool) -> tuple:
        """One budgeted run on an allocator of its own: (values, BudgetError or None, the
        values of the unbounded run after the error, the runtime's stats)."""
        runtime = Runtime(
            budget=nbytes,
            heuristic=heuristic,
            dealloc=policy,
            cost=self.cost,
            device=self.device,
            rebuild_orphans=self.rebuild_orphans,
            max_slowdown=self.max_slowdown,
            max_wall_slowdown=None,  # the outcome must not depend on the machine
            audit=audit,
        )
        got = again = error = None
        with isolated_allocator(self.device):
            try:
                got = run_under(self.fn, runtime, self.grads_of, fresh=False)
            except BudgetError as caught:
                error = caught
                unbounded = Runtime(cost=self.cost, device=self.device, audit=audit)
                again = run_under(self.fn, unbounded, self.grads_of, fresh=False)
            stats = runtime.stats()
        return got, error, again, stats

    def audited(self, label: str, nbytes: int, heuristic: str, policy: str) -> None:
        """Run a configuration that differed again, audited: raise the audit's error (with
        the configuration) if it names an op; return if it does not."""
        try:
            self.run(nbytes, heuristic, policy, audit=True)
        except AuditError as error:
            raise type(error)(f"{label}: {error}", error.op, error.site) from None
        self.no_culprit = (
            ". Run again under the audit, no op broke the contract (no recomputation "
            "differed from its first computation): a bug in minidtr, please report it"
        )

    def infeasible_report(
        self,
        report: dict,
        label: str,
        error: BudgetError,
        again: list[tuple[str, np.ndarray]],
        heuristic: str,
        policy: str,
    ) -> dict | None:
        difference = first_difference(self.expected, again)
        if difference is not None:
            raise RematMismatch(
                f"{label}: after a BudgetError, an unbounded run on the same memory "
                f"differs from the reference: {difference}"
            )
        _hypothesis_event("minidtr: budget infeasible")
        if self.on_budget_error == "skip" and _hypothesis_running():
            # the example is rejected: hypothesis shows no message, so no floor
            self.infeasible.append(label)
            return None
        floor = self.floor_of(heuristic, policy)
        reason = str(error).rstrip(".")
        message = f"{label}: infeasible: {reason}. Floor: {floor.describe()}."
        if self.on_budget_error == "raise":
            budget = getattr(error, "budget", None)
            if floor.minimal is not None and budget is not None and budget >= floor.minimal:
                advice = (
                    f" This budget is above that one: under heuristic={heuristic} a larger "
                    "budget can fail where a smaller one runs (its choices lead elsewhere; "
                    "minidtr.testing.floor says more). Pass"
                )
            else:
                advice = " Give budgets at or above the floor, or pass"
            raise InfeasibleBudget(
                f"{message}{advice} on_budget_error='record' or 'skip' to accept infeasible ones.",
                error,
                label,
                floor,
            ) from error
        self.infeasible.append(message)
        return {**report, "status": "infeasible", "error": str(error), "floor": floor.as_dict()}
