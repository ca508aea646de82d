"""The optimizers' fused update ops: one op per group of parameters per step.

Each takes parameters, their gradients and their state and returns the new
parameters and the new state, computed in one kernel (a loop over the group's
parameters, each updated on its own: the group changes no rounding). Written as separate
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


def _check_group(op: Op, cells: tuple[Cell, ...], per_param: int, count: int) -> list:
    """Inputs ``per_param`` per parameter (parameter first), each parameter's alike;
    returns one output (shape, dtype) per parameter."""
    if len(cells) != per_param * count:
        what = f"{per_param} inputs" + (f" for each of {count} parameters" if count > 1 else "")
        raise TypeError(f"{op.name}: expects {what}, got {len(cells)}")
    metas = []
    for start in range(0, len(cells), per_param):
        chunk = cells[start : start + per_param]
        _check_like(op, chunk)
        metas.append((chunk[0].shape, chunk[0].dtype))
    return metas


def _elements(in_metas, per_param: int) -> int:
    n = 0
    for shape, _ in in_metas[::per_param]:
        size = 1
        for d in shape:
            size *= d
        n += size
    return n


class SGDUpdate(Op):
    """(p, grad[, buf]) -> (new p[, new buf]) for each of ``count`` parameters (inputs and
    outputs in that order, parameter after parameter): g = grad + weight_decay * p; with
    momentum, buf = g on the first step (no buf given) and momentum * buf + g after, and
    g = buf; new p = p - lr * g."""

    name = "sgd_update"
    differentiable = False

    def __init__(
        self, lr: float, momentum: float, weight_decay: float, first: bool, count: int = 1
    ):
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.first = first
        self.count = int(count)
        self.n_outputs = (2 if momentum else 1) * self.count

    @property
    def per_param(self) -> int:
        return 2 if (not self.momentum or self.first) else 3

    def infer(self, *cells: Cell):
        metas = _check_group(self, cells, self.per_param, self.count)
        if not self.momentum:
            return metas
        return [meta for meta in metas for _ in range(2)]

    def forward(self, xp, *arrays):
        k = self.per_param
        if self.count == 1:
            return self.update(*arrays)
        out: list = []
        for start in range(0, len(arrays), k):
            result = self.update(*arrays[start : start + k])
            if self.momentum:
                out += result
            else:
                out.append(result)
        return tuple(out)

    def update(self, p, grad, buf=None):
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
        return float(flops_per_element * _elements(in_metas, self.per_param)), nbytes


class AdamUpdate(Op):
    """(p, grad[, m, v]) -> (new p, new m, new v) at step ``t`` (m = v = 0 before the first)
    for each of ``count`` parameters (parameter after parameter): g = grad + weight_decay
    * p; m = lerp(m, g, 1 - beta1); v = beta2 * v + (1 - beta2) * g * g;
    new p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps), each step in
    the order ``torch.optim.Adam`` computes it (``lerp_``, ``addcmul_``, ``addcdiv_``)."""

    name = "adam_update"
    differentiable = False

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        step: int,
        count: int = 1,
    ):
        self.lr = float(lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.step = int(step)
        self.count = int(count)
        self.n_outputs = 3 * self.count

    @property
    def per_param(self) -> int:
        return 2 if self.step == 1 else 4

    def infer(self, *cells: Cell):
        if len(cells) != self.per_param * self.count:
            what = f" for each of {self.count} parameters" if self.count > 1 else ""
            raise TypeError(f"{self.name}: expects {self.per_param} inputs at step "
                            f"{self.step}{what}, got {len(cells)}")  # fmt: skip
        metas = _check_group(self, cells, self.per_param, self.count)
        return [meta for meta in metas for _ in range(3)]

    def forward(self, xp, *arrays):
        k = self.per_param
        out: list = []
        for start in range(0, len(arrays), k):
            chunk = arrays[start : start + k]
            if chunk[0].ndim == 0:  # see ``update``
                out += [a.reshape(()) for a in self.update(xp, *[a.reshape(1) for a in chunk])]
            else:
                out += self.update(xp, *chunk)
        return tuple(out)

    def update(self, xp, p, grad, m=None, v=None):
        """One parameter's step; its arrays have at least one axis (NumPy's arithmetic on
        0-d arrays returns scalars, which cannot take ``out=``)."""
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
        return float(12 * _elements(in_metas, self.per_param)), nbytes
