"""``assert_remat_equivalent``: the property every DTR run must satisfy.

Run a function unbounded, then under each (budget, heuristic, dealloc): every
output and every gradient must be bit-identical, and the counted peak must stay
within the budget. A budget given as a float in (0, 1] is a ratio of the
unbounded run's peak (constants included), as the paper measures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..runtime import BudgetError, Runtime
from ..tensor import Tensor


class RematMismatch(AssertionError):
    """A budgeted run differed from the unbounded run or passed its budget."""


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
    raise TypeError(f"cannot compare a {type(value).__name__} at {path}")


def run_under(
    fn: Callable[[], Any], runtime: Runtime, grads_of: Sequence[Tensor] = ()
) -> list[tuple[str, np.ndarray]]:
    """Run ``fn`` inside ``runtime`` and return its outputs (and the ``.grad`` of each
    tensor in ``grads_of``) as named host arrays. Gradients are reset before the run."""
    for t in grads_of:
        t.grad = None
    with runtime:
        values = _flatten(fn())
        values += [
            (f"grad[{i}]", t.grad.numpy() if t.grad is not None else np.array(np.nan))
            for i, t in enumerate(grads_of)
        ]
    return values


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    diff = np.argwhere(~((a == b) | (np.isnan(a) & np.isnan(b))) if a.dtype.kind == "f" else a != b)
    if diff.size == 0:
        return "bit patterns differ (e.g. -0.0 vs 0.0)"
    idx = tuple(diff[0])
    return f"{len(diff)} elements differ, first at {idx}: {a[idx]!r} vs {b[idx]!r}"


def assert_remat_equivalent(
    fn: Callable[[], Any],
    budgets: Iterable[float | int] = (0.5,),
    heuristics: Iterable[str] = ("dtr",),
    dealloc: Iterable[str] | str = ("eager",),
    grads_of: Sequence[Tensor] = (),
    cost: str = "flops",
    allow_budget_error: bool = False,
    device: str = "cpu",
    rebuild_orphans: bool = True,
) -> list[dict]:
    """Assert ``fn`` gives bit-identical results under every budget x heuristic x dealloc.

    ``fn`` takes no arguments and returns tensors/arrays (nested lists, tuples,
    dicts allowed); it must be deterministic given the same inputs (seed any
    randomness inside it). ``grads_of`` are leaves whose ``.grad`` is compared
    too. Budgets are bytes (int) or ratios of the unbounded peak (float <= 1).
    With ``allow_budget_error``, an infeasible budget may raise ``BudgetError``
    (the runtime is then checked to still give the right answer unbounded).
    ``device`` selects whose allocator the budgets apply to; ``rebuild_orphans`` is passed
    to each budgeted ``Runtime``. Returns one stats dict per budgeted run.
    """
    deallocs = (dealloc,) if isinstance(dealloc, str) else tuple(dealloc)
    reference_runtime = Runtime(cost=cost, device=device)
    expected = run_under(fn, reference_runtime, grads_of)
    peak = reference_runtime.stats()["peak_memory"]
    reports = []
    for budget in budgets:
        nbytes = int(budget * peak) if isinstance(budget, float) else int(budget)
        for heuristic in heuristics:
            for policy in deallocs:
                runtime = Runtime(
                    budget=nbytes,
                    heuristic=heuristic,
                    dealloc=policy,
                    cost=cost,
                    device=device,
                    rebuild_orphans=rebuild_orphans,
                )
                label = (
                    f"budget={nbytes} ({nbytes / max(peak, 1):.2f} of peak), "
                    f"heuristic={heuristic}, dealloc={policy}, rebuild_orphans={rebuild_orphans}"
                )
                try:
                    got = run_under(fn, runtime, grads_of)
                except BudgetError:
                    if not allow_budget_error:
                        raise
                    again = run_under(fn, Runtime(cost=cost, device=device), grads_of)
                    _compare(expected, again, label + " (unbounded, after a BudgetError)")
                    continue
                _compare(expected, got, label)
                stats = runtime.stats()
                if stats["peak_memory"] > nbytes:
                    raise RematMismatch(
                        f"{label}: counted peak {stats['peak_memory']} passed the budget"
                    )
                reports.append({"label": label, **stats})
    return reports


def _compare(expected, got, label: str) -> None:
    if [n for n, _ in expected] != [n for n, _ in got]:
        raise RematMismatch(f"{label}: outputs differ in structure")
    for (name, a), (_, b) in zip(expected, got, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            raise RematMismatch(f"{label}: {name} differs: {_first_difference(a, b)}")
