"""conv2d and its two gradient ops (the window geometry is in ``window.py``).

Each kernel is a sum of matrix products, one per kernel position, over shifted runs of
its batch-last operands (``ops/shift.py``): no im2col columns and no padded copy, so its
workspace, declared to the allocator (``workspace``), is a product buffer and, for a
stride, one phase of the image: at most a fraction of its largest operand, whatever
the batch. The gradient kernels are ops of their own (not differentiable), so backward
allocates only the gradients themselves.
"""

from __future__ import annotations

import math

from ..runtime.storage import Cell
from ..tensor import Tensor
from .op import Op, apply, float_dtype, numel, shared_op
from .reduce import sum as reduce_sum
from .shift import accumulate, chunk_columns, correlate, phase_count
from .window import Pair, Window, as_pair, batch_last_copy, check_image, copy_bytes, window_of


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
        (n, _, h, wd), o = x.shape, w.shape[0]
        oh, ow = self.window(w.shape).out_hw((h, wd))
        src = batch_last_copy(xp, x)
        out = xp.empty((o, oh, ow, n), dtype=x.dtype)
        mats = xp.ascontiguousarray(w.transpose(2, 3, 0, 1))  # (KH, KW, O, C)
        cap = chunk_columns(max(x.nbytes, out.nbytes), o, x.itemsize)
        buffer = xp.empty((o, min(cap, oh * ow * n)), dtype=x.dtype)
        fresh = True
        for phase, positions in by_phase(w.shape[2:], self.stride, self.padding):
            source = src if phase is None else phase_of(xp, src, self.stride, phase)
            shifts = [shift for _, shift in positions]
            accumulate(xp, out, source, [mats[k] for k, _ in positions], shifts, buffer, fresh)
            fresh = False
            del source
        if bias:
            out += bias[0].reshape(o, 1, 1, 1)
        return out.transpose(3, 0, 1, 2)

    def workspace(self, x: Cell, w: Cell, *bias: Cell) -> int:
        (n, c, h, wd), o = x.shape, w.shape[0]
        oh, ow = self.window(w.shape).out_hw((h, wd))
        item = x.dtype.itemsize
        largest = max(n * c * h * wd, n * o * oh * ow) * item
        cap = min(chunk_columns(largest, o, item), oh * ow * n)
        phase = phase_bytes((c, h, wd, n), self.stride, item)
        return copy_bytes(x) + o * cap * item + phase + math.prod(w.shape) * item

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
    """dL/dx of conv2d from g (N, O, OH, OW) and w: the products of ``ops/shift.py`` with
    the weight transposed and the shifts reversed, one phase of the image at a time."""

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
        grad = batch_last_copy(xp, g)
        image = xp.empty((c, h, wd, n), dtype=g.dtype)
        mats = xp.ascontiguousarray(w.transpose(2, 3, 1, 0))  # (KH, KW, C, O)
        cap = chunk_columns(max(g.nbytes, image.nbytes), c, g.itemsize)
        buffer = xp.empty((c, min(cap, h * wd * n)), dtype=g.dtype)
        (sh, sw), (ph, pw) = self.stride, self.padding
        kernel = w.shape[2:]
        for vh, vw in phases(self.stride):
            positions = [
                ((kh, kw), ((vh - kh + ph) // sh, (vw - kw + pw) // sw))
                for kh in range(kernel[0])
                for kw in range(kernel[1])
                if (kh - ph - vh) % sh == 0 and (kw - pw - vw) % sw == 0
            ]
            if (sh, sw) == (1, 1):
                target = image
            else:
                rows, cols = phase_count(h, vh, sh), phase_count(wd, vw, sw)
                target = xp.empty((c, rows, cols, n), dtype=g.dtype)
            mats_k = [mats[k] for k, _ in positions]
            accumulate(xp, target, grad, mats_k, [s for _, s in positions], buffer, True)
            if target is not image:
                image[:, vh::sh, vw::sw] = target
            del target
        return image.transpose(3, 0, 1, 2)

    def workspace(self, g: Cell, w: Cell) -> int:
        (n, c, h, wd), item = self.x_shape, g.dtype.itemsize
        largest = max(math.prod(g.shape), n * c * h * wd) * item
        cap = min(chunk_columns(largest, c, item), h * wd * n)
        phase = phase_bytes((c, h, wd, n), self.stride, item)
        return copy_bytes(g) + c * cap * item + phase + math.prod(w.shape) * item

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        (g_shape, _), (w_shape, _) = in_metas
        return 2.0 * math.prod(g_shape) * math.prod(w_shape[1:]), nbytes


class Conv2dGradWeight(Op):
    """dL/dw of conv2d from x and g: for each kernel position, g times the shifted run of x
    it multiplied (``ops/shift.py``), summed over the batch and the image."""

    name = "conv2d_grad_weight"
    differentiable = False

    def __init__(self, stride: Pair, padding: Pair, w_shape: tuple[int, ...]):
        self.stride = stride
        self.padding = padding
        self.w_shape = w_shape

    def infer(self, x: Cell, g: Cell):
        return [(self.w_shape, g.dtype)]

    def forward(self, xp, x, g):
        o = self.w_shape[0]
        src, grad = batch_last_copy(xp, x), batch_last_copy(xp, g)
        gw = xp.empty(self.w_shape, dtype=g.dtype)
        cap = chunk_columns(max(x.nbytes, g.nbytes), o, g.itemsize)
        buffer = xp.empty((o, min(cap, math.prod(grad.shape[1:]))), dtype=g.dtype)
        for phase, positions in by_phase(self.w_shape[2:], self.stride, self.padding):
            source = src if phase is None else phase_of(xp, src, self.stride, phase)
            terms = correlate(xp, grad, source, [shift for _, shift in positions], buffer)
            for ((kh, kw), _), term in zip(positions, terms, strict=True):
                gw[:, :, kh, kw] = term
            del source, terms
        return gw

    def workspace(self, x: Cell, g: Cell) -> int:
        (n, c, h, wd), (_, o, oh, ow) = x.shape, g.shape
        item = g.dtype.itemsize
        largest = max(n * c * h * wd, n * o * oh * ow) * item
        cap = min(chunk_columns(largest, o, item), oh * ow * n)
        terms = 2 * math.prod(self.w_shape) * item  # the terms, and a sum being made
        phase = phase_bytes((c, h, wd, n), self.stride, item)
        return copy_bytes(x) + copy_bytes(g) + o * cap * item + phase + terms

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        (g_shape, _) = in_metas[1]
        return 2.0 * math.prod(g_shape) * math.prod(self.w_shape[1:]), nbytes


def phases(stride: Pair) -> list[Pair]:
    return [(vh, vw) for vh in range(stride[0]) for vw in range(stride[1])]


def by_phase(kernel: Pair, stride: Pair, padding: Pair):
    """The kernel positions of a convolution grouped by the phase of x they read, with each
    position's shift in that phase: (phase or None for stride 1, [((kh, kw), (ay, ax))])."""
    (sh, sw), (ph, pw) = stride, padding
    if (sh, sw) == (1, 1):
        shifts = [
            ((kh, kw), (kh - ph, kw - pw)) for kh in range(kernel[0]) for kw in range(kernel[1])
        ]
        return [(None, shifts)]
    groups = []
    for vh, vw in phases(stride):
        positions = [
            ((kh, kw), ((kh - ph - vh) // sh, (kw - pw - vw) // sw))
            for kh in range(kernel[0])
            for kw in range(kernel[1])
            if (kh - ph) % sh == vh and (kw - pw) % sw == vw
        ]
        if positions:
            groups.append(((vh, vw), positions))
    return groups


def phase_of(xp, src, stride: Pair, phase: Pair):
    """Phase (vh, vw) of a batch-last image (C, H, W, N): rows vh, vh + sh, ... and the same
    for columns, as a contiguous copy."""
    (sh, sw), (vh, vw) = stride, phase
    return xp.ascontiguousarray(src[:, vh::sh, vw::sw])


def phase_bytes(shape: tuple[int, ...], stride: Pair, itemsize: int) -> int:
    """The bytes of the largest phase of a batch-last image (none for stride 1)."""
    if stride == (1, 1):
        return 0
    c, h, w, n = shape
    return c * phase_count(h, 0, stride[0]) * phase_count(w, 0, stride[1]) * n * itemsize


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
