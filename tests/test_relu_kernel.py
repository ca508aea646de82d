"""``backend.relu``: NumPy's maximum against a row of zeros where a 0-d zero is slow, with
the bits of ``maximum(x, 0)`` whatever the path (blocks, tail, small, strided, in place)."""

from __future__ import annotations

import numpy as np
import pytest

from minidtr import backend

SPECIALS = [np.nan, -np.nan, -0.0, 0.0, -np.inf, np.inf, 1e-45, -1e-45, 5e-324, 1.0, -1.0]
SIZES = [0, 1, 5, 4 * backend.RELU_BLOCK - 1, 4 * backend.RELU_BLOCK, 4 * backend.RELU_BLOCK + 1]


def reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int8])
@pytest.mark.parametrize("size", [*SIZES, 1438 * 48])
def test_relu_gives_maximums_bits(dtype, size):
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 3).astype(dtype)
    if np.dtype(dtype).kind == "f" and size:
        where = rng.integers(0, size, size // 8 + 1)
        x[where] = np.array(rng.choice(SPECIALS, where.size)).astype(dtype)
    want = reference(x)
    assert same_bits(backend.relu(np, x), want)
    inplace = x.copy()
    assert backend.relu(np, inplace, out=inplace) is inplace
    assert same_bits(inplace, want)
    if size % 2 == 0 and size:
        grid = x.reshape(2, -1)
        assert same_bits(backend.relu(np, grid), reference(grid))
        assert same_bits(backend.relu(np, grid.T), reference(grid.T))  # not C-contiguous
    assert same_bits(backend.relu(np, x[::3]), reference(x[::3]))


def test_relu_into_a_strided_output_takes_the_plain_path():
    x = np.arange(-8192, 8192, dtype=np.float32)
    out = np.empty((2, x.size), np.float32)[0, ::1]
    strided = np.empty(2 * x.size, np.float32)[::2]
    assert same_bits(backend.relu(np, x, out=out), reference(x))
    backend.relu(np, x, out=strided)
    assert same_bits(strided.copy(), reference(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_of_batch_last_images_takes_the_blocks_in_memory_order(dtype):
    """The window kernels' results are NCHW views of (C, H, W, N) memory: one dense block
    with its axes permuted. relu takes them by blocks too, keeps their layout, and gives
    maximum's bits; out of place, in place, and into an output laid out alike."""
    rng = np.random.default_rng(7)
    images = (rng.standard_normal((30, 8, 8, 128)) * 3).astype(dtype)
    images.reshape(-1)[rng.integers(0, images.size, 500)] = rng.choice(SPECIALS, 500)
    x = images.transpose(3, 0, 1, 2)  # (N, C, H, W), not C-contiguous
    assert backend.memory_order(x) == (1, 2, 3, 0)
    want = reference(x)
    got = backend.relu(np, x)
    assert same_bits(got, want) and got.strides == want.strides == x.strides
    out = np.empty_like(x)
    assert backend.relu(np, x, out=out) is out and same_bits(out, want)
    inplace = x.copy(order="K")
    assert backend.relu(np, inplace, out=inplace) is inplace and same_bits(inplace, want)
    for not_dense in (x[:, ::2], x[::-1], x[..., :5]):  # gaps or a reversed axis
        assert backend.memory_order(not_dense) is None
        assert same_bits(backend.relu(np, not_dense), reference(not_dense))


def test_a_relu_gradient_is_laid_out_as_its_value():
    """``keep_mask`` (ReLU's backward, and batch norm's fused ReLU's) gives g where y > 0,
    +0.0 elsewhere, laid out as y even when g comes in another layout (a global pooling's
    NCHW gradient into batch-last images), so the kernels after it read both alike."""
    from minidtr.ops.activation import keep_mask, zero_where

    rng = np.random.default_rng(9)
    y = np.ascontiguousarray(rng.standard_normal((16, 8, 8, 32)).astype(np.float32))
    y = y.transpose(3, 0, 1, 2)  # (N, C, H, W) over (C, H, W, N) memory
    g = rng.standard_normal(y.shape).astype(np.float32)  # C order
    g[0, 0, 0, 0], g[1, 1, 1, 1] = np.nan, -np.inf
    got = keep_mask(np, y, g)
    assert got.strides == y.strides and got.dtype == g.dtype
    assert same_bits(got, zero_where(np, y <= 0, g))
    broadcast = np.broadcast_to(g[:, :, :1, :1], y.shape)  # strides of 0, as a pooling's
    assert keep_mask(np, y, broadcast).strides == y.strides
    assert same_bits(keep_mask(np, y, broadcast), zero_where(np, y <= 0, broadcast))
