"""Pooling over NCHW images: max and average pooling with their gradient ops, global
average pooling and nearest upsampling (the window geometry is in ``window.py``).

The pooling gradients add windows back into the image with a strided gather
(``Window.fold``): no kernel loops over pixels or kernel positions in Python.
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
from .window import Pair, Window, as_pair, batch_first, check_image


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


class MaxPool2d(Pool2d):
    """Max over each window; padding counts as -inf. The gradient goes to the first maximum
    of each window in row-major order (as PyTorch), accumulating where windows overlap; to
    the last NaN of a window that has one, and to the window's first element inside the
    image when all of it is -inf (PyTorch's choices too)."""

    name = "max_pool2d"
    retain_inputs = (0,)

    def forward(self, xp, x):
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

    def forward(self, xp, x, g):
        window = self.window
        if window.kernel == window.stride and window.padding == (0, 0):
            tiled = self.tiled(xp, x, g)
            if tiled is not None:
                return tiled
        out_hw = g.shape[2:]
        patches = window.window_view(xp, window.batch_last(xp, x, -math.inf), out_hw)
        passed = self.not_chosen(xp, patches, x.shape[2:])
        g = g.transpose(1, 2, 3, 0)[:, None, None]  # (C, 1, 1, OH, OW, N)
        return batch_first(xp, window.fold(xp, zero_where(xp, passed, g), x.shape[2:]))

    def tiled(self, xp, x, g):
        """The gradient for windows that tile the image (kernel = stride, no padding, as
        U-Net's 2x2 pooling), in the image's own layout: x batch-last seen as
        (C, OH, KH, OW, KW, N), so the mask and the result need no window copies or fold.
        None when a window holds a NaN or ties for its maximum (the general path then
        breaks the tie as PyTorch does)."""
        (kh, kw), (n, c, h, w), (oh, ow) = self.window.kernel, x.shape, g.shape[2:]
        tiles = x.transpose(1, 2, 3, 0)[:, : oh * kh, : ow * kw].reshape(c, oh, kh, ow, kw, n)
        best = tiles.max(axis=2).max(axis=3)  # KH first: about 1.5x faster than both at once
        passed = tiles != best[:, :, None, :, None]
        if bool(xp.isnan(best).any()) or int(xp.count_nonzero(passed)) != passed.size - best.size:
            return None
        grad = zero_where(xp, passed, g.transpose(1, 2, 3, 0)[:, :, None, :, None])
        grad = grad.reshape(c, oh * kh, ow * kw, n)
        if (oh * kh, ow * kw) != (h, w):  # rows and columns past the last window get nothing
            image = xp.zeros((c, h, w, n), dtype=grad.dtype)
            image[:, : oh * kh, : ow * kw] = grad
            grad = image
        return grad.transpose(3, 0, 1, 2)

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

    def forward(self, xp, x):
        if x.dtype is HALF:  # window sums in float32, as PyTorch's
            return in_float32(self.forward, xp, x)
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

    def forward(self, xp, g):
        """Every window gets the same share: a broadcast, folded into the image."""
        if g.dtype is HALF:
            return in_float32(self.forward, xp, g)
        window = self.window
        (kh, kw), (n, c, oh, ow) = window.kernel, g.shape
        share = g.transpose(1, 2, 3, 0) * (1.0 / (kh * kw))
        share = share[:, None, None]
        cols = xp.broadcast_to(share, (c, kh, kw, oh, ow, n))
        return batch_first(xp, window.fold(xp, cols, self.x_shape[2:]))


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


def upsample_nearest2d(x: Tensor, scale_factor) -> Tensor:
    """Repeat each pixel ``scale_factor`` times along H and W (an int or a pair of ints):
    a broadcast view and one copy, so the gradient (a sum over each block) comes for free."""
    from .shape import broadcast_to, reshape

    sh, sw = as_pair(scale_factor, "scale_factor", "upsample_nearest2d")
    if expect_tensor("upsample_nearest2d", x).ndim != 4:
        raise ValueError(f"upsample_nearest2d: expects an NCHW input, got shape {x.shape}")
    if sh < 1 or sw < 1:
        raise ValueError(f"upsample_nearest2d: scale_factor must be >= 1, got {(sh, sw)}")
    n, c, h, w = x.shape
    # new axes by indexing where x is laid out batch-last (a reshape would copy it first)
    spaced = reshape(x, (n, c, h, 1, w, 1)) if x.cell.contiguous else x[:, :, :, None, :, None]
    blocks = broadcast_to(spaced, (n, c, h, sh, w, sw))
    return reshape(blocks, (n, c, h * sh, w * sw))
