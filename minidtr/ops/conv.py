"""conv2d and its two gradient ops (the window geometry is in ``window.py``).

conv2d copies the windows into columns (im2col) and multiplies them by the
flattened weight, one matrix product for the whole batch whose result is already
the output; its input gradient is a transposed convolution computed by phase (also
one product, ``Window.transposed_columns``). The gradient kernels are ops of their
own (not differentiable), so backward allocates only the gradients themselves.
"""

from __future__ import annotations

import math

from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import Op, apply, float_dtype, numel, shared_op
from .reduce import sum as reduce_sum
from .window import Pair, Window, as_pair, batch_first, check_image, window_of


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
        out = batch_first(xp, (w.reshape(o, cols.shape[0]) @ cols).reshape(o, oh, ow, n))
        if bias:
            out += bias[0].reshape(1, o, 1, 1)
        return out

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        ((_, c, _, _), _), ((_, _, kh, kw), _) = in_metas[:2]
        return 2.0 * numel(out_metas[0]) * c * kh * kw, nbytes

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
        reach, _, _ = window.phase_rows((h, wd))
        if reach == (1, 1):
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


# ---- functional API -----------------------------------------------------------------------------


def conv2d(x: Tensor, w: Tensor, b: Tensor | None = None, stride=1, padding=0) -> Tensor:
    """2-D cross-correlation (PyTorch's conv2d): x (N, C, H, W), w (O, C, KH, KW), b (O,)."""
    if type(stride) is int and type(padding) is int:
        op = shared_op(Conv2d, stride, padding)
    else:
        op = Conv2d(stride, padding)
    return apply(op, x, w, *(() if b is None else (b,)))


# pooling and the window geometry were defined here once: their names still import from here
from .pool import (  # noqa: E402, F401
    AvgPool2d,
    AvgPool2dGrad,
    MaxPool2d,
    MaxPool2dGrad,
    avg_pool2d,
    global_avg_pool2d,
    max_pool2d,
    upsample_nearest2d,
)
