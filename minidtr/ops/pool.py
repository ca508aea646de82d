"""Pooling over NCHW images: max and average pooling with their gradient ops, global
average pooling and nearest upsampling (the window geometry is in ``window.py``).

The pooling gradients add windows back into the image with a strided gather
(``Window.fold``): no kernel loops over pixels or kernel positions in Python.
Channels are pooled independently, so each kernel runs on blocks of channels
(``by_channels``) whose scratch arrays (a padded copy, the windows' masks and
terms) fit a 1/``CHUNK_FRACTION`` share of the op's largest operand: the workspace
each declares (``workspace``), whatever the batch.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime.storage import Cell
from ..tensor import Tensor
from .activation import zero_where
from .op import (
    HALF,
    DTypeError,
    Op,
    apply,
    expect_tensor,
    float_dtype,
    in_float32,
    numel,
    shared_op,
)
from .reduce import mean as reduce_mean
from .shift import CHUNK_FRACTION
from .window import Pair, Window, as_pair, batch_first, batch_last_copy, check_image, copy_bytes


class Pool2d(Op):
    """Shared set-up of the pooling ops: PyTorch's limit of padding to half the kernel."""

    def __init__(self, kernel_size, stride, padding):
        self.window = Window(
            self.name, kernel_size, kernel_size if stride is None else stride, padding
        )
        if any(p > k // 2 for p, k in zip(self.window.padding, self.window.kernel, strict=True)):
            raise ValueError(
                f"{self.name}: padding {self.window.padding} must be at most half "
                f"the kernel size {self.window.kernel}"
            )

    def infer(self, x: Cell):
        dtype = float_dtype(self, x)
        check_image(self, x)
        oh, ow = self.window.checked_out_hw(self, x)
        return [((*x.shape[:2], oh, ow), dtype)]

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float(numel(out_metas[0]) * math.prod(self.window.kernel)), nbytes

    def per_channel(self, x_shape: tuple[int, ...], itemsize: int) -> int:
        """The scratch bytes of one channel: the padded copy and the window reduction
        (in float32 for float16), and the block's result."""
        n, _, h, w = x_shape
        (ph, pw), (oh, ow) = self.window.padding, self.window.out_hw((h, w))
        wide = 4 if itemsize == 2 else itemsize
        return n * ((h + 2 * ph) * (w + 2 * pw) * wide + 2 * oh * ow * wide + h * w * wide)

    def workspace(self, x: Cell) -> int:
        return block_bytes(x.shape, self.per_channel(x.shape, x.dtype.itemsize), x.dtype)

    def pooled(self, xp, x):
        raise NotImplementedError

    def forward(self, xp, x):
        size = blocks(x.shape, self.per_channel(x.shape, x.itemsize), x.itemsize)
        return by_channels(xp, self.pooled, (x,), self.out_shape(x.shape), x.dtype, size)

    def out_shape(self, x_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*x_shape[:2], *self.window.out_hw(x_shape[2:]))


class MaxPool2d(Pool2d):
    """Max over each window; padding counts as -inf. The gradient goes to the first maximum
    of each window in row-major order (as PyTorch), accumulating where windows overlap; to
    the last NaN of a window that has one, and to the window's first element inside the
    image when all of it is -inf (PyTorch's choices too)."""

    name = "max_pool2d"
    retain_inputs = (0,)

    def pooled(self, xp, x):
        window = self.window
        out_hw = window.out_hw(x.shape[2:])
        patches = window.window_view(xp, window.batch_last(xp, x, -math.inf), out_hw)
        return batch_first(xp, patches.max(axis=(1, 2)))

    def backward(self, ctx, g):
        return apply(MaxPool2dGrad(self.window), ctx.inputs[0], g)


class MaxPool2dGrad(Op):
    name = "max_pool2d_grad"
    differentiable = False

    def __init__(self, window: Window):
        self.window = window

    def infer(self, x: Cell, g: Cell):
        return [(x.shape, x.dtype)]

    def per_channel(self, x_shape: tuple[int, ...], itemsize: int) -> int:
        """The scratch bytes of one channel: a padded copy, the windows' masks, ranks and
        terms (each counted at the value's size), the fold's and the block's images."""
        n, _, h, w = x_shape
        window = self.window
        (ph, pw), (oh, ow) = window.padding, window.out_hw((h, w))
        terms = math.prod(window.kernel) * oh * ow * n * itemsize
        padded = (h + 2 * ph) * (w + 2 * pw) * n * itemsize
        return 3 * terms + padded + 4 * h * w * n * itemsize

    def workspace(self, x: Cell, g: Cell) -> int:
        return block_bytes(x.shape, self.per_channel(x.shape, x.dtype.itemsize), x.dtype)

    def forward(self, xp, x, g):
        window = self.window
        per_channel = self.per_channel(x.shape, x.itemsize)
        if window.kernel == window.stride and window.padding == (0, 0):
            workspace = block_bytes(x.shape, per_channel, x.dtype)
            tiled = self.tiled(xp, x, g, workspace)
            if tiled is not None:
                return tiled
        size = blocks(x.shape, per_channel, x.itemsize)
        return by_channels(xp, self.gradient, (x, g), x.shape, x.dtype, size)

    def gradient(self, xp, x, g):
        window = self.window
        out_hw = g.shape[2:]
        patches = window.window_view(xp, window.batch_last(xp, x, -math.inf), out_hw)
        passed = self.not_chosen(xp, patches, x.shape[2:])
        g = g.transpose(1, 2, 3, 0)[:, None, None]  # (C, 1, 1, OH, OW, N)
        return batch_first(xp, window.fold(xp, zero_where(xp, passed, g), x.shape[2:]))

    def tiled(self, xp, x, g, workspace: int):
        """The gradient for windows that tile the image (kernel = stride, no padding, as
        U-Net's 2x2 pooling), written into a zeroed batch-last output: x seen as (C, OH,
        KH, OW, KW, N) (a view), each window's maximum taken over its KH * KW element
        views, and g copied to the first element (in row-major window order, PyTorch's
        choice among ties) equal to it. Its scratch, the maxima and two masks of the
        windows' size per block of channels, stays within the general path's
        ``workspace``. None where a window holds a NaN (the general path gives it the
        last NaN, as PyTorch does), or where one channel's scratch does not fit."""
        (kh, kw), (n, c, h, w), (oh, ow) = self.window.kernel, x.shape, g.shape[2:]
        per_channel = oh * ow * n * (x.itemsize + 2)  # the maxima and the two masks
        channels = min(c, workspace // max(per_channel, 1))
        if channels < 1:
            return None
        out = xp.zeros((c, h, w, n), dtype=x.dtype)
        best = xp.empty((channels, oh, ow, n), dtype=x.dtype)
        chosen = xp.empty((channels, oh, ow, n), dtype=bool)
        unchosen = xp.empty((channels, oh, ow, n), dtype=bool)  # windows not given g yet
        places = [(i, j) for i in range(kh) for j in range(kw)]
        for c0 in range(0, c, channels):
            k = min(c, c0 + channels) - c0
            tiles = x[:, c0 : c0 + k].transpose(1, 2, 3, 0)[:, : oh * kh, : ow * kw]
            tiles = tiles.reshape(k, oh, kh, ow, kw, n)
            image = out[c0 : c0 + k, : oh * kh, : ow * kw].reshape(k, oh, kh, ow, kw, n)
            grads = g[:, c0 : c0 + k].transpose(1, 2, 3, 0)
            top, hit, rest = best[:k], chosen[:k], unchosen[:k]
            xp.copyto(top, tiles[:, :, 0, :, 0])
            for i, j in places[1:]:
                xp.maximum(top, tiles[:, :, i, :, j], out=top)
            if bool(xp.isnan(top).any()):
                return None
            rest.fill(True)
            for i, j in places:
                xp.equal(tiles[:, :, i, :, j], top, out=hit)
                xp.logical_and(hit, rest, out=hit)
                xp.logical_xor(rest, hit, out=rest)
                xp.copyto(image[:, :, i, :, j], grads, where=hit)
        return out.transpose(3, 0, 1, 2)

    def not_chosen(self, xp, patches, in_hw: Pair):
        """A bool mask (C, KH, KW, OH, OW, N), False at the one element of each window
        that gets the gradient. Each element is ranked by its row-major place in the
        window from the last (the first ranks highest), so the first of the maxima has
        the highest rank among them: maxima over windows, no argmax along short rows."""
        window = self.window
        kh, kw = window.kernel
        axes = (1, 2)
        best = patches.max(axis=axes, keepdims=True)
        passed = patches != best
        nan_windows = xp.isnan(best)
        has_nan = bool(nan_windows.any())
        if not has_nan and int(xp.count_nonzero(passed)) == passed.size - best.size:
            return passed  # every window has one maximum (the usual case): no tie to break
        places = xp.arange(kh * kw, dtype=rank_dtype(kh * kw)).reshape(1, kh, kw, 1, 1, 1)
        ranked = (patches == best) * (kh * kw - places)
        passed = ranked != ranked.max(axis=axes, keepdims=True)
        if has_nan:  # the last NaN (the max is NaN there, so nothing above matched)
            ranked_nan = xp.isnan(patches) * (places + 1)
            not_last_nan = ranked_nan != ranked_nan.max(axis=axes, keepdims=True)
            passed = xp.where(nan_windows, not_last_nan, passed)
        if window.padding != (0, 0):  # all -inf: the first element inside the image
            inside = window.batch_last(xp, xp.ones((1, 1, *in_hw), dtype=bool))
            inside = window.window_view(xp, inside, patches.shape[3:5])
            ranked_inside = inside * (kh * kw - places)
            not_first_inside = ranked_inside != ranked_inside.max(axis=axes, keepdims=True)
            passed = xp.where(best == -math.inf, not_first_inside, passed)
        return passed


def rank_dtype(count: int):
    """The smallest signed integer dtype that holds 0 .. count."""
    return next(d for d in ("int8", "int16", "int32", "int64") if count <= np.iinfo(d).max)


class AvgPool2d(Pool2d):
    """Mean over each window; padding counts as zeros in the mean (count_include_pad)."""

    name = "avg_pool2d"

    def pooled(self, xp, x):
        if x.dtype is HALF:  # window sums in float32, as PyTorch's
            return in_float32(self.pooled, xp, x)
        window = self.window
        out_hw = window.out_hw(x.shape[2:])
        out = window.window_view(xp, window.batch_last(xp, x), out_hw).sum(axis=(1, 2))
        out /= float(math.prod(window.kernel))
        return batch_first(xp, out)

    def backward(self, ctx, g):
        return apply(AvgPool2dGrad(self.window, ctx.in_shapes[0]), g)


class AvgPool2dGrad(Op):
    name = "avg_pool2d_grad"
    differentiable = False

    def __init__(self, window: Window, x_shape: tuple[int, ...]):
        self.window = window
        self.x_shape = x_shape

    def infer(self, g: Cell):
        return [(self.x_shape, g.dtype)]

    def per_channel(self, itemsize: int) -> int:
        """The scratch bytes of one channel: the share, the fold's terms and images, the
        block's image (in float32 for float16)."""
        n, _, h, w = self.x_shape
        window = self.window
        (ph, pw), (oh, ow) = window.padding, window.out_hw((h, w))
        wide = 4 if itemsize == 2 else itemsize
        terms = math.prod(window.kernel) * oh * ow * n * wide
        padded = (h + 2 * ph) * (w + 2 * pw) * n * wide
        return 2 * terms + 2 * padded + 3 * h * w * n * wide + 2 * oh * ow * n * wide

    def workspace(self, g: Cell) -> int:
        return block_bytes(self.x_shape, self.per_channel(g.dtype.itemsize), g.dtype)

    def forward(self, xp, g):
        size = blocks(self.x_shape, self.per_channel(g.itemsize), g.itemsize)
        return by_channels(xp, self.gradient, (g,), self.x_shape, g.dtype, size)

    def gradient(self, xp, g):
        """Every window gets the same share: a broadcast, folded into the image."""
        if g.dtype is HALF:
            return in_float32(self.gradient, xp, g)
        window = self.window
        (kh, kw), (n, c, oh, ow) = window.kernel, g.shape
        share = g.transpose(1, 2, 3, 0) * (1.0 / (kh * kw))
        share = share[:, None, None]
        cols = xp.broadcast_to(share, (c, kh, kw, oh, ow, n))
        return batch_first(xp, window.fold(xp, cols, self.x_shape[2:]))


def blocks(x_shape: tuple[int, ...], per_channel: int, itemsize: int) -> tuple[int, int]:
    """(channels, images) per block: as many channels as fit a 1/CHUNK_FRACTION share of
    the image, or, when one channel does not, one channel and as many images as fit
    (at least one of each)."""
    n, c, h, w = x_shape
    cap = n * c * h * w * itemsize // CHUNK_FRACTION
    if per_channel <= cap:
        return max(1, min(c, cap // max(per_channel, 1))), max(n, 1)
    return 1, max(1, min(n, cap * n // per_channel))


def block_bytes(x_shape: tuple[int, ...], per_channel: int, dtype) -> int:
    """The workspace of a pooling kernel run by ``blocks``: one block's scratch."""
    channels, images = blocks(x_shape, per_channel, dtype.itemsize)
    return channels * -(-per_channel * images // max(x_shape[0], 1))


def by_channels(xp, kernel, arrays: tuple, out_shape: tuple[int, ...], dtype, size: tuple):
    """``kernel(xp, *arrays)`` (each (N, C, ...), pooled per channel and image) on blocks
    of ``size`` (channels, images), gathered into one batch-last result of ``out_shape``."""
    n, c, h, w = out_shape
    channels, images = size
    if channels >= c and images >= n:
        return kernel(xp, *arrays)
    out = xp.empty((c, h, w, n), dtype=dtype)
    for c0 in range(0, c, channels):
        for n0 in range(0, n, images):
            part = kernel(xp, *(a[n0 : n0 + images, c0 : c0 + channels] for a in arrays))
            out[c0 : c0 + channels, :, :, n0 : n0 + images] = part.transpose(1, 2, 3, 0)
            del part
    return out.transpose(3, 0, 1, 2)


# ---- functional API -----------------------------------------------------------------------------


def max_pool2d(x: Tensor, kernel_size, stride=None, padding: int = 0) -> Tensor:
    return apply(pool_op(MaxPool2d, kernel_size, stride, padding), x)


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding: int = 0) -> Tensor:
    return apply(pool_op(AvgPool2d, kernel_size, stride, padding), x)


def pool_op(cls: type[Pool2d], kernel_size, stride, padding) -> Pool2d:
    if type(kernel_size) is type(padding) is int and (stride is None or type(stride) is int):
        return shared_op(cls, kernel_size, stride, padding)
    return cls(kernel_size, stride, padding)


def global_avg_pool2d(x: Tensor) -> Tensor:
    """The mean over H and W: (N, C, H, W) -> (N, C)."""
    if expect_tensor("global_avg_pool2d", x).ndim != 4:
        raise ValueError(f"global_avg_pool2d: expects an NCHW input, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise DTypeError(f"global_avg_pool2d: needs a floating-point input, got {x.dtype}")
    return reduce_mean(x, axis=(2, 3))


class UpsampleNearest2d(Op):
    """Each pixel repeated over a (SH, SW) block, the result batch-last like the window
    kernels' (the convolution after it reads it without a copy)."""

    name = "upsample_nearest2d"

    def __init__(self, scale: Pair):
        self.scale = scale

    def infer(self, x: Cell):
        if len(x.shape) != 4:
            raise self.error("expects an NCHW input with 4 dimensions", x)
        (n, c, h, w), (sh, sw) = x.shape, self.scale
        return [((n, c, h * sh, w * sw), x.dtype)]

    def forward(self, xp, x):
        (n, c, h, w), (sh, sw) = x.shape, self.scale
        out = xp.empty((c, h, sh, w, sw, n), dtype=x.dtype)
        out[...] = x.transpose(1, 2, 3, 0)[:, :, None, :, None]
        return out.reshape(c, h * sh, w * sw, n).transpose(3, 0, 1, 2)

    def backward(self, ctx, g):
        return apply(UpsampleNearest2dGrad(self.scale), g)

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return 0.0, nbytes


class UpsampleNearest2dGrad(Op):
    """The sum of each (SH, SW) block of the gradient."""

    name = "upsample_nearest2d_grad"
    differentiable = False

    def __init__(self, scale: Pair):
        self.scale = scale

    def infer(self, g: Cell):
        (n, c, h, w), (sh, sw) = g.shape, self.scale
        return [((n, c, h // sh, w // sw), g.dtype)]

    def forward(self, xp, g):
        (n, c, h, w), (sh, sw) = g.shape, self.scale
        blocks = batch_last_copy(xp, g).reshape(c, h // sh, sh, w // sw, sw, n)
        return blocks.sum(axis=(2, 4)).transpose(3, 0, 1, 2)

    def workspace(self, g: Cell) -> int:
        return copy_bytes(g)  # g batch-last: none


def upsample_nearest2d(x: Tensor, scale_factor) -> Tensor:
    """Repeat each pixel ``scale_factor`` times along H and W (an int or a pair of ints)."""
    sh, sw = as_pair(scale_factor, "scale_factor", "upsample_nearest2d")
    if expect_tensor("upsample_nearest2d", x).ndim != 4:
        raise ValueError(f"upsample_nearest2d: expects an NCHW input, got shape {x.shape}")
    if sh < 1 or sw < 1:
        raise ValueError(f"upsample_nearest2d: scale_factor must be >= 1, got {(sh, sw)}")
    return apply(shared_op(UpsampleNearest2d, (sh, sw)), x)
