"""Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay
(PyTorch's rule)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..ops.op import apply
from ..tensor import Tensor
from .fused import SGDUpdate
from .optimizer import Flag, Hyperparameter, Optimizer, ParamGroup


class SGD(Optimizer):
    """g = grad + weight_decay * p; with momentum, buf = g on the first step and
    buf = momentum * buf + g after, and g = buf (Nesterov: g = g + momentum * buf); then
    p = p - lr * g (``torch.optim.SGD`` with dampening 0). Each group of parameters
    (``update_groups``) is updated by one fused op, ``SGDUpdate``."""

    momentum = Hyperparameter()
    weight_decay = Hyperparameter()
    nesterov = Flag()
    neutral_options = {**Optimizer.neutral_options, "dampening": 0}

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults)
        self.momentum_buffers: list[Tensor | None] = [None] * len(self.params)

    def check_group(self, group: ParamGroup, where: str) -> None:
        if group["nesterov"] and not group["momentum"]:
            raise ValueError(f"SGD: nesterov=True needs a momentum above 0{where}")

    def add_param_state(self, count: int) -> None:
        self.momentum_buffers += [None] * count

    def __setstate__(self, state: dict) -> None:  # a checkpoint from before nesterov
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)

    def state_key(self, index: int) -> object:
        return self.momentum_buffers[index] is None

    def update_group(self, indices: list[int]) -> list[Tensor]:
        params, buffers = self.params, self.momentum_buffers
        group = self.settings(indices[0])
        momentum = group["momentum"]
        first = buffers[indices[0]] is None
        op = SGDUpdate(
            group["lr"], momentum, group["weight_decay"], first, len(indices), group["nesterov"]
        )
        inputs: list[Tensor] = []
        for i in indices:
            inputs += (params[i], params[i]._grad)
            if momentum and not first:
                inputs.append(buffers[i])
        out = apply(op, *inputs)
        if not momentum:
            return [out] if len(indices) == 1 else list(out)
        for k, i in enumerate(indices):
            buffers[i] = out[2 * k + 1]
        return list(out[0::2])

    def update(self, index: int, p: Tensor, grad: Tensor) -> Tensor:
        return self.update_group([index])[0]

    def param_state(self, index: int) -> dict[str, Any]:
        buf = self.momentum_buffers[index]
        return {} if buf is None else {"momentum_buffer": buf}

    def state_names(self) -> tuple[str, ...]:
        return ("momentum_buffer",)

    def load_param_state(self, index: int, state: dict[str, Any]) -> None:
        self.momentum_buffers[index] = state.get("momentum_buffer")
