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

The ops run under ``updating()`` (no graph, constant outputs). They compute in
their outputs' buffers: SGD needs no other (with Nesterov momentum, one product of a
parameter's size), Adam a scratch of at most ``SCRATCH`` values, its declared workspace.
"""

from __future__ import annotations

import math

from ..ops.op import Op, ShapeError, describe, float_dtype
from ..runtime.storage import Cell

SCRATCH = 16384  # values of Adam's one scratch product at a time


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
    g = buf, or with ``nesterov`` g = g + momentum * buf; new p = p - lr * g."""

    name = "sgd_update"
    differentiable = False

    def __init__(
        self,
        lr: float,
        momentum: float,
        weight_decay: float,
        first: bool,
        count: int = 1,
        nesterov: bool = False,
    ):
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.first = first
        self.count = int(count)
        self.nesterov = bool(nesterov)
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
        out: list = []
        for start in range(0, len(arrays), k):
            chunk = arrays[start : start + k]
            if chunk[0].ndim == 0:  # (as AdamUpdate's)
                out += [a.reshape(()) for a in self.update(xp, *[a.reshape(1) for a in chunk])]
            else:
                out += self.update(xp, *chunk)
        return out[0] if len(out) == 1 else tuple(out)

    def update(self, xp, p, grad, buf=None) -> list:
        """One parameter's step, in its outputs' buffers (no scratch): the new parameter's
        holds g until it is not needed."""
        scalar = p.dtype.type
        new_p = xp.empty_like(p)
        g = grad
        if self.weight_decay:
            g = xp.multiply(p, scalar(self.weight_decay), out=new_p)
            g += grad  # grad + weight_decay * p: one rounding of the product, one of the sum
        if not self.momentum:
            step = xp.multiply(g, scalar(self.lr), out=new_p)
            return [xp.subtract(p, step, out=new_p)]
        if self.first:
            new_buf = xp.array(g, copy=True)
        else:
            new_buf = xp.multiply(buf, scalar(self.momentum), out=xp.empty_like(p))
            new_buf += g
        if self.nesterov:  # g + momentum * buf; the product in the workspace
            xp.add(g, xp.multiply(new_buf, scalar(self.momentum)), out=new_p)
            new_p *= scalar(self.lr)
        else:
            xp.multiply(new_buf, scalar(self.lr), out=new_p)
        return [xp.subtract(p, new_p, out=new_p), new_buf]

    def workspace(self, *cells: Cell) -> int:
        """Nesterov's momentum * buf, for the largest parameter (none without Nesterov)."""
        if not (self.nesterov and self.momentum):
            return 0
        return max(math.prod(c.shape) * c.dtype.itemsize for c in cells[:: self.per_param])

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        flops_per_element = 2 + (2 if self.weight_decay else 0) + (2 if self.momentum else 0)
        flops_per_element += 2 if self.nesterov and self.momentum else 0
        return float(flops_per_element * _elements(in_metas, self.per_param)), nbytes


class AdamUpdate(Op):
    """(p, grad[, m, v]) -> (new p, new m, new v) at step ``t`` (m = v = 0 before the first)
    for each of ``count`` parameters (parameter after parameter): g = grad + weight_decay
    * p (``decoupled``, AdamW's: g = grad, and p is scaled by 1 - lr * weight_decay
    first); m = lerp(m, g, 1 - beta1); v = beta2 * v + (1 - beta2) * g * g;
    new p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps), each step in
    the order ``torch.optim.Adam`` computes it (``mul_``, ``lerp_``, ``addcmul_``,
    ``addcdiv_``)."""

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
        decoupled: bool = False,
    ):
        self.lr = float(lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.step = int(step)
        self.count = int(count)
        self.decoupled = bool(decoupled)
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
        0-d arrays returns scalars, which cannot take ``out=``). In the outputs' buffers,
        the new parameter's holding g, then v * beta2, then the denominator; the one
        product that needs a buffer of its own, m's over the bias correction, is made
        ``SCRATCH`` values at a time. m = v = 0 at the first step: the zeros written
        where they are read, with the same roundings."""
        scalar = p.dtype.type
        beta1, beta2 = self.betas
        t = self.step
        new_p = xp.empty(p.shape, dtype=p.dtype)  # C order: its flat view is a view
        new_m = xp.empty(p.shape, dtype=p.dtype)
        new_v = xp.empty(p.shape, dtype=p.dtype)
        g = grad
        if self.weight_decay and not self.decoupled:
            g = xp.multiply(p, scalar(self.weight_decay), out=new_p)
            g += grad
        weight = 1.0 - beta1
        # lerp_: start + w * (end - start) for w < 0.5, else end - (end - start) * (1 - w)
        if m is None:
            new_m.fill(0)
            xp.subtract(g, new_m, out=new_m)
        else:
            xp.subtract(g, m, out=new_m)
        if weight < 0.5:
            new_m *= scalar(weight)
            new_m += scalar(0) if m is None else m
        else:
            new_m *= scalar(1.0) - scalar(weight)  # in the parameter's dtype, as torch's opmath
            xp.subtract(g, new_m, out=new_m)
        xp.multiply(g, scalar(1.0 - beta2), out=new_v)  # addcmul_: self + value * t1 * t2
        new_v *= g
        if v is None:
            new_p.fill(0)
        else:
            xp.multiply(v, scalar(beta2), out=new_p)
        xp.add(new_p, new_v, out=new_v)  # v * beta2 + the product, in that order
        denom = xp.sqrt(new_v, out=new_p)
        denom /= scalar((1.0 - beta2**t) ** 0.5)
        denom += scalar(self.eps)
        step = scalar(-self.lr / (1.0 - beta1**t))  # addcdiv_: self + value * t1 / t2
        decay = scalar(1.0 - self.lr * self.weight_decay)  # AdamW's p.mul_, before the rest
        decayed = self.decoupled and self.weight_decay
        if new_m.size <= SCRATCH:  # the scratch is the product itself
            xp.divide(new_m * step, new_p, out=new_p)
            new_p += p * decay if decayed else p
            return new_p, new_m, new_v
        flat_m, flat_p = new_m.reshape(-1), new_p.reshape(-1)
        flat_old = p.reshape(-1) if decayed else None
        scratch = xp.empty(SCRATCH, dtype=p.dtype)
        for start in range(0, flat_m.size, SCRATCH):
            part_m, part_p = flat_m[start : start + SCRATCH], flat_p[start : start + SCRATCH]
            product = xp.multiply(part_m, step, out=scratch[: part_m.size])
            xp.divide(product, part_p, out=part_p)
            if decayed:
                part_p += xp.multiply(flat_old[start : start + SCRATCH], decay, out=product)
        if not decayed:
            new_p += p
        return new_p, new_m, new_v

    def workspace(self, *cells: Cell) -> int:
        """The scratch of the largest parameter (``SCRATCH`` values at most)."""
        return max(
            min(math.prod(c.shape), SCRATCH) * c.dtype.itemsize for c in cells[:: self.per_param]
        )

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float((13 if self.decoupled else 12) * _elements(in_metas, self.per_param)), nbytes
