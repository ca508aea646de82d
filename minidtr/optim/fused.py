"""The optimizers' fused update ops: one op per parameter per step.

Each takes a parameter, its gradient and its state and returns the new
parameter and the new state, computed in one kernel. Written as separate
elementwise ops, an SGD-with-momentum update was four ops and two scalar
constants per parameter, more than half of a small ResNet step's ops, each
costing the allocator's bookkeeping; fused, it is one. The kernels do the same
floating-point operations in the same order as those separate ops did (for SGD)
or as ``torch.optim`` does (for Adam), scalars rounded to the parameter's dtype
first, so results are deterministic and match PyTorch's single-tensor CPU path.

The ops run under ``updating()`` (no graph, constant outputs); their
intermediate values live only inside the kernel, so the allocator counts the
outputs only.
"""

from __future__ import annotations

from ..ops.op import Op, ShapeError, describe, float_dtype
from ..runtime.storage import Cell


def _check_like(op: Op, cells: tuple[Cell, ...]) -> None:
    """Every input has the parameter's shape and one floating-point dtype."""
    shape = cells[0].shape
    for c in cells:
        if c.shape != shape:
            raise ShapeError(f"{op.name}: inputs must all have the parameter's shape "
                             f"({describe(cells)})")  # fmt: skip
    float_dtype(op, *cells)


class SGDUpdate(Op):
    """(p, grad[, buf]) -> (new p[, new buf]): g = grad + weight_decay * p; with momentum,
    buf = g on the first step (no buf given) and momentum * buf + g after, and g = buf;
    new p = p - lr * g."""

    name = "sgd_update"
    differentiable = False

    def __init__(self, lr: float, momentum: float, weight_decay: float, first: bool):
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.first = first
        self.n_outputs = 2 if momentum else 1

    def infer(self, *cells: Cell):
        expected = 2 if (not self.momentum or self.first) else 3
        if len(cells) != expected:
            raise TypeError(f"{self.name}: expects {expected} inputs, got {len(cells)}")
        _check_like(self, cells)
        meta = (cells[0].shape, cells[0].dtype)
        return [meta] * self.n_outputs

    def forward(self, xp, p, grad, buf=None):
        scalar = p.dtype.type
        g = grad
        if self.weight_decay:
            g = p * scalar(self.weight_decay)
            g += grad  # grad + weight_decay * p: one rounding of the product, one of the sum
        if not self.momentum:
            return p - g * scalar(self.lr)
        if self.first:
            buf = g.copy() if g is grad else g
        else:
            buf = buf * scalar(self.momentum)
            buf += g
        return p - buf * scalar(self.lr), buf

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        flops_per_element = 2 + (2 if self.weight_decay else 0) + (2 if self.momentum else 0)
        n = 1
        for d in in_metas[0][0]:
            n *= d
        return float(flops_per_element * n), nbytes


class AdamUpdate(Op):
    """(p, grad[, m, v]) -> (new p, new m, new v) at step ``t`` (m = v = 0 before the first):
    g = grad + weight_decay * p; m = lerp(m, g, 1 - beta1); v = beta2 * v + (1 - beta2) * g * g;
    new p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps), each step in
    the order ``torch.optim.Adam`` computes it (``lerp_``, ``addcmul_``, ``addcdiv_``)."""

    name = "adam_update"
    n_outputs = 3
    differentiable = False

    def __init__(
        self, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, step: int
    ):
        self.lr = float(lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.step = int(step)

    def infer(self, *cells: Cell):
        expected = 2 if self.step == 1 else 4
        if len(cells) != expected:
            raise TypeError(f"{self.name}: expects {expected} inputs at step {self.step}, "
                            f"got {len(cells)}")  # fmt: skip
        _check_like(self, cells)
        return [(cells[0].shape, cells[0].dtype)] * 3

    def forward(self, xp, p, grad, m=None, v=None):
        scalar = p.dtype.type
        beta1, beta2 = self.betas
        t = self.step
        g = grad
        if self.weight_decay:
            g = p * scalar(self.weight_decay)
            g += grad
        if m is None:
            m = v = xp.zeros_like(p)
        weight = 1.0 - beta1
        # lerp_: start + w * (end - start) for w < 0.5, else end - (end - start) * (1 - w)
        new_m = g - m
        if weight < 0.5:
            new_m *= scalar(weight)
            new_m += m
        else:
            new_m *= scalar(1.0) - scalar(weight)  # in the parameter's dtype, as torch's opmath
            xp.subtract(g, new_m, out=new_m)
        new_v = v * scalar(beta2)
        square = g * scalar(1.0 - beta2)  # addcmul_: self + value * t1 * t2
        square *= g
        new_v += square
        del square
        denom = xp.sqrt(new_v)
        denom /= scalar((1.0 - beta2**t) ** 0.5)
        denom += scalar(self.eps)
        new_p = new_m * scalar(-self.lr / (1.0 - beta1**t))  # addcdiv_: self + value * t1 / t2
        new_p /= denom
        new_p += p
        return new_p, new_m, new_v

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        n = 1
        for d in in_metas[0][0]:
            n *= d
        return float(12 * n), nbytes
