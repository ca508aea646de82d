"""Elementwise, reduction, shape and linalg ops through the generic harness."""

import math

import numpy as np

import minidtr as md
from op_harness import OpCase, define_tests


def positive(rng, shapes, dtype):
    return [(rng.random(s) + 0.5).astype(dtype) for s in shapes]


def distinct(rng, shapes, dtype):
    """Values with no ties (max and maximum have kinks at ties)."""
    out = []
    for s in shapes:
        n = int(np.prod(s))
        out.append((rng.permutation(n).reshape(s) / max(n, 1) + rng.random(s) * 1e-3).astype(dtype))
    return out


def avoiding(*kinks):
    """Normal values at least 0.05 from each kink (where the gradient jumps)."""

    def make(rng, shapes, dtype):
        out = []
        for s in shapes:
            x = rng.standard_normal(s)
            for k in kinks:
                near = np.abs(x - k) < 0.05
                x = np.where(near, k + np.where(x >= k, 0.05, -0.05), x)
            out.append(x.astype(dtype))
        return out

    return make


def with_bool(rng, shapes, dtype):
    cond, *rest = shapes
    return [rng.random(cond) > 0.5, *(rng.standard_normal(s).astype(dtype) for s in rest)]


erf = np.vectorize(math.erf, otypes=[np.float64])

BINARY_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 3))]

CASES = [
    OpCase(
        "add", md.add, np.add, BINARY_SHAPES, torch_fn=lambda t, a, b: a + b, bad=[((3,), (4,))]
    ),
    OpCase(
        "sub",
        md.sub,
        np.subtract,
        BINARY_SHAPES,
        torch_fn=lambda t, a, b: a - b,
        bad=[((2, 3), (3, 2))],
    ),
    OpCase(
        "mul",
        md.mul,
        np.multiply,
        BINARY_SHAPES,
        torch_fn=lambda t, a, b: a * b,
        bad=[((5,), (2, 4))],
    ),
    OpCase(
        "div",
        md.div,
        np.divide,
        [((3, 4), (3, 4)), ((2, 3), (3,))],
        make=positive,
        torch_fn=lambda t, a, b: a / b,
    ),
    OpCase(
        "pow",
        md.pow,
        np.power,
        [((3, 4), (3, 4)), ((4,), ())],
        make=positive,
        torch_fn=lambda t, a, b: a**b,
    ),
    OpCase(
        "maximum",
        md.maximum,
        np.maximum,
        [((3, 4), (3, 4)), ((2, 3), (3,))],
        make=distinct,
        torch_fn=lambda t, a, b: t.maximum(a, b),
    ),
    OpCase(
        "minimum",
        md.minimum,
        np.minimum,
        [((3, 4), (3, 4)), ((2, 3), (3,))],
        make=distinct,
        torch_fn=lambda t, a, b: t.minimum(a, b),
    ),
    OpCase("neg", md.neg, np.negative, [((3, 4),), ((),)], torch_fn=lambda t, a: -a),
    OpCase(
        "abs",
        md.abs,
        np.abs,
        [((3, 4),), ((),)],
        make=avoiding(0.0),
        torch_fn=lambda t, a: a.abs(),
        bad=[[np.array([True, False])]],
    ),
    OpCase(
        "clip",
        lambda a: md.clip(a, -0.5, 0.7),
        lambda a: np.clip(a, -0.5, 0.7),
        [((3, 4),), ((2, 3, 4),)],
        make=avoiding(-0.5, 0.7),
        torch_fn=lambda t, a: a.clamp(-0.5, 0.7),
        bad=[[np.array([True, False])]],
    ),
    OpCase(
        "clip[max]",
        lambda a: md.clip(a, max=0.3),
        lambda a: np.minimum(a, 0.3),
        [((3, 4),)],
        make=avoiding(0.3),
        torch_fn=lambda t, a: a.clamp(max=0.3),
    ),
    OpCase("exp", md.exp, np.exp, [((3, 4),), ((2, 2, 2),)], torch_fn=lambda t, a: a.exp()),
    OpCase("log", md.log, np.log, [((3, 4),)], make=positive, torch_fn=lambda t, a: a.log()),
    OpCase("sqrt", md.sqrt, np.sqrt, [((3, 4),)], make=positive, torch_fn=lambda t, a: a.sqrt()),
    OpCase(
        "relu", md.relu, lambda a: np.maximum(a, 0), [((4, 5),)], torch_fn=lambda t, a: t.relu(a)
    ),
    OpCase(
        "sigmoid",
        md.sigmoid,
        lambda a: 1 / (1 + np.exp(-a)),
        [((4, 5),)],
        torch_fn=lambda t, a: t.sigmoid(a),
    ),
    OpCase("tanh", md.tanh, np.tanh, [((4, 5),)], torch_fn=lambda t, a: t.tanh(a)),
    OpCase(
        "gelu",
        md.gelu,
        lambda a: (0.5 * a * (1 + erf(a / math.sqrt(2)))).astype(a.dtype),
        [((4, 5),)],
        torch_fn=lambda t, a: t.nn.functional.gelu(a),
    ),
    OpCase(
        "gelu[tanh]",
        lambda a: md.gelu(a, approximate="tanh"),
        lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))),
        [((4, 5),)],
        torch_fn=lambda t, a: t.nn.functional.gelu(a, approximate="tanh"),
    ),
    OpCase(
        "where",
        md.where,
        np.where,
        [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ())],
        make=with_bool,
        torch_fn=lambda t, c, a, b: t.where(c, a, b),
        bad=[[np.ones(3, np.float32), np.ones(3, np.float32), np.ones(3, np.float32)]],
    ),
    OpCase("less", md.less, np.less, [((3, 4), (4,))], grad_inputs=()),
    OpCase("equal", md.equal, np.equal, [((3, 4), (3, 4))], grad_inputs=()),
    OpCase(
        "astype",
        lambda a: md.astype(a, np.float64),
        lambda a: a.astype(np.float64),
        [((3, 4),)],
        dtypes=(np.float32,),
    ),
    OpCase("sum", md.sum, np.sum, [((3, 4),), ((2, 3, 4),)], torch_fn=lambda t, a: a.sum()),
    OpCase(
        "sum[axis]",
        lambda a: md.sum(a, axis=1, keepdims=True),
        lambda a: a.sum(axis=1, keepdims=True),
        [((3, 4),), ((2, 3, 4),)],
        torch_fn=lambda t, a: a.sum(dim=1, keepdim=True),
        bad=[((3,),)],
    ),
    OpCase(
        "sum[axes]",
        lambda a: md.sum(a, axis=(0, 2)),
        lambda a: a.sum(axis=(0, 2)),
        [((2, 3, 4),)],
        torch_fn=lambda t, a: a.sum(dim=(0, 2)),
    ),
    OpCase(
        "mean",
        lambda a: md.mean(a, axis=-1),
        lambda a: a.mean(axis=-1),
        [((3, 4),), ((2, 3, 4),)],
        torch_fn=lambda t, a: a.mean(dim=-1),
    ),
    OpCase(
        "max",
        lambda a: md.max(a, axis=0),
        lambda a: a.max(axis=0),
        [((3, 4),)],
        make=distinct,
        torch_fn=lambda t, a: a.amax(dim=0),
    ),
    OpCase(
        "max[all]",
        md.max,
        np.max,
        [((3, 4),), ((2, 3, 4),)],
        make=distinct,
        torch_fn=lambda t, a: a.amax(),
    ),
    OpCase(
        "min",
        lambda a: md.min(a, axis=-1, keepdims=True),
        lambda a: a.min(axis=-1, keepdims=True),
        [((3, 4),), ((2, 3, 4),)],
        make=distinct,
        torch_fn=lambda t, a: a.amin(dim=-1, keepdim=True),
        bad=[((3, 0),)],
    ),
    OpCase(
        "sum[dim]",
        lambda a: a.sum(dim=(0, 2), keepdim=True),
        lambda a: a.sum(axis=(0, 2), keepdims=True),
        [((2, 3, 4),)],
        torch_fn=lambda t, a: a.sum(dim=(0, 2), keepdim=True),
    ),
    OpCase(
        "mean[dim]",
        lambda a: md.mean(a, dim=1, keepdim=True),
        lambda a: a.mean(axis=1, keepdims=True),
        [((3, 4),), ((2, 3, 4),)],
        torch_fn=lambda t, a: t.mean(a, dim=1, keepdim=True),
    ),
    OpCase(
        "max[dim]",
        lambda a: md.max(a, dim=1),
        lambda a: (a.max(axis=1), a.argmax(axis=1)),
        [((3, 4),), ((2, 3, 4),)],
        make=distinct,
        torch_fn=lambda t, a: tuple(t.max(a, dim=1)),
        bad=[((3, 0),), ((3,),)],
    ),
    OpCase(
        "min[dim]",
        lambda a: a.min(dim=-1, keepdim=True),
        lambda a: (a.min(axis=-1, keepdims=True), a.argmin(axis=-1, keepdims=True)),
        [((3, 4),), ((2, 3, 4),)],
        make=distinct,
        torch_fn=lambda t, a: tuple(a.min(dim=-1, keepdim=True)),
    ),
    OpCase(
        "argmax",
        lambda a: md.argmax(a, dim=1),
        lambda a: a.argmax(axis=1),
        [((3, 4),), ((2, 3, 4),)],
        grad_inputs=(),
        torch_fn=lambda t, a: t.argmax(a, dim=1),
        bad=[((3, 0),), ((3,),), [np.array([True, False])]],
    ),
    OpCase(
        "argmax[all]",
        lambda a: a.argmax(),
        np.argmax,
        [((3, 4),), ((2, 3, 4),)],
        grad_inputs=(),
        torch_fn=lambda t, a: a.argmax(),
        bad=[((0, 3),)],
    ),
    OpCase(
        "argmin",
        lambda a: a.argmin(dim=0, keepdim=True),
        lambda a: a.argmin(axis=0, keepdims=True),
        [((3, 4),), ((2, 3, 4),)],
        grad_inputs=(),
        torch_fn=lambda t, a: a.argmin(dim=0, keepdim=True),
    ),
    OpCase(
        "matmul",
        md.matmul,
        np.matmul,
        [
            ((3, 4), (4, 5)),
            ((2, 3, 4), (4, 5)),
            ((2, 1, 3, 4), (3, 4, 2)),
            ((4,), (4, 3)),
            ((3, 4), (4,)),
        ],
        torch_fn=lambda t, a, b: a @ b,
        bad=[((3, 4), (5, 6)), ((2, 3, 4), (3, 4, 5))],
    ),
    OpCase(
        "reshape",
        lambda a: md.reshape(a, (4, -1)),
        lambda a: a.reshape(4, -1),
        [((2, 6),), ((2, 2, 3),)],
        torch_fn=lambda t, a: a.reshape(4, -1),
        bad=[((5,),)],
    ),
    OpCase(
        "reshape[noncontiguous]",
        lambda a: md.reshape(md.transpose(a), (-1,)),
        lambda a: a.T.reshape(-1),
        [((3, 4),)],
        torch_fn=lambda t, a: a.T.reshape(-1),
    ),
    OpCase(
        "transpose",
        lambda a: md.transpose(a, (2, 0, 1)),
        lambda a: a.transpose(2, 0, 1),
        [((2, 3, 4),)],
        torch_fn=lambda t, a: a.permute(2, 0, 1),
        bad=[((2, 3),)],
    ),
    OpCase(
        "permute",
        lambda a: a.permute(2, 0, 1),
        lambda a: a.transpose(2, 0, 1),
        [((2, 3, 4),)],
        torch_fn=lambda t, a: a.permute(2, 0, 1),
        bad=[((2, 3),)],
    ),
    OpCase(
        "squeeze",
        lambda a: a.squeeze(),
        np.squeeze,
        [((3, 1, 4, 1),), ((1,),)],
        torch_fn=lambda t, a: a.squeeze(),
    ),
    OpCase(
        "squeeze[dim]",
        lambda a: md.squeeze(a, (0, 2)),
        lambda a: a.reshape([n for i, n in enumerate(a.shape) if i not in (0, 2) or n != 1]),
        [((1, 3, 4),), ((1, 3, 1),)],
        torch_fn=lambda t, a: t.squeeze(a, (0, 2)),
        bad=[((3, 4),)],
    ),
    OpCase(
        "unsqueeze",
        lambda a: a.unsqueeze(-1),
        lambda a: a[..., None],
        [((3, 4),), ((),)],
        torch_fn=lambda t, a: a.unsqueeze(-1),
    ),
    OpCase(
        "unsqueeze[0]",
        lambda a: md.unsqueeze(a, 0),
        lambda a: a[None],
        [((3, 4),)],
        torch_fn=lambda t, a: t.unsqueeze(a, 0),
    ),
    OpCase(
        "view",
        lambda a: a.view(4, -1),
        lambda a: a.reshape(4, -1),
        [((2, 6),), ((2, 2, 3),)],
        torch_fn=lambda t, a: a.view(4, -1),
    ),
    OpCase(
        "broadcast_to",
        lambda a: md.broadcast_to(a, (2, 3, 4)),
        lambda a: np.broadcast_to(a, (2, 3, 4)),
        [((3, 1),), ((4,),)],
        torch_fn=lambda t, a: a.expand(2, 3, 4),
        bad=[((5,),)],
        unwatched="a view of a fixed small shape",
    ),
    OpCase(
        "getitem",
        lambda a: a[1:, ::2],
        lambda a: a[1:, ::2],
        [((4, 5),)],
        torch_fn=lambda t, a: a[1:, ::2],
    ),
    OpCase(
        "getitem[int]",
        lambda a: a[..., 1, None],
        lambda a: a[..., 1, None],
        [((2, 3, 4),)],
        torch_fn=lambda t, a: a[..., 1, None],
        bad=[((2, 3, 1),)],
    ),
    OpCase(
        "getitem[array]",
        lambda a: a[np.array([0, 2, 2, 1])],
        lambda a: a[np.array([0, 2, 2, 1])],
        [((3, 4),)],
        torch_fn=lambda t, a: a[t.tensor([0, 2, 2, 1])],
        bad=[((2, 4),)],
    ),
    OpCase(
        "getitem[mixed]",
        lambda a: a[np.array([1, 0, 1]), 1:, np.array([0, 1, 1])],
        lambda a: a[np.array([1, 0, 1]), 1:, np.array([0, 1, 1])],
        [((2, 3, 2),)],
        torch_fn=lambda t, a: a[t.tensor([1, 0, 1]), 1:, t.tensor([0, 1, 1])],
    ),
    OpCase(
        "concat",
        lambda a, b: md.concat([a, b], axis=1),
        lambda a, b: np.concatenate([a, b], axis=1),
        [((2, 3), (2, 5))],
        torch_fn=lambda t, a, b: t.cat([a, b], dim=1),
        bad=[((2, 3), (3, 3))],
    ),
    OpCase(
        "stack",
        lambda a, b: md.stack([a, b], axis=1),
        lambda a, b: np.stack([a, b], 1),
        [((2, 3), (2, 3))],
        torch_fn=lambda t, a, b: t.stack([a, b], dim=1),
    ),
    OpCase(
        "split",
        lambda a: md.split(a, [1, 3], axis=1),
        lambda a: tuple(np.split(a, [1], axis=1)),
        [((2, 4),)],
        torch_fn=lambda t, a: t.split(a, [1, 3], dim=1),
        bad=[((2, 5),)],
        large=((262144, 4),),
    ),
    OpCase(
        "split[partial]",
        lambda a: md.split(a, 2, axis=0)[1],
        lambda a: np.split(a, 2, axis=0)[1],
        [((4, 3),)],
    ),
]

globals().update(define_tests(CASES))

LINEAR_CASES = [
    OpCase(
        "linear",
        md.linear,
        lambda x, w, b: x @ w.T + b,
        [((5, 3), (4, 3), (4,)), ((2, 5, 3), (4, 3), (4,))],
        torch_fn=lambda t, x, w, b: t.nn.functional.linear(x, w, b),
        bad=[((5, 3), (4, 2), (4,)), ((5, 3), (4, 3), (3,))],
    ),
    OpCase(
        "linear[nobias]",
        md.linear,
        lambda x, w: x @ w.T,
        [((5, 3), (4, 3))],
        torch_fn=lambda t, x, w: t.nn.functional.linear(x, w),
    ),
]

globals().update(define_tests(LINEAR_CASES, prefix="test_linear"))
