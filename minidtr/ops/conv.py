"""Convolution and pooling over NCHW images: conv2d, max/avg pooling, global average pooling,
nearest upsampling.

Windows are read with ``as_strided``. conv2d turns them into columns (im2col)
with the batch as the innermost axis and multiplies them by the flattened
weight in one matrix product for the whole batch; its input gradient is one
product and a fold of the columns back into the image (one vectorized add per
kernel position). Pooling reads windows in NCHW (a view of shape
(N, C, OH, OW, KH, KW)) and reduces over them. The gradient kernels are ops of their own (not
differentiable), so backward allocates only the gradients themselves.
"""

from __future__ import annotations

import math
import numbers

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import DTypeError, Op, apply, expect_tensor, float_dtype

Pair = tuple[int, int]


def as_pair(value, what: str, op_name: str) -> Pair:
    """An int or a pair of ints as a pair (height, width)."""
    pair = (value, value) if is_int(value) else value
    if not isinstance(pair, tuple | list) or len(pair) != 2 or not all(map(is_int, pair)):
        raise ValueError(f"{op_name}: {what} must be an int or a pair of ints, got {value!r}")
    return int(pair[0]), int(pair[1])


def is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class Window:
    """The geometry shared by convolution and pooling: kernel, stride, padding, output size."""

    def __init__(self, op_name: str, kernel_size, stride, padding):
        self.kernel = as_pair(kernel_size, "kernel_size", op_name)
        self.stride = as_pair(stride, "stride", op_name)
        self.padding = as_pair(padding, "padding", op_name)
        if min(self.kernel) < 1 or min(self.stride) < 1 or min(self.padding) < 0:
            raise ValueError(
                f"{op_name}: need kernel_size >= 1, stride >= 1 and padding >= 0, got kernel "
                f"{self.kernel}, stride {self.stride}, padding {self.padding}"
            )

    def __repr__(self) -> str:
        return f"Window(kernel={self.kernel}, stride={self.stride}, padding={self.padding})"

    def out_hw(self, in_hw) -> Pair:
        """The output (height, width) for an input (height, width); < 1 when none fits."""
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        return (in_hw[0] + 2 * ph - kh) // sh + 1, (in_hw[1] + 2 * pw - kw) // sw + 1

    def checked_out_hw(self, op: Op, x: Cell, *others: Cell) -> Pair:
        oh, ow = self.out_hw(x.shape[2:])
        if oh < 1 or ow < 1:
            (ph, pw), (kh, kw) = self.padding, self.kernel
            raise op.error(
                f"the padded input ({x.shape[2] + 2 * ph}, {x.shape[3] + 2 * pw}) is smaller "
                f"than the kernel ({kh}, {kw})",
                x,
                *others,
            )
        return oh, ow

    def pad(self, xp, x, value: float = 0.0):
        ph, pw = self.padding
        if ph == 0 and pw == 0:
            return x
        return xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)

    def windows(self, xp, padded, out_hw: Pair):
        """A read-only view (N, C, OH, OW, KH, KW) of every window of the padded input."""
        n, c = padded.shape[:2]
        s_n, s_c, s_h, s_w = padded.strides
        (sh, sw), (kh, kw) = self.stride, self.kernel
        return backend.as_strided(
            xp, padded, (n, c, *out_hw, kh, kw), (s_n, s_c, s_h * sh, s_w * sw, s_h, s_w)
        )

    def col2im(self, xp, cols, in_shape: tuple[int, ...]):
        """The adjoint of ``windows``: add each window (N, C, KH, KW, OH, OW) back into an
        array of the input's shape (overlaps accumulate, padding is dropped)."""
        n, c, h, w = in_shape
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        oh, ow = cols.shape[-2:]
        padded = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
        for i in range(kh):
            for j in range(kw):
                padded[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += (
                    cols[:, :, i, j]
                )
        if ph == 0 and pw == 0:
            return padded
        return padded[:, :, ph : ph + h, pw : pw + w].copy()

    def columns(self, xp, x, out_hw: Pair):
        """im2col with the batch last: a fresh (C*KH*KW, OH*OW*N) array of the windows of
        ``x`` (N, C, H, W), so one matrix product serves the whole batch."""
        n, c = x.shape[:2]
        (kh, kw), (sh, sw) = self.kernel, self.stride
        padded = self.batch_last(xp, x)
        s_c, s_h, s_w, s_n = padded.strides
        view = backend.as_strided(
            xp, padded, (c, kh, kw, *out_hw, n), (s_c, s_h, s_w, s_h * sh, s_w * sw, s_n)
        )
        return view.reshape(c * kh * kw, out_hw[0] * out_hw[1] * n)

    def batch_last(self, xp, x):
        """``x`` (N, C, H, W) zero-padded and laid out as (C, H + 2ph, W + 2pw, N).

        With the batch innermost, every copy and sum over windows runs along N
        contiguous elements; in NCHW the innermost run is one image row, a handful of
        elements for the small images this library trains on."""
        n, c, h, w = x.shape
        ph, pw = self.padding
        out = xp.zeros((c, h + 2 * ph, w + 2 * pw, n), dtype=x.dtype)
        out[:, ph : ph + h, pw : pw + w] = x.transpose(1, 2, 3, 0)
        return out

    def fold_columns(self, xp, cols, in_shape: tuple[int, ...]):
        """The adjoint of ``columns``: add each window of ``cols`` (C, KH, KW, OH, OW, N) back
        into an image (N, C, H, W); overlaps accumulate, padding is dropped. One vectorized
        add per kernel position, each along contiguous runs of the batch."""
        n, c, h, w = in_shape
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        oh, ow = cols.shape[3:5]
        padded = xp.zeros((c, h + 2 * ph, w + 2 * pw, n), dtype=cols.dtype)
        for i in range(kh):
            for j in range(kw):
                padded[:, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += cols[
                    :, i, j
                ]
        return xp.ascontiguousarray(padded[:, ph : ph + h, pw : pw + w].transpose(3, 0, 1, 2))


def check_image(op: Op, x: Cell, *others: Cell) -> None:
    if len(x.shape) != 4:
        raise op.error(f"expects an NCHW input with 4 dimensions, got {len(x.shape)}", x, *others)


# ---- conv2d -----------------------------------------------------------------------------------


class Conv2d(Op):
    """Cross-correlation of x (N, C, H, W) with w (O, C, KH, KW), plus an optional bias (O,)."""

    name = "conv2d"
    retain_inputs = (0, 1)

    def __init__(self, stride, padding):
        self.stride = as_pair(stride, "stride", self.name)
        self.padding = as_pair(padding, "padding", self.name)

    def window(self, w_shape) -> Window:
        return Window(self.name, w_shape[2:], self.stride, self.padding)

    def infer(self, x: Cell, w: Cell, *bias: Cell):
        dtype = float_dtype(self, x, w, *bias)
        check_image(self, x, w, *bias)
        if len(w.shape) != 4:
            raise self.error(
                f"expects an OIHW weight with 4 dimensions, got {len(w.shape)}", x, w, *bias
            )
        if x.shape[1] != w.shape[1]:
            raise self.error(
                f"input has {x.shape[1]} channels, the weight expects {w.shape[1]}", x, w, *bias
            )
        if bias and bias[0].shape != (w.shape[0],):
            raise self.error(
                f"bias must have shape ({w.shape[0]},), one per output channel", x, w, *bias
            )
        window = self.window(w.shape)
        oh, ow = window.checked_out_hw(self, x, w, *bias)
        return [((x.shape[0], w.shape[0], oh, ow), dtype)]

    def forward(self, xp, x, w, *bias):
        n, o = x.shape[0], w.shape[0]
        window = self.window(w.shape)
        oh, ow = window.out_hw(x.shape[2:])
        cols = window.columns(xp, x, (oh, ow))
        out = xp.ascontiguousarray(
            (w.reshape(o, -1) @ cols).reshape(o, oh, ow, n).transpose(3, 0, 1, 2)
        )
        if bias:
            out += bias[0].reshape(1, o, 1, 1)
        return out

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        (_, c, _, _), (_, _, kh, kw) = in_metas[0][0], in_metas[1][0]
        return 2.0 * math.prod(out_metas[0][0]) * c * kh * kw, nbytes

    def backward(self, inputs, outputs, g):
        from .reduce import sum

        x, w = inputs[:2]
        gx = gw = gb = None
        if self.needs_grad[0]:
            gx = apply(Conv2dGradInput(self.stride, self.padding, self.in_shapes[0]), g, w)
        if self.needs_grad[1]:
            gw = apply(Conv2dGradWeight(self.stride, self.padding, self.in_shapes[1]), x, g)
        if len(self.needs_grad) > 2 and self.needs_grad[2]:
            gb = sum(g, axis=(0, 2, 3))
        return (gx, gw, gb)[: len(self.in_shapes)]


class Conv2dGradInput(Op):
    """dL/dx of conv2d from g (N, O, OH, OW) and w: columns w^T g, folded back by col2im."""

    name = "conv2d_grad_input"
    differentiable = False

    def __init__(self, stride: Pair, padding: Pair, x_shape: tuple[int, ...]):
        self.stride = stride
        self.padding = padding
        self.x_shape = x_shape

    def infer(self, g: Cell, w: Cell):
        return [(self.x_shape, g.dtype)]

    def forward(self, xp, g, w):
        n, o, oh, ow = g.shape
        _, c, kh, kw = w.shape
        g = xp.ascontiguousarray(g.transpose(1, 2, 3, 0)).reshape(o, oh * ow * n)
        cols = (w.reshape(o, -1).T @ g).reshape(c, kh, kw, oh, ow, n)
        window = Window(self.name, (kh, kw), self.stride, self.padding)
        return window.fold_columns(xp, cols, self.x_shape)

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        (g_shape, _), (w_shape, _) = in_metas
        return 2.0 * math.prod(g_shape) * math.prod(w_shape[1:]), nbytes


class Conv2dGradWeight(Op):
    """dL/dw of conv2d from x and g: g times the input's columns, one matrix product over
    the whole batch (both in the batch-last layout of ``Window.columns``)."""

    name = "conv2d_grad_weight"
    differentiable = False

    def __init__(self, stride: Pair, padding: Pair, w_shape: tuple[int, ...]):
        self.stride = stride
        self.padding = padding
        self.w_shape = w_shape

    def infer(self, x: Cell, g: Cell):
        return [(self.w_shape, g.dtype)]

    def forward(self, xp, x, g):
        n, o, oh, ow = g.shape
        window = Window(self.name, self.w_shape[2:], self.stride, self.padding)
        cols = window.columns(xp, x, (oh, ow))
        g = xp.ascontiguousarray(g.transpose(1, 2, 3, 0)).reshape(o, oh * ow * n)
        return (g @ cols.T).reshape(self.w_shape)

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        (g_shape, _) = in_metas[1]
        return 2.0 * math.prod(g_shape) * math.prod(self.w_shape[1:]), nbytes


# ---- pooling ------------------------------------------------------------------------------------


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
        return float(math.prod(out_metas[0][0]) * math.prod(self.window.kernel)), nbytes


class MaxPool2d(Pool2d):
    """Max over each window; padding counts as -inf. The gradient goes to the first maximum
    of each window in row-major order (as PyTorch), accumulating where windows overlap; to
    the last NaN of a window that has one, and to the window's first element inside the
    image when all of it is -inf (PyTorch's choices too)."""

    name = "max_pool2d"
    retain_inputs = (0,)

    def forward(self, xp, x):
        out_hw = self.window.out_hw(x.shape[2:])
        return self.window.windows(xp, self.window.pad(xp, x, -math.inf), out_hw).max(axis=(4, 5))

    def backward(self, inputs, outputs, g):
        return apply(MaxPool2dGrad(self.window), inputs[0], g)


class MaxPool2dGrad(Op):
    name = "max_pool2d_grad"
    differentiable = False

    def __init__(self, window: Window):
        self.window = window

    def infer(self, x: Cell, g: Cell):
        return [(x.shape, x.dtype)]

    def forward(self, xp, x, g):
        window = self.window
        n, c, oh, ow = g.shape
        kh, kw = window.kernel
        patches = window.windows(xp, window.pad(xp, x, -math.inf), (oh, ow))
        flat = patches.reshape(n, c, oh, ow, kh * kw)
        first_max = flat.argmax(axis=-1)
        if window.padding != (0, 0):
            inside = window.windows(
                xp, window.pad(xp, xp.ones((1, 1, *x.shape[2:]), bool)), (oh, ow)
            )
            first_inside = inside.reshape(1, 1, oh, ow, kh * kw).argmax(axis=-1)
            all_neg_inf = flat.max(axis=-1) == -math.inf
            first_max = xp.where(all_neg_inf, first_inside, first_max)
        nan = xp.isnan(flat)
        if nan.any():
            last_nan = kh * kw - 1 - nan[..., ::-1].argmax(axis=-1)
            first_max = xp.where(nan.any(axis=-1), last_nan, first_max)
        cols = xp.zeros((n, c, kh, kw, oh, ow), dtype=g.dtype)
        zero = xp.zeros((), dtype=g.dtype)
        for k in range(kh * kw):
            cols[:, :, k // kw, k % kw] = xp.where(first_max == k, g, zero)
        return window.col2im(xp, cols, x.shape)


class AvgPool2d(Pool2d):
    """Mean over each window; padding counts as zeros in the mean (count_include_pad)."""

    name = "avg_pool2d"

    def forward(self, xp, x):
        out_hw = self.window.out_hw(x.shape[2:])
        out = self.window.windows(xp, self.window.pad(xp, x), out_hw).sum(axis=(4, 5))
        out /= float(math.prod(self.window.kernel))
        return out

    def backward(self, inputs, outputs, g):
        return apply(AvgPool2dGrad(self.window, self.in_shapes[0]), g)


class AvgPool2dGrad(Op):
    name = "avg_pool2d_grad"
    differentiable = False

    def __init__(self, window: Window, x_shape: tuple[int, ...]):
        self.window = window
        self.x_shape = x_shape

    def infer(self, g: Cell):
        return [(self.x_shape, g.dtype)]

    def forward(self, xp, g):
        kh, kw = self.window.kernel
        share = g * (1.0 / (kh * kw))
        cols = xp.broadcast_to(share[:, :, None, None], (*g.shape[:2], kh, kw, *g.shape[2:]))
        return self.window.col2im(xp, cols, self.x_shape)


# ---- functional API -----------------------------------------------------------------------------


def conv2d(x: Tensor, w: Tensor, b: Tensor | None = None, stride=1, padding=0) -> Tensor:
    """2-D cross-correlation (PyTorch's conv2d): x (N, C, H, W), w (O, C, KH, KW), b (O,)."""
    return apply(Conv2d(stride, padding), x, w, *(() if b is None else (b,)))


def max_pool2d(x: Tensor, kernel_size, stride=None, padding: int = 0) -> Tensor:
    return apply(MaxPool2d(kernel_size, stride, padding), x)


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding: int = 0) -> Tensor:
    return apply(AvgPool2d(kernel_size, stride, padding), x)


def global_avg_pool2d(x: Tensor) -> Tensor:
    """The mean over H and W: (N, C, H, W) -> (N, C)."""
    from .reduce import mean

    if expect_tensor("global_avg_pool2d", x).ndim != 4:
        raise ValueError(f"global_avg_pool2d: expects an NCHW input, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise DTypeError(f"global_avg_pool2d: needs a floating-point input, got {x.dtype}")
    return mean(x, axis=(2, 3))


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
    blocks = broadcast_to(reshape(x, (n, c, h, 1, w, 1)), (n, c, h, sh, w, sw))
    return reshape(blocks, (n, c, h * sh, w * sw))
