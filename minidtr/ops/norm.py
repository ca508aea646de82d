"""Normalization: batch_norm (train and eval, running statistics) and layer_norm.

Both are one fused ``Normalize`` op, ``(x - mean) / sqrt(var + eps) * weight +
bias`` with the statistics taken over some axes and weight/bias laid along one
axis. Batch norm can also add a residual and apply a ReLU in the same op
(``batch_norm(..., residual=r, relu=True)`` is ``relu(batch_norm(...) + r)``): the
ReLU that follows most batch norms, and the sum and ReLU that end a residual block,
fused so that a network makes one op and one gradient op where it made up to three of
each. It also outputs the mean and (biased) variance, small tensors that
backward keeps instead of the normalized activations, and that batch_norm
reads to update its running statistics. The gradient is one fused op too.
"""

from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import (
    HALF,
    DTypeError,
    Op,
    ShapeError,
    apply,
    as_constants,
    expect_number,
    expect_tensor,
    float_dtype,
    in_float32,
    numel,
    shared_op,
)
from .rows import mean_last, sum_last, sum_leading
from .shift import CHUNK_FRACTION


class Normalize(Op):
    """Outputs (y, mean, var); mean and var keep the statistics axes with size 1. With
    ``residual`` the last input is added to y; with ``relu``, y is then the ReLU of that,
    and backward keeps y for its mask."""

    n_outputs = 3
    retain_outputs = (1, 2)

    def __init__(
        self,
        name: str,
        stat_axes: tuple[int, ...],
        param_axis: int,
        eps: float,
        has_weight: bool,
        has_bias: bool,
        relu: bool = False,
        residual: bool = False,
    ):
        self.name = name + ("_add" if residual else "") + ("_relu" if relu else "")
        self.stat_axes = stat_axes
        self.param_axis = param_axis
        self.eps = float(eps)
        self.has_weight = has_weight
        self.has_bias = has_bias
        self.relu = relu
        self.residual = residual
        self.retain_inputs = (0, 1) if has_weight else (0,)
        if relu:
            self.retain_outputs = (0, 1, 2)

    def infer(self, x: Cell, *params: Cell):
        dtype = float_dtype(self, x, *params)
        if self.residual:
            *params, residual = params
            if residual.shape != x.shape:
                raise self.error("the residual must have the input's shape", x, residual)
        channels = x.shape[self.param_axis]
        for p in params:
            if p.shape != (channels,):
                raise self.error(
                    f"weight and bias must have shape ({channels},), the size of axis "
                    f"{self.param_axis}",
                    x,
                    *params,
                )
        stat_shape = tuple(1 if i in self.stat_axes else d for i, d in enumerate(x.shape))
        return [(x.shape, dtype), (stat_shape, dtype), (stat_shape, dtype)]

    def param_shape(self, ndim: int) -> tuple[int, ...]:
        return tuple(-1 if i == self.param_axis else 1 for i in range(ndim))

    def forward(self, xp, x, *params):
        residual = None
        if self.residual:
            *params, residual = params
        y, mean, var = self.normalize(xp, x, *params)
        if residual is not None:
            y += residual
        if self.relu:
            backend.relu(xp, y, out=y)
        return y, mean, var

    def normalize(self, xp, x, *params):
        if x.dtype is HALF:  # statistics in float32, as PyTorch's
            return in_float32(self.normalize, xp, x, *params)
        if self.per_channel:
            return self.forward_per_channel(xp, x, *params)
        mean = mean_over(xp, x, self.stat_axes)
        centered = x - mean
        var = mean_of_products(xp, centered, centered, self.stat_axes)
        y = centered
        y *= 1.0 / xp.sqrt(var + self.eps)
        shape = self.param_shape(x.ndim)
        if self.has_weight:
            y *= params[0].reshape(shape)
        if self.has_bias:
            y += params[-1].reshape(shape)
        return y, mean, var

    @property
    def per_channel(self) -> bool:
        """Statistics over every axis but the parameters' (batch norm)."""
        return self.param_axis not in self.stat_axes

    def forward_per_channel(self, xp, x, *params):
        """Batch norm on x seen as (A, C, R): per-channel sums by einsum (one pass each,
        vectorized, ~3x faster than a NumPy reduction over axes (0, 2, 3)), then one
        scale and one shift per channel."""
        x3 = as_channels(x, self.param_axis)
        count = x3.shape[0] * x3.shape[2]
        mean = xp.einsum("acr->c", x3) / count
        centered = x3 - mean[:, None]
        var = xp.einsum("acr,acr->c", centered, centered) / count
        scale = 1.0 / xp.sqrt(var + self.eps)
        if self.has_weight:
            scale *= params[0]
        y = centered
        y *= scale[:, None]
        if self.has_bias:
            y += params[-1][:, None]
        stat_shape = tuple(1 if i in self.stat_axes else d for i, d in enumerate(x.shape))
        return y.reshape(x.shape), mean.reshape(stat_shape), var.reshape(stat_shape)

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 8.0 * numel(in_metas[0]), nbytes

    def workspace(self, x: Cell, *params: Cell) -> int:
        """Only float16 needs scratch (float32 copies of x and the result, ``in_float32``):
        the statistics are sums of products, the result is made in its own buffer."""
        if x.dtype is not HALF:
            return 0
        return (3 + self.residual) * math.prod(x.shape) * 4

    def backward(self, ctx, grads):
        g = grads[0]
        if g is None:
            raise RuntimeError(f"{self.name}: mean and var are internal outputs with no gradient")
        weight = (ctx.inputs[1],) if self.has_weight else ()
        output = (ctx.outputs[0],) if self.relu else ()
        grads = apply(
            shared_op(NormalizeGrad, self),
            ctx.inputs[0],
            ctx.outputs[1],
            ctx.outputs[2],
            *weight,
            *output,
            g,
        )
        # the gradients of x, weight, bias and residual, for the inputs the op was given
        given = (True, self.has_weight, self.has_bias, self.residual)
        needs = ctx.needs_grad
        out = []
        for g_in, present in zip(grads, given, strict=False):
            if present:
                out.append(g_in if needs[len(out)] else None)
        return tuple(out)


class NormalizeGrad(Op):
    """(dx, dweight, dbias[, dresidual]) of ``Normalize`` from x, its mean and var, the
    weight, the output (with ``relu``: g is first zeroed where the output is) and g: with
    h = (x - mean) * rstd and dh = g * weight, over the statistics axes,
    dx = rstd * (dh - mean(dh) - h * mean(dh * h))."""

    n_outputs = 3
    differentiable = False

    def __init__(self, forward_op: Normalize):
        self.name = forward_op.name + "_grad"
        self.stat_axes = forward_op.stat_axes
        self.param_axis = forward_op.param_axis
        self.eps = forward_op.eps
        self.has_weight = forward_op.has_weight
        self.relu = forward_op.relu
        self.residual = forward_op.residual
        self.n_outputs = 4 if self.residual else 3

    def infer(self, x: Cell, mean: Cell, var: Cell, *rest: Cell):
        channels = (x.shape[self.param_axis],)
        metas = [(x.shape, x.dtype), (channels, x.dtype), (channels, x.dtype)]
        return metas + [(x.shape, x.dtype)] if self.residual else metas

    def forward(self, xp, x, mean, var, *rest):
        *weight, g = rest
        if self.relu:
            *weight, y = weight
            g = relu_mask(xp, y, g)  # a new array: the gradient may be made in it
        grads = self.normalize_grad(
            xp, x, mean, var, *weight, g, reuse=self.relu and not self.residual
        )
        if not self.residual:
            return grads
        # the residual's gradient is g (masked by the ReLU: a new array, which the
        # normalization's gradient reads and does not modify)
        return (*grads, g if self.relu else g.copy())

    def workspace(self, x: Cell, mean: Cell, var: Cell, *rest: Cell) -> int:
        """x centered (for batch norm, a block of channels of it), and for float16 the
        float32 copies of ``in_float32`` (x, g, the centered x and the gradient)."""
        size = math.prod(x.shape)
        if self.param_axis not in self.stat_axes:  # per channel: by blocks
            channels = x.shape[self.param_axis]
            size = size // max(channels, 1) * channel_block(channels)
        if x.dtype is HALF:
            return 4 * math.prod(x.shape) * 4 + size * 4
        return size * x.dtype.itemsize

    def normalize_grad(self, xp, x, mean, var, *rest, reuse: bool = False):
        """The gradients; with ``reuse``, g is a scratch array the kernel may overwrite."""
        if x.dtype is HALF:
            return in_float32(self.normalize_grad, xp, x, mean, var, *rest)
        if self.param_axis not in self.stat_axes:
            return self.forward_per_channel(xp, x, mean, var, *rest, reuse=reuse)
        return self.forward_per_row(xp, x, mean, var, *rest)

    def forward_per_row(self, xp, x, mean, var, *rest):
        """Layer norm's gradients (statistics over the last axis, the parameters along
        it), with c = x - mean: dweight = sum over rows of g * c * rstd, and per row
        mean(dh) = (g @ w) / D and mean(dh * h) = rstd * ((g * c) @ w) / D, so that
        dx = rstd * (g * w - mean(dh)) - c * rstd**2 * mean(dh * h): the per-row and
        per-column sums as matrix-vector products, and five passes broadcast against a
        row or a column (NumPy's slowest, about twice a flat one) where the textbook
        form takes six and two row-by-row reductions. c is the one scratch array; g * c
        is made in the output's buffer. (Layer norm has no fused ReLU: g is never
        scratch here.)"""
        g = rest[-1]
        n = x.shape[-1]
        rstd = 1.0 / xp.sqrt(var + self.eps)
        c = x - mean  # the one scratch array
        dbias = sum_leading(xp, g)  # every axis but the last
        dx = xp.multiply(g, c)
        if dx.flags.c_contiguous:
            dweight = rstd.reshape(-1) @ dx.reshape(-1, n)
        else:  # (laid out as g is)
            lead = "abcdefghijklmnopqrstuvwxy"[: x.ndim - 1]
            dweight = xp.einsum(f"{lead}z,{lead}->z", dx, rstd[..., 0])
        if self.has_weight:
            w = rest[0]
            dh_h = (dx @ w)[..., None]  # sum of dh * c per row
            dh = (g @ w)[..., None]  # sum of dh per row
            xp.multiply(g, w, out=dx)
        else:
            dh_h = sum_last(xp, dx)
            dh = sum_last(xp, g)
            dx[...] = g
        dh *= rstd / n  # rstd * mean(dh)
        dh_h *= rstd * rstd * rstd / n  # rstd**2 * mean(dh * h)
        dx *= rstd
        dx -= dh
        c *= dh_h
        dx -= c
        return dx, dweight, dbias

    def forward_per_channel(self, xp, x, mean, var, *rest, reuse: bool = False):
        """With the statistics over all of (A, R) per channel, mean(dh) and mean(dh * h)
        are the weight times the bias and weight gradients over the count M, so
        dx = k * (g - dbias / M - (x - mean) * rstd**2 * sum(g * (x - mean)) / M) with
        k = rstd * weight: per-channel sums by einsum, then one product and two adds, on
        blocks of ``channel_block`` channels (x centered is the one scratch array)."""
        g = as_channels(rest[-1], self.param_axis)
        x3 = as_channels(x, self.param_axis)
        count = x3.shape[0] * x3.shape[2]
        mean, var = mean.reshape(-1), var.reshape(-1)
        rstd = 1.0 / xp.sqrt(var + self.eps)
        k = rstd * rest[0] if self.has_weight else rstd
        dbias = xp.einsum("acr->c", g)
        dweight = xp.empty_like(dbias)
        dx = g if reuse else xp.empty_like(g)
        channels = x3.shape[1]
        block = channel_block(channels)
        for c0 in range(0, channels, block):
            at = slice(c0, c0 + block)
            centered = x3[:, at] - mean[at, None]
            g_centered = xp.einsum("acr,acr->c", g[:, at], centered)
            dweight[at] = g_centered * rstd[at]
            part = dx[:, at]
            xp.multiply(g[:, at], k[at, None], out=part)
            centered *= (-k[at] * rstd[at] * rstd[at] * g_centered / count)[:, None]
            part += centered
            del centered
            part += (-k[at] * dbias[at] / count)[:, None]
        return dx.reshape(x.shape), dweight, dbias

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 12.0 * numel(in_metas[0]), nbytes


def mean_over(xp, a, axes: tuple[int, ...]):
    """mean(a) over ``axes`` (keeping them); over the last axis alone (layer norm's rows)
    as a matrix-vector product (``rows.py``)."""
    if axes == (a.ndim - 1,):
        return mean_last(xp, a)
    return a.mean(axis=axes, keepdims=True)


def mean_of_products(xp, a, b, axes: tuple[int, ...]):
    """mean(a * b) over ``axes`` (keeping them), without the product array: for the last
    axis a sum of products per row (einsum); over other axes, the product is made."""
    if axes == (a.ndim - 1,):
        return (xp.einsum("...i,...i->...", a, b) / a.shape[-1])[..., None]
    return (a * b).mean(axis=axes, keepdims=True)


def relu_mask(xp, y, g):
    """g where the ReLU's output y is > 0, else 0 (a NaN passes, as in PyTorch's)."""
    from .activation import SMALL_WHERE, keep_mask, zero_where

    if g.size <= SMALL_WHERE or xp is not np or g.dtype is HALF:
        return zero_where(xp, y <= 0, g)
    return keep_mask(xp, y, g)


def channel_block(channels: int) -> int:
    """Channels per block of batch norm's gradient: a 1/CHUNK_FRACTION share of them."""
    return max(1, channels // CHUNK_FRACTION)


def as_channels(x, axis: int):
    """``x`` as a (A, C, R) view: the axes before ``axis``, ``axis``, the axes after."""
    a, r = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1 :])
    return x.reshape(a, x.shape[axis], r)


def _check_param(name: str, what: str, p: Tensor | None, x: Tensor, channels: int) -> None:
    if p is None:
        return
    if not isinstance(p, Tensor):
        raise TypeError(f"{name}: {what} must be a Tensor or None, got {type(p).__name__}")
    if p.shape != (channels,):
        raise ShapeError(
            f"{name}: {what} must have shape ({channels},) for input shape {x.shape}, got {p.shape}"
        )
    if p.dtype != x.dtype:
        raise DTypeError(f"{name}: {what} has dtype {p.dtype}, the input {x.dtype}")


def batch_norm(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
    relu: bool = False,
    residual: Tensor | None = None,
) -> Tensor:
    """Batch normalization over every axis but 1 (the channels) of (N, C) or (N, C, H, W);
    ``residual`` (of the input's shape) is added to the result, then with ``relu`` the
    ReLU applied: ``relu(batch_norm(...) + residual)`` as one op and one gradient op.

    Training normalizes with the batch's biased variance and, when running
    statistics are given, replaces them copy-on-write (``assign``) with
    ``(1 - momentum) * running + momentum * batch`` (the variance unbiased), as
    PyTorch does. Eval normalizes with the running statistics.
    """
    _check_batch_norm(x, weight, bias, running_mean, running_var, residual)
    eps = expect_number("batch_norm", eps, "eps")
    momentum = expect_number("batch_norm", momentum, "momentum")
    if not training:
        if running_mean is None:
            raise ValueError(
                "batch_norm: eval mode (training=False) needs running_mean and running_var"
            )
        return _batch_norm_eval(x, weight, bias, running_mean, running_var, eps, relu, residual)
    stat_axes = (0, *range(2, x.ndim))
    count = math.prod(x.shape[a] for a in stat_axes)
    if count < 2:
        raise ShapeError(
            f"batch_norm: training needs more than 1 value per channel, got input shape {x.shape}"
        )
    params = tuple(p for p in (weight, bias, residual) if p is not None)
    op = shared_op(
        Normalize,
        "batch_norm",
        stat_axes,
        1,
        float(eps),
        weight is not None,
        bias is not None,
        bool(relu),
        residual is not None,
    )
    y, mean, var = apply(op, x, *params)
    if running_mean is not None:
        with as_constants():
            update = shared_op(RunningStats, float(momentum), count)
            new_mean, new_var = apply(update, running_mean, running_var, mean, var)
        running_mean.assign(new_mean)
        running_var.assign(new_var)
    return y


def _check_batch_norm(x, weight, bias, running_mean, running_var, residual) -> None:
    """batch_norm's tensors: x (N, C, ...), the others (C,) of x's dtype, or None."""
    if expect_tensor("batch_norm", x).ndim < 2:
        raise ShapeError(f"batch_norm: expects (N, C) or (N, C, H, W), got shape {x.shape}")
    channels, dtype = x.shape[1], x.dtype
    expected = (channels,)
    for p in (weight, bias, running_mean, running_var):
        if p is not None and (type(p) is not Tensor or p.shape != expected or p.dtype != dtype):
            for what, q in (
                ("weight", weight),
                ("bias", bias),
                ("running_mean", running_mean),
                ("running_var", running_var),
            ):
                _check_param("batch_norm", what, q, x, channels)
    if residual is not None and type(residual) is not Tensor:
        raise TypeError(
            f"batch_norm: residual must be a Tensor or None, got {type(residual).__name__}"
        )
    if (running_mean is None) != (running_var is None):
        raise ValueError("batch_norm: give both running_mean and running_var, or neither")


class RunningStats(Op):
    """Batch norm's new running statistics, one op for both (eight tiny ops before, a
    quarter of a small ResNet step's ops): (1 - momentum) * running + momentum * batch,
    with the batch variance made unbiased."""

    name = "batch_norm_running_stats"
    n_outputs = 2
    differentiable = False

    def __init__(self, momentum: float, count: int):
        self.momentum = float(momentum)
        self.count = count

    def infer(self, running_mean: Cell, running_var: Cell, mean: Cell, var: Cell):
        return [(running_mean.shape, running_mean.dtype), (running_var.shape, running_var.dtype)]

    def forward(self, xp, running_mean, running_var, mean, var):
        if running_mean.dtype is HALF:
            return in_float32(self.forward, xp, running_mean, running_var, mean, var)
        m, count = self.momentum, self.count
        new_mean = running_mean * (1.0 - m) + mean.reshape(-1) * m
        new_var = running_var * (1.0 - m) + var.reshape(-1) * (m * count / (count - 1))
        return new_mean, new_var


def _batch_norm_eval(x, weight, bias, running_mean, running_var, eps, relu, residual) -> Tensor:
    """y = x * scale + shift with per-channel scale and shift computed from the running
    stats, as the separate ops (then ``+ residual``, then the ReLU)."""
    from .activation import relu as relu_op
    from .activation import sqrt
    from .arithmetic import neg
    from .shape import reshape

    scale = 1.0 / sqrt(running_var + float(eps))
    if weight is not None:
        scale = scale * weight
    shift = neg(running_mean * scale)
    if bias is not None:
        shift = shift + bias
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = x * reshape(scale, shape) + reshape(shift, shape)
    if residual is not None:
        y = y + residual
    return relu_op(y) if relu else y


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """Layer normalization over the last axis; weight and bias (or None) have its length."""
    if expect_tensor("layer_norm", x).ndim < 1:
        raise ShapeError("layer_norm: expects at least 1 dimension, got a 0-d tensor")
    for what, p in (("weight", weight), ("bias", bias)):
        _check_param("layer_norm", what, p, x, x.shape[-1])
    eps = expect_number("layer_norm", eps, "eps")
    params = tuple(p for p in (weight, bias) if p is not None)
    op = shared_op(
        Normalize,
        "layer_norm",
        (x.ndim - 1,),
        x.ndim - 1,
        float(eps),
        weight is not None,
        bias is not None,
    )
    # (y, mean, var): mean and var die with the tuple, var first, the order traces record
    return apply(op, x, *params)[0]
