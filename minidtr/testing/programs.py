"""Deterministic programs to run under budgets: random DAGs and small training loops.

Each builder returns a zero-argument function suitable for
``assert_remat_equivalent``: it creates its inputs from a seed, runs, and
returns the values to compare (outputs, losses, gradients, updated
parameters). They use only ``md`` ops, so they exercise exactly what users
run: views, broadcasting, multi-use tensors, dropped references, reads,
copy-on-write parameter updates and random ops with replayed seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import ops
from ..autograd import no_grad
from ..ops.op import as_constants
from ..tensor import Tensor, tensor

UNARY = (
    "tanh",
    "sigmoid",
    "relu",
    "neg",
    "transpose",
    "reshape_roundtrip",
    "dropout",
    "row_sum",
    "row_max",
)
BINARY = ("add", "sub", "mul", "matmul", "maximum", "attention")


@dataclass
class Instruction:
    op: str
    args: tuple[int, ...]  # indices into the values computed so far
    drop: tuple[int, ...] = ()  # values whose handles are dropped after this op
    read: bool = False  # read the result with .numpy() (an access that may rematerialize)


@dataclass
class RandomProgram:
    """A random DAG of ops over ``n_inputs`` square matrices, then a scalar loss and backward.

    Returns the outputs, the loss and the gradient of every input.
    """

    n_inputs: int
    size: int
    instructions: list[Instruction]
    outputs: tuple[int, ...]
    seed: int = 0
    dtype: Any = np.float64
    reads: list = field(default_factory=list)

    def __call__(self) -> dict[str, Any]:
        rng = np.random.default_rng(self.seed)
        inputs = [
            tensor(
                rng.standard_normal((self.size, self.size)) * 0.5,
                dtype=self.dtype,
                requires_grad=True,
            )
            for _ in range(self.n_inputs)
        ]
        values: list[Tensor | None] = list(inputs)
        for k, ins in enumerate(self.instructions):
            args = [values[i] for i in ins.args]
            if any(a is None for a in args):
                raise ValueError(f"instruction {k} uses a dropped value")
            values.append(apply_named(ins.op, args, seed=self.seed * 1000 + k))
            if ins.read:
                values[-1].numpy()
            for i in ins.drop:
                if i >= self.n_inputs:
                    values[i] = None
        outs = [values[i] for i in self.outputs]
        loss = outs[0].sum()
        for o in outs[1:]:
            loss = loss + (o * o).mean()
        del values
        loss.backward()
        return {"loss": loss, "outputs": outs, "grads": [x.grad for x in inputs]}


def apply_named(name: str, args: list[Tensor], seed: int) -> Tensor:
    a = args[0]
    if name == "transpose":
        return a.T
    if name == "reshape_roundtrip":
        return a.reshape(-1).reshape(a.shape)
    if name == "dropout":
        return ops.dropout(a, p=0.3, seed=seed)
    if name == "row_sum":
        return a + a.sum(axis=1, keepdims=True) * 0.1
    if name == "row_max":  # argmax, and the values gathered at it (PyTorch's max(x, dim))
        return a - a.max(dim=1, keepdim=True).values
    if name == "matmul":
        return ops.matmul(a, args[1]) * (1.0 / a.shape[-1])
    if name == "attention":  # the first value's rows attend to the second's
        return ops.scaled_dot_product_attention(a, args[1], args[1])
    return getattr(ops, name)(*args)


# ---- training loops ------------------------------------------------------------------------


def _params(rng: np.random.Generator, shapes, dtype) -> list[Tensor]:
    return [
        tensor(rng.standard_normal(s) / np.sqrt(s[0]), dtype=dtype, requires_grad=True)
        for s in shapes
    ]


def _sgd(params: list[Tensor], lr: float) -> None:
    with no_grad(), as_constants():
        for p in params:
            p.assign(p - p.grad * lr)
            p.grad = None


def mlp_training(
    depth: int = 3,
    width: int = 16,
    batch: int = 8,
    steps: int = 3,
    seed: int = 0,
    dtype=np.float64,
    dropout: bool = True,
) -> Callable[[], Any]:
    """A small MLP (tanh, optional dropout) trained with SGD; returns losses and parameters."""

    def run():
        rng = np.random.default_rng(seed)
        params = _params(rng, [(width, width)] * depth, dtype)
        x = tensor(rng.standard_normal((batch, width)), dtype=dtype)
        y = tensor(rng.standard_normal((batch, width)), dtype=dtype)
        losses = []
        for step in range(steps):
            h = x
            for i, w in enumerate(params):
                h = ops.tanh(ops.matmul(h, w))
                if dropout and i < depth - 1:
                    h = ops.dropout(h, p=0.2, seed=seed * 100 + step * 10 + i)
            loss = ops.mean((h - y) * (h - y))
            del h
            loss.backward()
            losses.append(loss.numpy())
            _sgd(params, 0.1)
        return {"losses": losses, "params": params}

    return run


def lstm_unrolled(
    length: int = 5, hidden: int = 8, batch: int = 4, seed: int = 0, dtype=np.float64
) -> Callable[[], Any]:
    """An LSTM cell unrolled over ``length`` steps, loss on the last hidden state."""

    def run():
        rng = np.random.default_rng(seed)
        w_x, w_h = _params(rng, [(hidden, 4 * hidden), (hidden, 4 * hidden)], dtype)
        xs = [tensor(rng.standard_normal((batch, hidden)), dtype=dtype) for _ in range(length)]
        h = c = tensor(np.zeros((batch, hidden)), dtype=dtype)
        for x in xs:
            gates = ops.matmul(x, w_x) + ops.matmul(h, w_h)
            i, f, g, o = ops.split(gates, 4, axis=1)
            c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
            h = ops.sigmoid(o) * ops.tanh(c)
        loss = ops.mean(h * h)
        loss.backward()
        return {"loss": loss, "grads": [w_x.grad, w_h.grad]}

    return run


def random_tree(
    leaves: int = 6, hidden: int = 8, seed: int = 0, dtype=np.float64
) -> Callable[[], Any]:
    """A random binary tree combined bottom-up (TreeRNN style): a different graph per seed."""

    def run():
        rng = np.random.default_rng(seed)
        w_left, w_right = _params(rng, [(hidden, hidden), (hidden, hidden)], dtype)
        nodes = [tensor(rng.standard_normal((1, hidden)), dtype=dtype) for _ in range(leaves)]
        while len(nodes) > 1:
            k = int(rng.integers(len(nodes) - 1))
            left, right = nodes[k], nodes[k + 1]
            nodes[k : k + 2] = [ops.tanh(ops.matmul(left, w_left) + ops.matmul(right, w_right))]
        loss = ops.sum(nodes[0] * nodes[0])
        loss.backward()
        return {"loss": loss, "grads": [w_left.grad, w_right.grad]}

    return run


def conv_training(
    channels: int = 4,
    size: int = 8,
    batch: int = 2,
    steps: int = 2,
    seed: int = 0,
    dtype=np.float64,
) -> Callable[[], Any]:
    """A two-layer conv net (conv, relu, max-pool, conv, global average) trained with SGD."""

    def run():
        rng = np.random.default_rng(seed)
        w1 = tensor(rng.standard_normal((channels, 1, 3, 3)) / 3, dtype=dtype, requires_grad=True)
        w2 = tensor(
            rng.standard_normal((channels, channels, 3, 3)) / 6, dtype=dtype, requires_grad=True
        )
        x = tensor(rng.standard_normal((batch, 1, size, size)), dtype=dtype)
        losses = []
        for _ in range(steps):
            h = ops.relu(ops.conv2d(x, w1, padding=1))
            h = ops.max_pool2d(h, 2)
            h = ops.conv2d(h, w2, padding=1)
            loss = ops.mean(ops.global_avg_pool2d(h) ** 2)
            del h
            loss.backward()
            losses.append(loss.numpy())
            _sgd([w1, w2], 0.1)
        return {"losses": losses, "params": [w1, w2]}

    return run


def unit_cost(op, in_metas, out_metas) -> float:
    """Every op costs 1 (for ``Runtime(cost=unit_cost)``): compute counted in ops."""
    return 1.0


def tanh_chain(n: int) -> Callable[[], float]:
    """Theorem 3.1's setting: forward and backward through ``n`` tanh layers on a
    one-element float64 tensor (every tensor 8 bytes); returns the input's gradient."""

    def run() -> float:
        x = tensor(np.array([0.5]), requires_grad=True)
        h = x
        for _ in range(n):
            h = ops.tanh(h)
        h.backward(tensor(np.array([1.0])))
        return float(x.grad.numpy()[0])

    return run
