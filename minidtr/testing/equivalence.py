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

The reference runs twice first: if the two runs differ, the function is not
deterministic and no budgeted run could be compared with it
(``NondeterminismError``). A budget under which the function cannot run is
handled as ``on_budget_error`` says (``"raise"``, ``"skip"`` or ``"record"``),
and the report gives the program's floor (``floor.py``).
"""

from __future__ import annotations

import contextlib
import unittest
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..runtime import BudgetError, Runtime
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


class RematMismatch(AssertionError):
    """A budgeted run differed from the unbounded run or passed its budget."""


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


def _flatten(value: Any, path: str = "out") -> list[tuple[str, np.ndarray]]:
    if isinstance(value, Tensor):
        return [(path, value.numpy())]
    if isinstance(value, np.ndarray | np.generic | float | int | bool):
        return [(path, np.asarray(value))]
    if isinstance(value, dict):
        return [kv for k in sorted(value) for kv in _flatten(value[k], f"{path}[{k!r}]")]
    if isinstance(value, list | tuple):
        return [kv for i, v in enumerate(value) for kv in _flatten(v, f"{path}[{i}]")]
    if value is None:
        return []
    raise TypeError(
        f"cannot compare a {type(value).__name__} at {path}: return tensors, arrays, numbers "
        "or lists, tuples and dicts of them"
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


def assert_remat_equivalent(
    fn: Callable[[], Any],
    budgets: Iterable[float | int] = (0.5,),
    heuristics: Iterable[str] = ("dtr",),
    dealloc: Iterable[str] | str = ("eager",),
    grads_of: Sequence[Tensor] = (),
    cost: str | Callable[..., float] = "flops",
    on_budget_error: str = "raise",
    device: str = "cpu",
    rebuild_orphans: bool = True,
    max_slowdown: float | None = THRASH_LIMIT,
    allow_budget_error: bool | None = None,
) -> list[dict]:
    """Assert ``fn`` gives bit-identical results under every budget x heuristic x dealloc.

    ``fn`` takes no arguments and returns tensors/arrays/numbers (nested lists, tuples,
    dicts allowed); it must be deterministic: it is run unbounded twice first, and
    ``NondeterminismError`` names the first output that differs. Build inputs, model and
    optimizer inside it from fixed seeds. ``grads_of`` are leaves whose ``.grad`` is
    compared too. Budgets are bytes (int) or ratios of the unbounded peak (float).

    Every run has memory of its own (see the module docstring). ``on_budget_error``
    says what a budget too small for ``fn`` does:
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
    to each budgeted ``Runtime``. Returns one report (a dict: ``label``, ``status``,
    ``ratio`` and the runtime's ``stats()``) per budgeted run.
    """
    if allow_budget_error is not None:
        on_budget_error = "record" if allow_budget_error else "raise"
    if on_budget_error not in ON_BUDGET_ERROR:
        raise ValueError(
            f"on_budget_error must be one of {ON_BUDGET_ERROR}, got {on_budget_error!r}"
        )
    budgets, heuristics = list(budgets), list(heuristics)
    deallocs = [dealloc] if isinstance(dealloc, str) else list(dealloc)
    for budget in budgets:
        if isinstance(budget, bool) or not isinstance(budget, int | float) or budget < 0:
            raise ValueError(
                f"a budget is bytes (int >= 0) or a ratio of the unbounded peak (float >= 0), "
                f"got {budget!r}"
            )

    reference = Runtime(cost=cost, device=device)
    expected = run_under(fn, reference, grads_of)
    difference = first_difference(
        expected, run_under(fn, Runtime(cost=cost, device=device), grads_of)
    )
    if difference is not None:
        raise NondeterminismError(
            f"the function is not deterministic: two unbounded runs of it gave different "
            f"results ({difference}), so budgeted runs cannot be compared with it. "
            f"{FIX_NONDETERMINISM}"
        )
    peak = reference.stats_.peak_memory

    floors: dict[tuple[str, str], Floor] = {}
    trace: list = []

    def floor_of(heuristic: str, policy: str) -> Floor:
        if (heuristic, policy) not in floors:
            if not trace:
                trace.append(record_reference(fn, cost, device)[0])
            floors[heuristic, policy] = budget_floor(
                fn,
                heuristic,
                policy,
                cost=cost,
                device=device,
                rebuild_orphans=rebuild_orphans,
                trace=trace[0],
                peak=peak,
                max_slowdown=max_slowdown,
            )
        return floors[heuristic, policy]

    reports: list[dict] = []
    infeasible: list[str] = []
    for budget in budgets:
        nbytes = int(budget * peak) if isinstance(budget, float) else int(budget)
        for heuristic in heuristics:
            for policy in deallocs:
                label = (
                    f"budget={nbytes:,} bytes ({nbytes / max(peak, 1):.3f} of the unbounded "
                    f"peak {peak:,}), heuristic={heuristic}, dealloc={policy}"
                    + ("" if rebuild_orphans else ", rebuild_orphans=False")
                )
                runtime = Runtime(
                    budget=nbytes,
                    heuristic=heuristic,
                    dealloc=policy,
                    cost=cost,
                    device=device,
                    rebuild_orphans=rebuild_orphans,
                    max_slowdown=max_slowdown,
                    max_wall_slowdown=None,  # the outcome must not depend on the machine
                )
                with isolated_allocator(device):
                    try:
                        got = run_under(fn, runtime, grads_of, fresh=False)
                        error = None
                    except BudgetError as caught:
                        error = caught
                        again = run_under(
                            fn, Runtime(cost=cost, device=device), grads_of, fresh=False
                        )
                    stats = runtime.stats()
                report = {"label": label, "ratio": nbytes / max(peak, 1), **stats}
                if error is None:
                    difference = first_difference(expected, got)
                    if difference is not None:
                        raise RematMismatch(f"{label}: {difference}")
                    if stats["peak_memory"] > nbytes:
                        raise RematMismatch(
                            f"{label}: the counted peak {stats['peak_memory']:,} bytes passed "
                            "the budget"
                        )
                    reports.append({**report, "status": "ok"})
                    _hypothesis_event("minidtr: budget feasible")
                    continue
                difference = first_difference(expected, again)
                if difference is not None:
                    raise RematMismatch(
                        f"{label}: after a BudgetError, an unbounded run on the same memory "
                        f"differs from the reference: {difference}"
                    )
                _hypothesis_event("minidtr: budget infeasible")
                if on_budget_error == "skip" and _hypothesis_running():
                    # the example is rejected: hypothesis shows no message, so no floor
                    infeasible.append(label)
                    continue
                floor = floor_of(heuristic, policy)
                reason = str(error).rstrip(".")
                message = f"{label}: infeasible: {reason}. Floor: {floor.describe()}."
                if on_budget_error == "raise":
                    raise InfeasibleBudget(
                        f"{message} Give budgets at or above the floor, or pass "
                        "on_budget_error='record' or 'skip' to accept infeasible ones.",
                        error,
                        label,
                        floor,
                    ) from error
                infeasible.append(message)
                reports.append(
                    {
                        **report,
                        "status": "infeasible",
                        "error": str(error),
                        "floor": floor.as_dict(),
                    }
                )
    if infeasible and on_budget_error == "skip":
        if _hypothesis_running():
            import hypothesis

            hypothesis.assume(False)
        raise unittest.SkipTest("; ".join(infeasible))
    return reports
