"""Stochastic gradient descent with momentum and L2 weight decay (PyTorch's rule)."""

from __future__ import annotations

from collections.abc import Iterable

from ..ops.op import apply
from ..tensor import Tensor
from .fused import SGDUpdate
from .optimizer import Optimizer


class SGD(Optimizer):
    """g = grad + weight_decay * p; with momentum, buf = g on the first step and
    buf = momentum * buf + g after, and g = buf; then p = p - lr * g
    (``torch.optim.SGD`` with dampening 0, no Nesterov). Each parameter's update is one
    fused op, ``SGDUpdate``."""

    def __init__(
        self, params: Iterable[Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0
    ):
        super().__init__(params, lr)
        if momentum < 0.0:
            raise ValueError(f"SGD: momentum must be >= 0, got {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"SGD: weight_decay must be >= 0, got {weight_decay}")
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.momentum_buffers: list[Tensor | None] = [None] * len(self.params)

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
