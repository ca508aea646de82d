"""What an op costs: the ``cost`` of ``Runtime(cost=...)``.

``time`` is each kernel's measured nanoseconds (at least 1): real, but different
from run to run. ``flops`` is a deterministic estimate from each op's ``cost``
method, (flops, bytes moved), as nominal nanoseconds on a machine that does 32
flops and moves 8 bytes a nanosecond: every run decides the same. A function
``f(op, in_metas, out_metas) -> float`` gives a cost model of your own; it must
return a finite number >= 0 (a negative cost would run the clock back, so a
staleness could be negative; a NaN would stop it), else the op fails with a
``ValueError`` that names it, and nothing is left reserved. The cost
of an op is what the clock advances by when it runs, the ``c(t)`` of the score,
and what a rematerialization adds to the run's recompute cost.

The built-in models' costs add up exactly in floating point (whole nanoseconds,
or multiples of 1/32 for ``flops``), so sums of them do not depend on their
order (``estar.total_cost``). A function's costs need not: the accelerator then
sums e* in the reference's order (``fast/closures.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

NOMINAL_FLOPS_PER_NS = 32.0
NOMINAL_BYTES_PER_NS = 8.0


def model_cost(model: Any, op: Any, inputs: Sequence[Any], metas: Sequence[tuple]) -> float:
    """An op's cost in a cost model other than measured time: ``flops`` or a function."""
    in_metas = [(c.shape, c.dtype) for c in inputs]
    if model == "flops":
        flops, nbytes = op.cost(in_metas, list(metas))
        return max(flops / NOMINAL_FLOPS_PER_NS + nbytes / NOMINAL_BYTES_PER_NS, 1.0)
    value = model(op, in_metas, list(metas))
    try:
        cost = float(value)
    except (TypeError, ValueError):
        cost = math.nan
    if not 0.0 <= cost < math.inf:  # (NaN too) a clock that runs back or stops decides nothing
        raise cost_error(model, value, op, in_metas, metas)
    return cost


def cost_error(model: Any, value: Any, op: Any, in_metas: list, out_metas: Sequence) -> ValueError:
    name = getattr(model, "__name__", repr(model))
    shapes = ", ".join(str(shape) for shape, _ in in_metas)
    out = ", ".join(str(shape) for shape, _ in out_metas)
    return ValueError(
        f"cost function {name} returned {value!r} for {op.name} ({shapes} -> {out}); "
        "a cost must be a finite number >= 0"
    )
