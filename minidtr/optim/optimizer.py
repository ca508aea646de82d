"""``Optimizer``: the parameter list, ``zero_grad`` and the copy-on-write update.

Every update computes a parameter's new value with minidtr ops under
``no_grad`` and ``as_constants`` and rebinds the parameter's handle to it
(``Tensor.assign``). Nothing is written in place, so a recipe that read the
old value (an activation still alive, evicted or not) recomputes exactly what
it computed before the step. New values and optimizer state are constants:
they keep no recipe, so no chain of recipes grows from step to step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from ..autograd import no_grad
from ..ops.op import as_constants
from ..tensor import Tensor


@contextlib.contextmanager
def updating() -> Iterator[None]:
    """The mode every optimizer update runs in: no graph, constant results."""
    with no_grad(), as_constants():
        yield


class Optimizer:
    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params = self._check_params(params)
        if lr < 0.0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        self.lr = lr

    def _check_params(self, params: Iterable[Tensor]) -> list[Tensor]:
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(
                f"{name}: params must be an iterable of Tensors (e.g. "
                "model.parameters()), got a single Tensor"
            )
        out: list[Tensor] = []
        seen: set[int] = set()
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: params[{i}] is a {type(p).__name__}, not a Tensor")
            if p.grad_fn is not None or not p.requires_grad:
                raise ValueError(
                    f"{name}: params[{i}] (shape {p.shape}) must be a leaf tensor "
                    "with requires_grad=True"
                )
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        if not out:
            raise ValueError(f"{name}: got an empty parameter list")
        return out

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (the next backward starts from nothing)."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update every parameter that has a gradient; skip those whose grad is None."""
        with updating():
            for index, p in enumerate(self.params):
                if p.grad is not None:
                    p.assign(self.update(index, p, p.grad))

    def update(self, index: int, p: Tensor, grad: Tensor) -> Tensor:
        """The new value of parameter ``index`` (runs inside ``updating()``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.params)} tensors, lr={self.lr})"
