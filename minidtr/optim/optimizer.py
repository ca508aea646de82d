"""``Optimizer``: the parameter list, ``zero_grad`` and the copy-on-write update.

Every update computes a parameter's new value with minidtr ops under
``no_grad`` and ``as_constants`` and rebinds the parameter's handle to it
(``Tensor.assign``). Nothing is written in place, so a recipe that read the
old value (an activation still alive, evicted or not) recomputes exactly what
it computed before the step. New values and optimizer state are constants:
they keep no recipe, so no chain of recipes grows from step to step.

The built-in optimizers update several parameters with one op (``update_group``):
the parameters are packed into groups (``update_groups``) no larger together than
the largest parameter, so a step never needs more room at once than the largest
parameter's own update did, while a network of many small tensors (a ResNet's
batch-norm scales and shifts) pays the per-op bookkeeping once per group.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterable, Iterator
from typing import Any

from ..autograd import no_grad
from ..ops.op import as_constants
from ..tensor import Tensor


@contextlib.contextmanager
def updating() -> Iterator[None]:
    """The mode every optimizer update runs in: no graph, constant results."""
    with no_grad(), as_constants():
        yield


def hyperparameter(where: str, what: str, value, below: float | None = None) -> float:
    """``value`` as a float, if it is a finite number >= 0 (and < ``below`` when given),
    else an error naming the optimizer and the argument (NaN is refused, as by PyTorch)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{where}: {what} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{where}: {what} must be >= 0 and finite, got {value}")
    if below is not None and not value < below:
        raise ValueError(f"{where}: {what} must be in [0, {below:g}), got {value}")
    return value


class Hyperparameter:
    """An optimizer's setting, checked by ``hyperparameter`` whenever it is set: in the
    constructor, and by a schedule that changes ``opt.lr`` mid-training (NaN there
    turned every weight NaN, a string failed inside the update op). Kept in the
    instance's ``__dict__`` under its own name, so that pickles carry it as before."""

    def __init__(self, below: float | None = None):
        self.below = below

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, optimizer: Any, owner: type | None = None) -> Any:
        return self if optimizer is None else optimizer.__dict__[self.name]

    def __set__(self, optimizer: Any, value: Any) -> None:
        where = type(optimizer).__name__
        optimizer.__dict__[self.name] = hyperparameter(where, self.name, value, self.below)


def update_groups(params: list[Tensor]) -> list[list[int]]:
    """The parameters' indices packed into groups that one op updates: same device and
    dtype, at most as many bytes together as the largest parameter (first fit, largest
    first; each group in parameter order). Deterministic: it depends on the shapes only."""
    capacity = max(p.nbytes for p in params)
    order = sorted(range(len(params)), key=lambda i: -params[i].nbytes)  # stable: ties by index
    groups: list[list[int]] = []
    room: list[int] = []
    kinds: list[tuple] = []
    for i in order:
        p = params[i]
        kind = (p.device, p.dtype)
        for g, group in enumerate(groups):
            if kinds[g] == kind and room[g] >= p.nbytes:
                group.append(i)
                room[g] -= p.nbytes
                break
        else:
            groups.append([i])
            room.append(capacity - p.nbytes)
            kinds.append(kind)
    for group in groups:
        group.sort()
    groups.sort(key=lambda group: group[0])
    return groups


class Optimizer:
    lr = Hyperparameter()

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params = self._check_params(params)
        self.lr = lr
        self.groups = update_groups(self.params)
        # parameter index -> the gradient it was updated with by a step that an error
        # stopped part-way: the step run again skips it while that gradient is the same
        self.stopped_step: dict[int, Tensor] = {}

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
            if p.grad_fn is not None or p.dtype.kind != "f":
                raise ValueError(
                    f"{name}: params[{i}] (shape {p.shape}, {p.dtype}) must be a leaf "
                    "floating-point tensor (a parameter, not a value computed from one)"
                )
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        if not out:
            raise ValueError(f"{name}: got an empty parameter list")
        return out

    def __setstate__(self, state: dict) -> None:  # a checkpoint from before stopped_step
        self.__dict__.update(state)
        self.__dict__.setdefault("stopped_step", {})

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (the next backward starts from nothing)."""
        for p in self.params:
            p._grad = None  # (the slot behind ``Tensor.grad``: parameters are leaves)
        self.stopped_step.clear()

    def step(self) -> None:
        """Update every parameter that has a gradient; skip those whose grad is None (a
        parameter frozen with ``requires_grad = False`` gets none, as in PyTorch).
        Within a group, parameters whose state differs (a first step, say) are updated
        by separate ops, one per kind of state (``state_key``).

        Groups are updated one after another, each freeing its old values before the
        next runs, so a step needs no more room than its largest group. A step that an
        error stops part-way (a ``BudgetError``, Ctrl-C) leaves the groups it finished
        updated; run again (with a larger budget, say) on the same gradients, it updates
        only the rest, so that no parameter takes one gradient twice."""
        params, done = self.params, self.stopped_step
        with updating():
            for group in self.groups:
                by_state: dict = {}
                for index in group:
                    grad = params[index]._grad
                    if grad is not None and done.get(index) is not grad:
                        by_state.setdefault(self.state_key(index), []).append(index)
                for indices in by_state.values():
                    new = self.update_group(indices)
                    for index, value in zip(indices, new, strict=True):
                        done[index] = params[index]._grad
                        params[index].assign(value)
        done.clear()

    def state_key(self, index: int) -> object:
        """Parameters of one group with equal keys are updated by one op."""
        return index

    def update_group(self, indices: list[int]) -> list[Tensor]:
        """The new values of the parameters at ``indices`` (equal ``state_key``s), in
        order; by default one ``update`` each (runs inside ``updating()``)."""
        return [self.update(i, self.params[i], self.params[i]._grad) for i in indices]

    def update(self, index: int, p: Tensor, grad: Tensor) -> Tensor:
        """The new value of parameter ``index`` (runs inside ``updating()``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.params)} tensors, lr={self.lr})"
