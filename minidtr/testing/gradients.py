"""``check_gradients``: every op's backward against central differences, in float64.

DTR recomputes values, not gradients: a backward that is wrong is wrong under every
budget, so comparing budgeted runs with unbounded ones cannot see it. This checks the
vector-Jacobian product itself, as JAX's ``check_vjp`` does: for random directions ``v``
(in the inputs) and ``u`` (in the outputs),

    <u, J v>  by central differences: <u, (f(x + eps v) - f(x - eps v)) / (2 eps)>
    <J^T u, v>  by the backward: the gradient of sum(u * f(x)), dotted with v

must agree. For a whole function, the ops it applies are recorded (an allocator
observer) and, when the function's products disagree, each op is checked the same way
at the inputs it was applied to, in the order they ran: the first whose products
disagree is named (its class and where it was applied). At a point where an op is not
differentiable (relu at 0), one-sided differences disagree with each other, and the op
is passed over there; but a check that passed over everything and compared nothing
fails (float32 arithmetic inside the function disagrees so too), and so does a function
or op that gives two values at the same point (the point is evaluated twice).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import autograd
from ..ops import random as random_ops
from ..ops.op import DTypeError, Op, apply
from ..runtime.audit import Site, call_site, describe_op
from ..runtime.observers import add_observer, remove_observer
from ..runtime.views import array_of
from ..tensor import Tensor, tensor
from .equivalence import sorted_keys
from .isolation import isolated_allocator

EPS = 1e-6
RTOL = 1e-5
ATOL = 1e-8
KINK = 1e-3  # one-sided differences this far apart (relative): not differentiable here


class GradientMismatch(AssertionError):
    """An op's backward (or a function's gradient) disagrees with central differences.
    ``op`` is the op named (None for a function whose every op agrees), ``site`` where it
    was applied."""

    def __init__(self, message: str, op: Any = None, site: str = ""):
        super().__init__(message)
        self.op, self.site = op, site


@dataclass
class Products:
    """<u, J v> by central differences and <J^T u, v> by the backward, for one input."""

    index: int
    shape: tuple[int, ...]
    differences: float
    backward: float
    # why nothing was compared: "" (compared), "edge" (a pole or a domain's edge: not
    # finite on one side) or "kink" (finite one-sided differences disagree)
    skipped: str
    one_sided: tuple[float, float]  # (f(x + eps v) - f(x)) / eps and (f(x) - f(x - eps v)) / eps
    values: tuple[float, float]  # <u, f(x)> evaluated twice: equal for a deterministic fn

    def agree(self, rtol: float, atol: float) -> bool:
        scale = max(abs(self.differences), abs(self.backward))
        return bool(self.skipped) or abs(self.differences - self.backward) <= atol + rtol * scale

    @property
    def varies(self) -> bool:
        first, second = self.values
        return first != second and not (math.isnan(first) and math.isnan(second))

    def describe_variation(self) -> str:
        first, second = self.values
        return (
            f"evaluated twice at the same point (input {self.index}, shape {self.shape}), "
            f"<u, f(x)> was {first!r} then {second!r}"
        )

    def describe_kink(self) -> str:
        ahead, behind = self.one_sided
        return f"input {self.index} (shape {self.shape}): {ahead:.8g} vs {behind:.8g}"

    def describe(self, eps: float) -> str:
        error = abs(self.differences - self.backward) / max(abs(self.differences), 1e-300)
        return (
            f"for input {self.index} (shape {self.shape}), <u, J v> = {self.differences:.8g} "
            f"by central differences (step {eps:g}) but <J^T u, v> = {self.backward:.8g} by "
            f"its backward (relative error {error:.3g})"
        )


def check_gradients(
    fn: Callable[..., Any] | Op,
    *inputs: Any,
    seed: int = 0,
    eps: float = EPS,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> None:
    """Check the vector-Jacobian products of ``fn`` at ``inputs`` against central
    differences (in float64, random directions drawn from ``seed``); raise
    ``GradientMismatch`` naming the first op whose backward disagrees.

    ``fn`` is an op (an ``Op`` instance, applied to the inputs) or a function of tensors
    returning a tensor or a list, tuple or dict of them (the floating-point ones are
    checked). The inputs are arrays, numbers or tensors: floating-point ones become
    float64 leaves that are perturbed, the others are passed as they are. Build what the
    function makes itself (its weights) in float64 too, or pass it as an input: central
    differences in float32 are too coarse to judge. Random ops without a seed draw the
    same values in every evaluation (minidtr's default generator is reset before each).
    Under hypothesis, draw the inputs and ``seed``
    (``minidtr.testing.strategies.float64_arrays``)."""
    check_settings(seed, eps, rtol, atol)
    for i, x in enumerate(inputs):
        array = _as_input(x)
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(
                f"check_gradients: input {i} holds NaN or infinite values, where central "
                "differences cannot judge a gradient"
            )
    if isinstance(fn, Op):
        application = Application(fn, list(inputs), call_site())
        products = _check_application(application, seed, eps, rtol, atol, "", recorded=False)
        if not conclusive(products):
            raise nothing_checked(f"op {fn.name!r}", products, application)
        return
    arrays = [_as_input(x) for x in inputs]
    floats = float_inputs(arrays)
    state = random_ops.default_generator().bit_generator.state
    try:
        with isolated_allocator():
            products, recorded = _products(fn, arrays, floats, seed, eps, record=True)
            varies = any(p.varies for p in products)
            if not varies and all(p.agree(rtol, atol) for p in products) and conclusive(products):
                return
            of_ops = [
                p
                for application in recorded
                for p in _check_application(application, seed, eps, rtol, atol)
            ]
    finally:
        random_ops.default_generator().bit_generator.state = state
    if varies:
        varying = next(p for p in products if p.varies)
        raise GradientMismatch(
            f"check_gradients: the function is not deterministic: "
            f"{varying.describe_variation()}, though each of its {len(recorded)} "
            "differentiable ops gives the same values on the same inputs: randomness that "
            "is not minidtr's (np.random), or state changed between calls; central "
            "differences need a function of its inputs."
        )
    bad = next((p for p in products if not p.agree(rtol, atol)), None)
    if bad is None:
        if conclusive(of_ops):  # the function's own products were passed over, its ops' not
            return
        raise nothing_checked("the function", products, ops=len(recorded))
    raise GradientMismatch(
        f"check_gradients: the function's gradient disagrees with central differences: "
        f"{bad.describe(eps)}, though each of its {len(recorded)} differentiable ops agrees "
        "at its own inputs: the function is not the composition of the ops it applied "
        "(state changed between calls, a value read with .numpy() and fed back as a "
        "constant, randomness that is not minidtr's), or it is not differentiable there."
    )


def conclusive(products: list[Products]) -> bool:
    """Whether the products decide anything: one was compared, or all were passed over
    at a pole or a domain's edge (where the function has no derivative to check)."""
    edges = bool(products) and all(p.skipped == "edge" for p in products)
    return edges or any(not p.skipped for p in products)


def nothing_checked(
    what: str, products: list[Products], application: Application | None = None, ops: int = 0
) -> GradientMismatch:
    """The error of a check that passed over every input (``conclusive`` is False)."""
    kinks = [p.describe_kink() for p in products if p.skipped == "kink"]
    op, site = (application.op, str(application.site)) if application else (None, "")
    also = f", and so do those of its {ops} differentiable ops at their own inputs" if ops else ""
    return GradientMismatch(
        f"check_gradients: nothing could be checked: at every input of {what} the "
        f"one-sided differences disagree ({'; '.join(kinks)}){also}, so each was passed "
        "over as a point with no derivative. Usually float32 arithmetic inside the function "
        "(an .astype(md.float32), layers not made with dtype=md.float64), whose rounding "
        "central differences cannot see through; else a kink (relu at 0) at every input: "
        "check at other inputs.",
        op,
        site,
    )


def check_settings(seed: Any, eps: Any, rtol: Any, atol: Any) -> None:
    """A bad setting would make some op's backward look wrong (rtol=-1 blamed matmul)."""
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"check_gradients: seed must be an int >= 0, got {seed!r}")
    for name, value, positive in (("eps", eps, True), ("rtol", rtol, False), ("atol", atol, False)):
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and (value > 0 if positive else value >= 0)):
            limit = "> 0" if positive else ">= 0"
            raise ValueError(
                f"check_gradients: {name} must be a finite number {limit}, got {value!r}"
            )


def _as_input(x: Any) -> np.ndarray:
    array = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    return array.astype(np.float64) if array.dtype.kind == "f" else array


def _evaluate(fn: Callable[..., Any], arrays: list[np.ndarray], state: dict) -> list:
    """The float outputs of ``fn`` at ``arrays`` (as host arrays), the generator reset."""
    random_ops.default_generator().bit_generator.state = state
    return [o.numpy() for o in _float_outputs(fn(*[tensor(a) for a in arrays]))]


def _float_outputs(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value] if value.dtype.kind == "f" else []
    if isinstance(value, dict):
        return [t for k in sorted_keys(value) for t in _float_outputs(value[k])]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _float_outputs(v)]
    return []


def _products(
    fn: Callable[..., Any],
    arrays: list[np.ndarray],
    floats: list[int],
    seed: int,
    eps: float,
    record: bool = False,
) -> tuple[list[Products], list[Application]]:
    """One ``Products`` per floating-point input, and the ops applied (when ``record``)."""
    rng = np.random.default_rng(seed)
    state = random_ops.default_generator().bit_generator.state
    directions = {i: rng.standard_normal(arrays[i].shape) for i in floats}
    leaves = [tensor(a, requires_grad=i in directions) for i, a in enumerate(arrays)]
    recorder = Recorder() if record else None
    allocator = leaves[0].cell.storage.allocator
    if recorder is not None:
        add_observer(allocator, recorder)
    try:
        random_ops.default_generator().bit_generator.state = state
        outputs = _float_outputs(fn(*leaves))
    finally:
        if recorder is not None:
            remove_observer(allocator, recorder)
    if not outputs:
        raise ValueError("check_gradients: the function returned no floating-point tensor")
    cotangents = [rng.standard_normal(o.shape) for o in outputs]
    total = None
    for o, u in zip(outputs, cotangents, strict=True):
        term = (o * tensor(u.astype(o.dtype))).sum()
        total = term if total is None else total + term
    wanted = [leaves[i] for i in floats]
    grads = autograd.grad(total, wanted) if total.requires_grad else [None] * len(wanted)
    products = []
    for i, g in zip(floats, grads, strict=True):
        backward = 0.0 if g is None else float(np.vdot(g.numpy(), directions[i]))
        products.append(
            _differences(fn, arrays, i, directions[i], cotangents, eps, state, backward)
        )
    return products, (recorder.applications if recorder is not None else [])


def _differences(
    fn: Callable[..., Any],
    arrays: list[np.ndarray],
    i: int,
    v: np.ndarray,
    cotangents: list[np.ndarray],
    eps: float,
    state: dict,
    backward: float,
) -> Products:
    def at(step: float) -> float:
        moved = list(arrays)
        moved[i] = arrays[i] + step * v
        outs = _evaluate(fn, moved, state)
        pairs = zip(cotangents, outs, strict=True)
        return sum(float(np.vdot(u, o.astype(np.float64))) for u, o in pairs)

    here, ahead, behind, again = at(0.0), at(eps), at(-eps), at(0.0)
    central = (ahead - behind) / (2 * eps)
    forward, backward_diff = (ahead - here) / eps, (here - behind) / eps
    # a pole (log at 0) or a domain's edge (sqrt at 0: not defined on one side); a NaN
    # here is the function's own, and checked
    skipped = ""
    if not math.isnan(here) and not all(map(math.isfinite, (here, ahead, behind))):
        skipped = "edge"
    elif abs(forward - backward_diff) > KINK * (1.0 + abs(central)):
        skipped = "kink"
    one_sided = (forward, backward_diff)
    return Products(i, arrays[i].shape, central, backward, skipped, one_sided, (here, again))


@dataclass
class Application:
    """One op applied by the function: the op, its inputs' values, where it was applied."""

    op: Any
    arrays: list[np.ndarray]
    site: Site


class Recorder:
    """An allocator observer that keeps each differentiable op applied, with copies of its
    inputs (the other observer calls do nothing)."""

    def __init__(self) -> None:
        self.applications: list[Application] = []

    def on_compute(self, recipe: Any, cells: list) -> None:
        op = recipe.op
        if not op.differentiable or all(c.dtype.kind != "f" for c in cells):
            return
        arrays = [np.array(array_of(cell), copy=True) for cell in recipe.inputs]
        if any(a.dtype.kind == "f" for a in arrays):
            self.applications.append(Application(op, arrays, call_site()))

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("on_"):
            return _ignore
        raise AttributeError(name)


def _ignore(*args: Any) -> None:
    pass


def _check_application(
    application: Application,
    seed: int,
    eps: float,
    rtol: float,
    atol: float,
    which: str = " It is the first op of the function whose vector-Jacobian product "
    "disagrees at the inputs it was applied to.",
    recorded: bool = True,
) -> list[Products]:
    """Raise ``GradientMismatch`` if one op's products disagree at its recorded inputs, or
    if it gives two values on the same inputs; returns its products (none for an op of a
    fixed dtype, such as a float32 scalar's, applied to float32 inputs: it cannot be
    checked in float64; ``recorded``: applied by a function, not given by the caller)."""
    op = application.op
    arrays = [_as_input(a) for a in application.arrays]
    floats = float_inputs(arrays)
    state = random_ops.default_generator().bit_generator.state
    try:
        with isolated_allocator():
            products, _ = _products(lambda *ts: apply(op, *ts), arrays, floats, seed, eps)
    except DTypeError:
        if recorded and any(a.dtype != np.float64 for a in application.arrays):
            return []
        raise
    finally:
        random_ops.default_generator().bit_generator.state = state
    site = application.site
    for p in products:
        if p.varies:
            raise GradientMismatch(
                f"check_gradients: {describe_op(op, site)} is not deterministic: "
                f"{p.describe_variation()}: its forward is not a function of its inputs "
                "(randomness that is not minidtr's, such as np.random, or state kept "
                "between calls), which central differences and recomputation both need.",
                op,
                str(site),
            )
        if not p.agree(rtol, atol):
            raise GradientMismatch(
                f"check_gradients: the backward of {describe_op(op, site)} disagrees with "
                f"central differences: {p.describe(eps)}.{which}",
                op,
                str(site),
            )
    return products


def float_inputs(arrays: list) -> list[int]:
    """The indices of the floating-point arrays: the inputs a gradient is checked by."""
    floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    if not floats:
        raise ValueError("check_gradients: no floating-point input to differentiate by")
    return floats
