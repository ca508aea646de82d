"""Convolution and pooling over NCHW images: conv2d, max/avg pooling, global average pooling,
nearest upsampling.

The kernels work in a batch-last layout (C, H, W, N): windows are a strided view
(C, KH, KW, OH, OW, N) of the padded image, so every copy, product and reduction
runs along N contiguous elements. Their results keep that layout in memory (an
NCHW view of a (C, H, W, N) array, ``batch_first``), and so do the elementwise ops
and batch norm after them, so in a network only the data is ever transposed.
conv2d copies the windows into columns (im2col) and multiplies them by the
flattened weight, one matrix product for the whole batch whose result is already
the output; its input gradient is a transposed convolution computed by phase (also
one product, ``Window.transposed_columns``); the pooling gradients add windows back
into the image with a strided gather (``Window.fold``). No kernel loops over pixels
or kernel positions in Python. The gradient kernels are ops of their own (not
differentiable), so backward allocates only the gradients themselves.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from .. import backend
from ..runtime.storage import Cell
from ..tensor import Tensor
from .elementwise import zero_where
from .op import HALF, DTypeError, Op, apply, expect_tensor, float_dtype, in_float32, shared_op
from .reduce import mean as reduce_mean
from .reduce import sum as reduce_sum

Pair = tuple[int, int]


def as_pair(value, what: str, op_name: str) -> Pair:
    """An int or a pair of ints as a pair (height, width)."""
    pair = (value, value) if is_int(value) else value
    if not isinstance(pair, tuple | list) or len(pair) != 2 or not all(map(is_int, pair)):
        raise ValueError(f"{op_name}: {what} must be an int or a pair of ints, got {value!r}")
    return int(pair[0]), int(pair[1])


def is_int(value) -> bool:
    if type(value) is int:  # the usual case, without the slower ABC check
        return True
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def batch_first(xp, y):
    """(C, H, W, N) seen as (N, C, H, W), batch-last in memory: a transposed view of ``y``
    (of a compact copy when ``y`` is a view with gaps). The elementwise ops, batch norm and
    pooling that follow keep the layout (NumPy's ufuncs lay out their results like their
    inputs), so the next window kernel finds its input batch-last already."""
    return xp.ascontiguousarray(y).transpose(3, 0, 1, 2)


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

    # Adjoints by phase. With a kernel offset written i = s*u + v (s the stride, v < s its
    # phase, u < reach = ceil(k / s)), padded image row s*q + v receives window row q - u
    # at kernel row s*u + v: every phase of the image is a stride-1 correlation of the
    # windows with a kernel of size reach. So a gradient with respect to an image reads
    # shifted copies of the windows (a gather: no scatter, no atomics, the same additions
    # in the same order every run) and interleaves the phases.

    def phase_rows(self, in_hw: Pair) -> tuple[Pair, Pair, Pair]:
        """(reach, first, last) per axis: phase rows q in [first, last) cover the image's
        rows (padded rows padding .. padding + H - 1)."""
        return phase_rows(self.kernel, self.stride, self.padding, tuple(in_hw))

    def unphase(self, xp, phases, in_hw: Pair):
        """Images (C, H, W, N), a view, from ``phases`` (C, SH, SW, QH, QW, N) of the rows
        ``phase_rows`` gives: interleaved (one copy unless the stride is 1), cropped."""
        c, sh, sw, qh, qw, n = phases.shape
        if sh == 1 and sw == 1:
            images = phases.reshape(c, qh, qw, n)
        else:
            images = phases.transpose(0, 3, 1, 4, 2, 5).reshape(c, qh * sh, qw * sw, n)
        _, (q0h, q0w), _ = self.phase_rows(in_hw)
        top, left = self.padding[0] - q0h * sh, self.padding[1] - q0w * sw
        return images[:, top : top + in_hw[0], left : left + in_hw[1]]

    def fold(self, xp, cols, in_hw: Pair):
        """The adjoint of ``window_view``: windows ``cols`` (C, KH, KW, OH, OW, N), any
        strides, summed into images (C, H, W, N), a view; overlaps add up, padding is
        dropped. Each pixel adds its terms in row-major kernel order, as a loop over
        kernel positions would."""
        (kh, kw), (sh, sw) = self.kernel, self.stride
        (uh, uw), (q0h, q0w), (q1h, q1w) = self.phase_rows(in_hw)
        if (uh, uw) == (1, 1):
            return self.spread(xp, cols, in_hw)
        c, _, _, oh, ow, n = cols.shape
        # row q - u + reach - 1 of ``padded`` holds window row q - u, zeros around it
        rows = (max(q1h, oh) + uh - 1, max(q1w, ow) + uw - 1)
        padded = cols
        if (kh, kw, oh, ow) != (uh * sh, uw * sw, *rows):
            padded = xp.zeros((c, uh * sh, uw * sw, *rows, n), cols.dtype)
            padded[:, :kh, :kw, uh - 1 : uh - 1 + oh, uw - 1 : uw - 1 + ow] = cols
        s_c, s_i, s_j, s_y, s_x, s_n = padded.strides
        terms = backend.as_strided(
            xp,
            padded[:, 0, 0, uh - 1 + q0h :, uw - 1 + q0w :],
            (c, sh, sw, q1h - q0h, q1w - q0w, uh, uw, n),
            (s_c, s_i, s_j, s_y, s_x, sh * s_i - s_y, sw * s_j - s_x, s_n),
        )
        return self.unphase(xp, terms.sum(axis=(5, 6)), in_hw)

    def spread(self, xp, cols, in_hw: Pair):
        """``fold`` for windows that do not overlap (kernel <= stride): one copy of the
        windows into the image seen as tiles (C, OH, SH, OW, SW, N), padding dropped."""
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        c, _, _, oh, ow, n = cols.shape
        rows, width = max(oh * sh, ph + in_hw[0]), max(ow * sw, pw + in_hw[1])
        by_tile = cols.transpose(0, 3, 1, 4, 2, 5)
        covered = (kh, kw, rows, width) == (sh, sw, oh * sh, ow * sw)
        if covered and by_tile.flags.c_contiguous:  # cols came from a view in image order
            image = by_tile.reshape(c, rows, width, n)
        else:
            image = (xp.empty if covered else xp.zeros)((c, rows, width, n), cols.dtype)
            tiles = image[:, : oh * sh, : ow * sw].reshape(c, oh, sh, ow, sw, n)
            tiles[:, :, :kh, :, :kw] = by_tile
        return image[:, ph : ph + in_hw[0], pw : pw + in_hw[1]]

    def transposed_columns(self, xp, g, in_hw: Pair):
        """The columns of the gradient g (N, O, OH, OW) of a convolution with this window
        that, times ``phase_weight``, give the input's gradient by phase:
        (O*UH*UW, QH*QW*N), batch last (as ``columns``)."""
        n, o, oh, ow = g.shape
        (uh, uw), (q0h, q0w), (q1h, q1w) = self.phase_rows(in_hw)
        qh, qw = q1h - q0h, q1w - q0w
        # g row t sits at row t + reach - 1 - first, zeros around
        padded = xp.zeros((o, qh + uh - 1, qw + uw - 1, n), dtype=g.dtype)
        src, dst = [], []
        for size, u, q0, rows in ((oh, uh, q0h, qh + uh - 1), (ow, uw, q0w, qw + uw - 1)):
            lo, hi = max(0, q0 - u + 1), min(size, rows + q0 - u + 1)
            src.append(slice(lo, max(lo, hi)))
            dst.append(slice(lo + u - 1 - q0, max(lo, hi) + u - 1 - q0))
        padded[:, dst[0], dst[1]] = g[:, :, src[0], src[1]].transpose(1, 2, 3, 0)
        s_o, s_y, s_x, s_n = padded.strides
        view = backend.as_strided(
            xp, padded, (o, uh, uw, qh, qw, n), (s_o, s_y, s_x, s_y, s_x, s_n)
        )
        return view.reshape(o * uh * uw, qh * qw * n)

    def phase_weight(self, xp, w):
        """w (O, C, KH, KW) as the (C*SH*SW, O*UH*UW) matrix of ``transposed_columns``:
        kernel row s*(reach - 1 - u) + v at phase v, column u (zero past the kernel)."""
        o, c, kh, kw = w.shape
        (sh, sw), ((uh, uw), _, _) = self.stride, self.phase_rows((0, 0))
        padded = xp.zeros((o, c, uh * sh, uw * sw), dtype=w.dtype)
        padded[:, :, :kh, :kw] = w
        by_phase = padded.reshape(o, c, uh, sh, uw, sw)[:, :, ::-1, :, ::-1]
        return by_phase.transpose(1, 3, 5, 0, 2, 4).reshape(c * sh * sw, o * uh * uw)

    def columns(self, xp, x, out_hw: Pair):
        """im2col with the batch last: a fresh (C*KH*KW, OH*OW*N) array of the windows of
        ``x`` (N, C, H, W), so one matrix product serves the whole batch."""
        c, n = x.shape[1], x.shape[0]
        view = self.window_view(xp, self.batch_last(xp, x), out_hw)
        return view.reshape(c * self.kernel[0] * self.kernel[1], out_hw[0] * out_hw[1] * n)

    def window_view(self, xp, padded, out_hw: Pair):
        """A read-only view (C, KH, KW, OH, OW, N) of every window of ``padded``
        (C, H + 2ph, W + 2pw, N), the layout of ``batch_last``."""
        c, _, _, n = padded.shape
        (sh, sw), (kh, kw) = self.stride, self.kernel
        s_c, s_h, s_w, s_n = padded.strides
        return backend.as_strided(
            xp, padded, (c, kh, kw, *out_hw, n), (s_c, s_h, s_w, s_h * sh, s_w * sw, s_n)
        )

    def batch_last(self, xp, x, fill: float = 0.0):
        """``x`` (N, C, H, W) padded with ``fill`` and laid out as (C, H + 2ph, W + 2pw, N).

        With the batch innermost, every copy, product and reduction over windows runs
        along N contiguous elements; in NCHW the innermost run is one image row or one
        window row, a handful of elements for the small images this library trains on
        (pooling in NCHW took 4-8 times longer)."""
        n, c, h, w = x.shape
        ph, pw = self.padding
        if ph == pw == 0:
            return xp.ascontiguousarray(x.transpose(1, 2, 3, 0))  # no copy when batch-last
        if fill == 0.0:
            out = xp.zeros((c, h + 2 * ph, w + 2 * pw, n), dtype=x.dtype)
        else:
            out = xp.full((c, h + 2 * ph, w + 2 * pw, n), fill, dtype=x.dtype)
        out[:, ph : ph + h, pw : pw + w] = x.transpose(1, 2, 3, 0)
        return out


# Caches of window geometry, so that an op's Python work per call does not grow with the
# arithmetic of its window: a network reuses a few windows on a few shapes. Bounded (LRU);
# what they hold is a few small tuples each (and Window objects, immutable by convention).


@functools.lru_cache(maxsize=256)
def window_of(op_name: str, kernel: Pair, stride: Pair, padding: Pair) -> Window:
    """The ``Window`` of these pairs, shared (validated once)."""
    return Window(op_name, kernel, stride, padding)


@functools.lru_cache(maxsize=512)
def phase_rows(kernel: Pair, stride: Pair, padding: Pair, in_hw: Pair):
    """``Window.phase_rows``, cached per window and input size."""
    reach = tuple(-(-k // s) for k, s in zip(kernel, stride, strict=True))
    first = tuple(p // s for p, s in zip(padding, stride, strict=True))
    last = tuple(-(-(p + n) // s) for p, n, s in zip(padding, in_hw, stride, strict=True))
    return reach, first, last


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
        return window_of(self.name, w_shape[2:], self.stride, self.padding)

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
        out = batch_first(xp, (w.reshape(o, -1) @ cols).reshape(o, oh, ow, n))
        if bias:
            out += bias[0].reshape(1, o, 1, 1)
        return out

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        (_, c, _, _), (_, _, kh, kw) = in_metas[0][0], in_metas[1][0]
        return 2.0 * math.prod(out_metas[0][0]) * c * kh * kw, nbytes

    def backward(self, ctx, g):
        x, w = ctx.inputs[:2]
        needs_grad, shapes = ctx.needs_grad, ctx.in_shapes
        gx = gw = gb = None
        if needs_grad[0]:
            gx = apply(Conv2dGradInput(self.stride, self.padding, shapes[0]), g, w)
        if needs_grad[1]:
            gw = apply(Conv2dGradWeight(self.stride, self.padding, shapes[1]), x, g)
        if len(needs_grad) > 2 and needs_grad[2]:
            gb = reduce_sum(g, axis=(0, 2, 3))
        return (gx, gw, gb)[: len(shapes)]


class Conv2dGradInput(Op):
    """dL/dx of conv2d from g (N, O, OH, OW) and w: a transposed convolution, computed by
    phase (``Window.transposed_columns``) in one matrix product for the whole batch."""

    name = "conv2d_grad_input"
    differentiable = False

    def __init__(self, stride: Pair, padding: Pair, x_shape: tuple[int, ...]):
        self.stride = stride
        self.padding = padding
        self.x_shape = x_shape

    def infer(self, g: Cell, w: Cell):
        return [(self.x_shape, g.dtype)]

    def forward(self, xp, g, w):
        n, c, h, wd = self.x_shape
        window = window_of(self.name, w.shape[2:], self.stride, self.padding)
        if window.phase_rows((h, wd))[0] == (1, 1):
            return self.spread(xp, window, g, w)
        window, w = self.aligned(xp, window, w)
        cols = window.transposed_columns(xp, g, (h, wd))
        phases = window.phase_weight(xp, w) @ cols
        (sh, sw), (_, (q0h, q0w), (q1h, q1w)) = self.stride, window.phase_rows((h, wd))
        phases = phases.reshape(c, sh, sw, q1h - q0h, q1w - q0w, n)
        return batch_first(xp, window.unphase(xp, phases, (h, wd)))

    def spread(self, xp, window: Window, g, w):
        """Windows that do not overlap (kernel <= stride, as a 1x1 shortcut with stride 2):
        each window's columns, w.T times g in one product, copied into the image."""
        (n, c, h, wd), (o, _, kh, kw), (_, _, oh, ow) = self.x_shape, w.shape, g.shape
        g = xp.ascontiguousarray(g.transpose(1, 2, 3, 0)).reshape(o, oh * ow * n)
        cols = (w.reshape(o, c * kh * kw).T @ g).reshape(c, kh, kw, oh, ow, n)
        return batch_first(xp, window.fold(xp, cols, (h, wd)))

    def aligned(self, xp, window: Window, w) -> tuple[Window, object]:
        """The window and weight of the same convolution with the padding raised to a
        multiple of the stride by zero kernel rows in front: the image then starts on a
        phase boundary, so no phase row is computed only to be cropped (stride 2, padding 1:
        a quarter of the products and one copy fewer). Unchanged where the extra rows would
        lengthen the phase kernel (``reach``)."""
        kernel, lead = w.shape[2:], [0, 0]
        for axis, (k, s, p) in enumerate(zip(kernel, self.stride, self.padding, strict=True)):
            if -(-(k + (-p % s)) // s) == -(-k // s):
                lead[axis] = -p % s
        if lead == [0, 0]:
            return window, w
        (eh, ew), (o, c, kh, kw) = lead, w.shape
        shifted = xp.zeros((o, c, kh + eh, kw + ew), dtype=w.dtype)
        shifted[:, :, eh:, ew:] = w
        padding = (self.padding[0] + eh, self.padding[1] + ew)
        return window_of(self.name, shifted.shape[2:], self.stride, padding), shifted

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
        window = window_of(self.name, self.w_shape[2:], self.stride, self.padding)
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
        if x.dtype == HALF:  # window sums in float32, as PyTorch's
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
        if g.dtype == HALF:
            return in_float32(self.forward, xp, g)
        window = self.window
        (kh, kw), (n, c, oh, ow) = window.kernel, g.shape
        share = g.transpose(1, 2, 3, 0) * (1.0 / (kh * kw))
        share = share[:, None, None]
        cols = xp.broadcast_to(share, (c, kh, kw, oh, ow, n))
        return batch_first(xp, window.fold(xp, cols, self.x_shape[2:]))


# ---- functional API -----------------------------------------------------------------------------


def conv2d(x: Tensor, w: Tensor, b: Tensor | None = None, stride=1, padding=0) -> Tensor:
    """2-D cross-correlation (PyTorch's conv2d): x (N, C, H, W), w (O, C, KH, KW), b (O,)."""
    if type(stride) is int and type(padding) is int:
        op = shared_op(Conv2d, stride, padding)
    else:
        op = Conv2d(stride, padding)
    return apply(op, x, w, *(() if b is None else (b,)))


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
