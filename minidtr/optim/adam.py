"""Adam with bias correction and L2 weight decay added to the gradient (PyTorch's rule)."""

from __future__ import annotations

from collections.abc import Iterable

from ..ops.op import apply
from ..tensor import Tensor
from .fused import AdamUpdate
from .optimizer import Hyperparameter, Optimizer, hyperparameter


class Adam(Optimizer):
    """At step t: g = grad + weight_decay * p; m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g; p = p - (lr / (1 - b1^t)) * m /
    (sqrt(v) / sqrt(1 - b2^t) + eps) (``torch.optim.Adam``, amsgrad off), m and v zero
    before the first step. Each group of parameters is updated by one fused op,
    ``AdamUpdate``, which rounds in the order PyTorch's CPU kernels do (m by ``lerp``)."""

    eps = Hyperparameter()
    weight_decay = Hyperparameter()

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(params, lr)
        self.betas = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.param_steps = [0] * len(self.params)
        self.exp_avg: list[Tensor | None] = [None] * len(self.params)
        self.exp_avg_sq: list[Tensor | None] = [None] * len(self.params)

    @property
    def betas(self) -> tuple[float, float]:
        return self.__dict__["betas"]

    @betas.setter
    def betas(self, betas: tuple[float, float]) -> None:  # checked when set, as lr
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise TypeError(f"Adam: betas must be a pair of numbers, got {betas!r}")
        self.__dict__["betas"] = (
            hyperparameter("Adam", "betas[0]", betas[0], below=1.0),
            hyperparameter("Adam", "betas[1]", betas[1], below=1.0),
        )

    def state_key(self, index: int) -> object:
        return self.param_steps[index]

    def update_group(self, indices: list[int]) -> list[Tensor]:
        t = self.param_steps[indices[0]] + 1
        op = AdamUpdate(self.lr, self.betas, self.eps, self.weight_decay, t, len(indices))
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

    def __repr__(self) -> str:
        return (
            f"Adam({len(self.params)} tensors, lr={self.lr}, betas={self.betas}, "
            f"eps={self.eps}, weight_decay={self.weight_decay})"
        )
