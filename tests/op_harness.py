"""The generic op-test harness: every op goes through the same six checks.

An ``OpCase`` names an op's minidtr function, a NumPy reference, optionally the
PyTorch equivalent, and the input shapes to try. ``define_tests`` then verifies,
for each shape set and dtype:

1. forward against the NumPy reference;
2. backward against float64 central differences along a random direction
   (the directional derivative <grad, v> of a random projection of the outputs);
3. where torch imports: forward and gradients against PyTorch;
4. recompute-from-recipe: each output and each gradient, evicted and
   recomputed from its recipe, is bit-identical;
5. bad inputs (``OpCase.bad``) raise an error naming the op;
6. every byte counted: on inputs grown to a megabyte or more (``large_shapes``), each
   kernel of the forward and the backward allocates, beyond its outputs, at most its
   op's declared workspace plus NumPy's iterator buffers (``watch_kernels``). A case
   whose function fixes its shapes gives ``large`` itself, or says in ``unwatched`` why
   it cannot be watched.

A test module declares ``CASES = [...]`` and does ``globals().update(define_tests(CASES))``.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import minidtr as md
from minidtr.runtime.realmem import KERNEL_SLACK, watch_kernels
from minidtr.testing import isolated_allocator, recompute

HAS_TORCH = importlib.util.find_spec("torch") is not None
DEVICE = "cpu"

FORWARD_TOL = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-10, 1e-12)}


def standard_normal(rng: np.random.Generator, shapes, dtype) -> list[np.ndarray]:
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@dataclass
class OpCase:
    name: str
    fn: Callable[..., Any]  # minidtr: (*tensors) -> Tensor | tuple of Tensors
    reference: Callable[..., Any]  # NumPy: (*arrays) -> array | tuple of arrays
    shapes: Sequence[tuple]  # one tuple of input shapes per variant
    make: Callable[..., list[np.ndarray]] = standard_normal  # (rng, shapes, dtype) -> arrays
    dtypes: tuple = (np.float32, np.float64)
    grad_inputs: tuple[int, ...] | None = None  # default: every floating-point input
    torch_fn: Callable[..., Any] | None = None  # (torch, *torch_tensors) -> tensor(s)
    bad: Sequence[tuple] = ()  # shape tuples (or array lists) that must raise
    bad_error: type[Exception] | tuple = (ValueError, TypeError, IndexError)
    grad_tol: float = 1e-6
    forward_tol: dict = field(default_factory=lambda: dict(FORWARD_TOL))
    large: tuple | None = None  # input shapes for the memory check (default: grown)
    unwatched: str = ""  # why the memory check cannot run on this case, if it cannot

    def inputs(self, shapes, dtype, seed: int = 0) -> list[np.ndarray]:
        return self.make(np.random.default_rng(seed), shapes, np.dtype(dtype))

    def grad_indices(self, arrays) -> tuple[int, ...]:
        if self.grad_inputs is not None:
            return self.grad_inputs
        return tuple(i for i, a in enumerate(arrays) if a.dtype.kind == "f")


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def to_tensors(arrays, grad_indices=(), device=DEVICE) -> list[md.Tensor]:
    return [
        md.tensor(a, requires_grad=i in grad_indices, device=device) for i, a in enumerate(arrays)
    ]


def projection_weights(outputs, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(o.shape).astype(o.dtype) for o in outputs]


def check_forward(case: OpCase, shapes, dtype) -> None:
    arrays = case.inputs(shapes, dtype)
    got = as_tuple(case.fn(*to_tensors(arrays)))
    want = as_tuple(case.reference(*arrays))
    assert len(got) == len(want), f"{case.name}: {len(got)} outputs, reference has {len(want)}"
    rtol, atol = case.forward_tol.get(np.dtype(dtype), (1e-5, 1e-6))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{case.name} output {i}: shape {g.shape}, expected {w.shape}"
        assert g.dtype == w.dtype, f"{case.name} output {i}: dtype {g.dtype}, expected {w.dtype}"
        np.testing.assert_allclose(
            g.numpy(), w, rtol=rtol, atol=atol, err_msg=f"{case.name} output {i}, {shapes}, {dtype}"
        )


def _projected(case: OpCase, arrays, weights) -> float:
    """<w, f(x)> computed in float64 by the minidtr op itself."""
    with md.no_grad():
        outs = as_tuple(case.fn(*to_tensors(arrays)))
    return float(
        sum(
            (o.numpy().astype(np.float64) * w).sum()
            for o, w in zip(outs, weights, strict=True)
            if o.dtype.kind == "f"
        )
    )


def analytic_grads(case: OpCase, arrays, weights=None):
    """Gradients of <w, f(x)> w.r.t. the grad inputs (tensors with recipes, from md.grad);
    and the output tensors and weights."""
    idx = case.grad_indices(arrays)
    tensors = to_tensors(arrays, idx)
    outs = as_tuple(case.fn(*tensors))
    if weights is None:
        weights = projection_weights(outs)
    total = None
    for o, w in zip(outs, weights, strict=True):
        if o.dtype.kind != "f" or not o.requires_grad:
            continue
        term = (o * md.tensor(w)).sum()
        total = term if total is None else total + term
    grads = md.grad(total, [tensors[i] for i in idx])
    return grads, outs, weights


def check_gradient(case: OpCase, shapes, eps: float = 1e-6) -> None:
    arrays = case.inputs(shapes, np.float64)
    idx = case.grad_indices(arrays)
    if not idx:
        return
    grads, outs, weights = analytic_grads(case, arrays)
    rng = np.random.default_rng(2)
    directions = {i: rng.standard_normal(arrays[i].shape) for i in idx}
    analytic = sum(
        float((g.numpy() * directions[i]).sum()) for g, i in zip(grads, idx, strict=True)
    )
    plus = [a + eps * directions[i] if i in directions else a for i, a in enumerate(arrays)]
    minus = [a - eps * directions[i] if i in directions else a for i, a in enumerate(arrays)]
    numeric = (_projected(case, plus, weights) - _projected(case, minus, weights)) / (2 * eps)
    scale = max(1.0, abs(numeric))
    assert abs(analytic - numeric) <= case.grad_tol * scale, (
        f"{case.name} {shapes}: directional derivative {analytic!r} (backward) vs "
        f"{numeric!r} (central differences)"
    )


def check_torch(case: OpCase, shapes, dtype) -> None:
    import torch

    arrays = case.inputs(shapes, dtype)
    idx = case.grad_indices(arrays)
    if idx:
        grads, outs, weights = analytic_grads(case, arrays)
    else:  # an op without gradients (argmax): its outputs alone
        grads, outs = [], as_tuple(case.fn(*to_tensors(arrays)))
        weights = projection_weights(outs)
    torch_inputs = [torch.tensor(a, requires_grad=i in idx) for i, a in enumerate(arrays)]
    torch_outs = as_tuple(case.torch_fn(torch, *torch_inputs))
    rtol, atol = (1e-4, 1e-5) if np.dtype(dtype) == np.float32 else (1e-9, 1e-11)
    total = 0
    for o, t, w in zip(outs, torch_outs, weights, strict=True):
        np.testing.assert_allclose(
            o.numpy(),
            t.detach().numpy(),
            rtol=rtol,
            atol=atol,
            err_msg=f"{case.name} forward vs torch, {shapes}, {dtype}",
        )
        if t.requires_grad:
            total = total + (t * torch.tensor(w)).sum()
    if idx and torch.is_tensor(total):
        total.backward()
        for g, i in zip(grads, idx, strict=True):
            np.testing.assert_allclose(
                g.numpy(),
                torch_inputs[i].grad.numpy(),
                rtol=rtol * 10,
                atol=atol * 10,
                err_msg=f"{case.name} grad of input {i} vs torch, {shapes}, {dtype}",
            )


def check_recompute(case: OpCase, shapes, dtype) -> None:
    """Every output and gradient, evicted and recomputed from its recipe, is bit-identical."""
    arrays = case.inputs(shapes, dtype)
    grads, outs, _ = (
        analytic_grads(case, arrays)
        if case.grad_indices(arrays)
        else ([], as_tuple(case.fn(*to_tensors(arrays))), None)
    )
    checked = 0
    for t in (*outs, *grads):
        if t is None or not t.storage.evictable:
            continue
        before = t.numpy()
        after = recompute(t)
        assert before.tobytes() == after.tobytes(), f"{case.name}: recomputed value differs"
        checked += 1
    assert checked or all(not t.storage.evictable for t in outs), case.name


def check_bad_inputs(case: OpCase) -> None:
    for bad in case.bad:
        arrays = list(bad) if isinstance(bad, list) else case.inputs(bad, np.float32)
        with pytest.raises(case.bad_error) as info:
            case.fn(*to_tensors(arrays))
        assert case.name.split("[")[0] in str(info.value), (
            f"the error for bad input {bad} does not name the op: {info.value}"
        )


LARGE_BYTES = 1 << 20  # the memory check's inputs: the largest is at least this (float32)


def large_shapes(case: OpCase) -> tuple:
    """``case.large``, or its largest shape variant with every dimension above 1 grown by
    the smallest factor that makes its largest input ``LARGE_BYTES`` in float32: far
    past ``KERNEL_SLACK``, so an undeclared temporary of an input's or an output's size
    shows."""
    if case.large is not None:
        return case.large

    def largest(shapes) -> int:
        return max((4 * math.prod(s) for s in shapes), default=0)

    shapes = max(case.shapes, key=largest)
    factor = 2
    while True:
        grown = tuple(tuple(d * factor if d > 1 else d for d in s) for s in shapes)
        if largest(grown) >= LARGE_BYTES:
            return grown
        factor += 1


def check_memory(case: OpCase) -> None:
    """Every kernel of the forward and the backward on ``large_shapes`` allocates at most
    its declared workspace plus NumPy's iterator buffers beyond its outputs (watched on
    the second run: the first may fill caches)."""
    shapes = large_shapes(case)
    arrays = case.inputs(shapes, np.float32)
    assert max(a.nbytes for a in arrays) >= LARGE_BYTES, (case.name, shapes)

    def run() -> None:
        if case.grad_indices(arrays):
            analytic_grads(case, arrays)
        else:
            case.fn(*to_tensors(arrays))

    with isolated_allocator() as allocator:
        run()  # first uses (imports, caches) before the watched run
        with watch_kernels(allocator) as watched:
            run()
    assert watched.records, f"{case.name}: no kernel ran"
    over = [r for r in watched.records if r.extra > r.declared + KERNEL_SLACK]
    assert not over, f"{case.name} on {shapes}:\n" + "\n".join(map(repr, over))


def parametrize_cases(cases: Sequence[OpCase]):
    """pytest parameters (case, shapes, dtype) for every variant of every case."""
    params = []
    for case in cases:
        for shapes in case.shapes:
            for dtype in case.dtypes:
                params.append(
                    pytest.param(
                        case, shapes, np.dtype(dtype), id=f"{case.name}-{shapes}-{np.dtype(dtype)}"
                    )
                )
    return params


def define_tests(cases: Sequence[OpCase], prefix: str = "test") -> dict[str, Callable]:
    """The six checks as pytest test functions over ``cases``, by name
    (``{prefix}_forward``, ``{prefix}_gradient``, ...): a test module does
    ``globals().update(define_tests(CASES))``."""
    variants = parametrize_cases(cases)
    grad_variants = [p for p in variants if p.values[2] == np.float64]

    @pytest.mark.parametrize("case,shapes,dtype", variants)
    def test_forward(case, shapes, dtype):
        check_forward(case, shapes, dtype)

    @pytest.mark.parametrize("case,shapes,dtype", grad_variants)
    def test_gradient(case, shapes, dtype):
        check_gradient(case, shapes)

    @pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
    @pytest.mark.parametrize(
        "case,shapes,dtype", [p for p in variants if p.values[0].torch_fn is not None]
    )
    def test_torch(case, shapes, dtype):
        check_torch(case, shapes, dtype)

    @pytest.mark.parametrize("case,shapes,dtype", variants)
    def test_recompute(case, shapes, dtype):
        check_recompute(case, shapes, dtype)

    @pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in cases if c.bad])
    def test_bad_inputs(case):
        check_bad_inputs(case)

    @pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in cases if not c.unwatched])
    def test_memory(case):
        check_memory(case)

    checks = (test_forward, test_gradient, test_torch, test_recompute, test_bad_inputs, test_memory)
    return {prefix + check.__name__.removeprefix("test"): check for check in checks}
