"""The window geometry shared by convolution (``conv.py``) and pooling (``pool.py``)
over NCHW images: kernel, stride, padding, output size, and the strided views.

The kernels work in a batch-last layout (C, H, W, N): windows are a strided view
(C, KH, KW, OH, OW, N) of the padded image, so every copy, product and reduction
runs along N contiguous elements. Their results keep that layout in memory (an
NCHW view of a (C, H, W, N) array, ``batch_first``), and so do the elementwise ops
and batch norm after them, so in a network only the data is ever transposed.
Pooling's gradients add windows back into an image by a strided gather
(``Window.fold``): no kernel loops over pixels or kernel positions in Python. The
convolutions need no window views: they multiply shifted runs of the image
(``ops/shift.py``).
"""

from __future__ import annotations

import functools
import math
import numbers

from .. import backend
from ..runtime.storage import Cell
from ..runtime.views import array_of
from .op import Op

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


def batch_last_copy(xp, x):
    """x (N, C, H, W) as a contiguous (C, H, W, N) array: itself when it lies so already (as
    the window kernels, and the ops after them, leave it), else a copy."""
    return xp.ascontiguousarray(x.transpose(1, 2, 3, 0))


def copy_bytes(cell: Cell) -> int:
    """What ``batch_last_copy`` of ``cell``'s value allocates: nothing when its array lies
    batch-last (read from the array's layout: the allocator asks for a workspace with the
    inputs locked, so resident), else its size (an evicted value: the copy is assumed)."""
    storage = cell.storage
    if storage.buffer is not None and storage.device is not None:
        array = array_of(cell)
        if array.transpose(1, 2, 3, 0).flags.c_contiguous:
            return 0
    return math.prod(cell.shape) * cell.dtype.itemsize


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
