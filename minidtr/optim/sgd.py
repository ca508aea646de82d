"""Stochastic gradient descent with momentum and L2 weight decay (PyTorch's rule)."""

from __future__ import annotations

from collections.abc import Iterable

from ..ops.op import apply
from ..tensor import Tensor
from .fused import SGDUpdate
from .optimizer import Hyperparameter, Optimizer


class SGD(Optimizer):
    """g = grad + weight_decay * p; with momentum, buf = g on the first step and
    buf = momentum * buf + g after, and g = buf; then p = p - lr * g
    (``torch.optim.SGD`` with dampening 0, no Nesterov). Each group of parameters
    (``update_groups``) is updated by one fused op, ``SGDUpdate``."""

    momentum = Hyperparameter()
    weight_decay = Hyperparameter()

    def __init__(
        self, params: Iterable[Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0
    ):
        super().__init__(params, lr)
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.momentum_buffers: list[Tensor | None] = [None] * len(self.params)

    def state_key(self, index: int) -> object:
        return self.momentum_buffers[index] is None

    def update_group(self, indices: list[int]) -> list[Tensor]:
        params, buffers = self.params, self.momentum_buffers
        first = buffers[indices[0]] is None
        op = SGDUpdate(self.lr, self.momentum, self.weight_decay, first, len(indices))
        inputs: list[Tensor] = []
        for i in indices:
            inputs += (params[i], params[i]._grad)
            if self.momentum and not first:
                inputs.append(buffers[i])
        out = apply(op, *inputs)
        if not self.momentum:
            return [out] if len(indices) == 1 else list(out)
        for k, i in enumerate(indices):
            buffers[i] = out[2 * k + 1]
        return list(out[0::2])

    def update(self, index: int, p: Tensor, grad: Tensor) -> Tensor:
        if not self.momentum:
            return apply(SGDUpdate(self.lr, 0.0, self.weight_decay, False), p, grad)
        buf = self.momentum_buffers[index]
        op = SGDUpdate(self.lr, self.momentum, self.weight_decay, first=buf is None)
        state = () if buf is None else (buf,)
        new_p, self.momentum_buffers[index] = apply(op, p, grad, *state)
        return new_p

    def __repr__(self) -> str:
        return (
            f"SGD({len(self.params)} tensors, lr={self.lr}, momentum={self.momentum}, "
            f"weight_decay={self.weight_decay})"
        )
