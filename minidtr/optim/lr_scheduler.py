"""Learning-rate schedules, PyTorch's: ``StepLR`` and ``CosineAnnealingLR``.

A scheduler sets ``group["lr"]`` of each of its optimizer's param groups once when it is
made and again at each ``step()`` (call it after ``optimizer.step()``, once an epoch or
once a step, as the schedule is meant), by PyTorch's formulas, computed in the same
order so that the rates are the same floats: recursively from the current rate, as
PyTorch's ``get_lr`` (so a rate set by hand in between carries on). Each rate set is
checked as any setting is (``Hyperparameter``).

A param group added after the scheduler was made (``optimizer.add_param_group``): ``StepLR``
schedules it too, from its own rate, as PyTorch's does (its rates come from the current
ones alone). ``CosineAnnealingLR`` needs each group's initial rate, which it took when it
was made; PyTorch's goes on without the new group's and fails ``T_max`` epochs later with a
bare ``zip()`` error, so this one refuses at the next ``step()`` in one line naming both
counts: make the scheduler after the last ``add_param_group``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .optimizer import Optimizer


class LRScheduler:
    """The base: ``step()``, ``get_last_lr()``, ``state_dict()``, ``load_state_dict()``.
    A subclass defines ``get_lr``, the rates of the epoch ``last_epoch``, and sets
    ``follows_added_groups`` when those need no more than the groups' current rates."""

    follows_added_groups = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        where = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{where}: expects a minidtr optimizer, got {type(optimizer).__name__}")
        if not isinstance(last_epoch, numbers.Integral) or isinstance(last_epoch, bool):
            raise TypeError(f"{where}: last_epoch must be an int, got {last_epoch!r}")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for g, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"{where}: resuming at last_epoch={last_epoch} needs "
                        f"param_groups[{g}]['initial_lr'] (load the optimizer's state first)"
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = int(last_epoch)
        self._step_count = 0
        self._is_initial = True  # the first step sets the rates the optimizer has
        self.step()
        self._is_initial = False

    def get_lr(self) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} does not define get_lr()")

    def current_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def step(self) -> None:
        """The next epoch's rates, set in the optimizer's param groups."""
        self._check_group_count()
        self._step_count += 1
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = self.current_lrs()

    def _check_group_count(self) -> None:
        made_for, now = len(self.base_lrs), len(self.optimizer.param_groups)
        if now != made_for and not self.follows_added_groups:
            raise ValueError(
                f"{type(self).__name__}: made for {made_for} param group(s), the optimizer "
                f"has {now} now (add_param_group after the scheduler was made); make the "
                "scheduler after the last add_param_group"
            )

    def get_last_lr(self) -> list[float]:
        """The rates the last ``step()`` set, one per param group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer (PyTorch's)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


def _positive_int(where: str, what: str, value: Any) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise (ValueError if isinstance(value, numbers.Integral) else TypeError)(
            f"{where}: {what} must be an int >= 1, got {value!r}"
        )
    return int(value)


def _number(where: str, what: str, value: Any) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise (ValueError if isinstance(value, numbers.Real) else TypeError)(
            f"{where}: {what} must be a finite number, got {value!r}"
        )
    return value


class StepLR(LRScheduler):
    """Every ``step_size`` epochs, each rate times ``gamma`` (PyTorch's ``StepLR``). A group
    added later is scheduled too, from its own rate, as PyTorch's."""

    follows_added_groups = True

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ):
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = _number("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size:
            return self.current_lrs()
        return [lr * self.gamma for lr in self.current_lrs()]


class CosineAnnealingLR(LRScheduler):
    """Each rate from its initial one down to ``eta_min`` along half a cosine over ``T_max``
    epochs, and back up over the next ``T_max`` (``torch.optim.lr_scheduler.CosineAnnealingLR``:
    eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, taken step by step
    from the current rate as PyTorch does). It refuses to step once the optimizer has more
    groups than it was made for (see the module's docstring)."""

    def __init__(
        self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ):
        self.T_max = _positive_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = _number("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self.current_lrs()
        epoch, T_max, eta_min = self.last_epoch, self.T_max, self.eta_min
        if (epoch - 1 - T_max) % (2 * T_max) == 0:  # the bottom: up by the first step again
            return [
                lr + (base - eta_min) * (1 - math.cos(math.pi / T_max)) / 2
                for lr, base in zip(self.current_lrs(), self.base_lrs, strict=True)
            ]
        return [
            (1 + math.cos(math.pi * epoch / T_max))
            / (1 + math.cos(math.pi * (epoch - 1) / T_max))
            * (lr - eta_min)
            + eta_min
            for lr in self.current_lrs()
        ]
