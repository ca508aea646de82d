"""Adam with bias correction, its weight decay added to the gradient or decoupled (AdamW),
as PyTorch's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..ops.op import apply
from ..tensor import Tensor
from .fused import AdamUpdate
from .optimizer import Flag, Hyperparameter, Optimizer, hyperparameter


class Betas(Hyperparameter):
    """Adam's pair of averaging factors, each in [0, 1)."""

    def check(self, where: str, value: Any) -> tuple[float, float]:
        if not isinstance(value, tuple | list) or len(value) != 2:
            raise TypeError(f"{where}: betas must be a pair of numbers, got {value!r}")
        return (
            hyperparameter(where, "betas[0]", value[0], below=1.0),
            hyperparameter(where, "betas[1]", value[1], below=1.0),
        )


class Adam(Optimizer):
    """At step t: g = grad + weight_decay * p (with ``decoupled_weight_decay``, AdamW's,
    g = grad and p = p * (1 - lr * weight_decay) instead); m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g; p = p - (lr / (1 - b1^t)) * m /
    (sqrt(v) / sqrt(1 - b2^t) + eps) (``torch.optim.Adam``, amsgrad off), m and v zero
    before the first step. Each group of parameters is updated by one fused op,
    ``AdamUpdate``, which rounds in the order PyTorch's CPU kernels do (m by ``lerp``)."""

    betas = Betas()
    eps = Hyperparameter()
    weight_decay = Hyperparameter()
    decoupled_weight_decay = Flag()
    neutral_options = {**Optimizer.neutral_options, "amsgrad": False}

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        decoupled_weight_decay: bool = False,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)
        self.param_steps = [0] * len(self.params)
        self.exp_avg: list[Tensor | None] = [None] * len(self.params)
        self.exp_avg_sq: list[Tensor | None] = [None] * len(self.params)

    def add_param_state(self, count: int) -> None:
        self.param_steps += [0] * count
        self.exp_avg += [None] * count
        self.exp_avg_sq += [None] * count

    def __setstate__(self, state: dict) -> None:  # a checkpoint from before AdamW
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("decoupled_weight_decay", False)

    def state_key(self, index: int) -> object:
        return self.param_steps[index]

    def update_group(self, indices: list[int]) -> list[Tensor]:
        t = self.param_steps[indices[0]] + 1
        group = self.settings(indices[0])
        op = AdamUpdate(
            group["lr"],
            group["betas"],
            group["eps"],
            group["weight_decay"],
            t,
            len(indices),
            decoupled=group["decoupled_weight_decay"],
        )
        inputs: list[Tensor] = []
        for i in indices:
            inputs += (self.params[i], self.params[i]._grad)
            if t > 1:
                inputs += (self.exp_avg[i], self.exp_avg_sq[i])
        out = apply(op, *inputs)
        for k, i in enumerate(indices):  # only once the update has run: a bad gradient
            self.param_steps[i] = t  # changes nothing
            self.exp_avg[i], self.exp_avg_sq[i] = out[3 * k + 1], out[3 * k + 2]
        return list(out[0::3])

    def update(self, index: int, p: Tensor, grad: Tensor) -> Tensor:
        return self.update_group([index])[0]

    def param_state(self, index: int) -> dict[str, Any]:
        if not self.param_steps[index]:
            return {}
        return {
            "step": self.param_steps[index],
            "exp_avg": self.exp_avg[index],
            "exp_avg_sq": self.exp_avg_sq[index],
        }

    def state_names(self) -> tuple[str, ...]:
        return ("step", "exp_avg", "exp_avg_sq")

    def load_param_state(self, index: int, state: dict[str, Any]) -> None:
        self.param_steps[index] = state.get("step", 0)
        self.exp_avg[index] = state.get("exp_avg")
        self.exp_avg_sq[index] = state.get("exp_avg_sq")


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``, its defaults: weight_decay
    0.01): each step first scales p by 1 - lr * weight_decay, and the gradient is Adam's
    own."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled_weight_decay=True)
