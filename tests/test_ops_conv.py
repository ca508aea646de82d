"""conv2d, pooling and upsampling through the generic harness, against naive loop references."""

import numpy as np
import pytest

import minidtr as md
from minidtr.ops.activation import zero_where
from minidtr.ops.conv import Conv2d, Conv2dGradInput
from minidtr.ops.pool import MaxPool2d, MaxPool2dGrad
from minidtr.ops.window import Window
from minidtr.testing import assert_remat_equivalent
from op_harness import HAS_TORCH, OpCase, define_tests


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def pad_image(x, padding, value=0.0):
    ph, pw = pair(padding)
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def conv_reference(x, w, b=None, stride=1, padding=0):
    """One output pixel at a time, accumulated in float64."""
    sh, sw = pair(stride)
    xp = pad_image(x.astype(np.float64), padding)
    n, _, h, wd = xp.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w.astype(np.float64))
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return out.astype(x.dtype)


def pool_reference(reduce, pad_value, x, kernel, stride=None, padding=0):
    kh, kw = pair(kernel)
    sh, sw = pair(kernel if stride is None else stride)
    xp = pad_image(x, padding, pad_value)
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    out = np.zeros((*x.shape[:2], oh, ow), dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw])
    return out


def max_pool_reference(x, kernel, stride=None, padding=0):
    return pool_reference(lambda p: p.max(axis=(2, 3)), -np.inf, x, kernel, stride, padding)


def avg_pool_reference(x, kernel, stride=None, padding=0):
    kh, kw = pair(kernel)
    return pool_reference(lambda p: p.sum(axis=(2, 3)) / (kh * kw), 0.0, x, kernel, stride, padding)


def distinct(rng, shapes, dtype):
    """No ties anywhere (max pooling has kinks at ties), values 1/n apart."""
    out = []
    for s in shapes:
        n = int(np.prod(s))
        out.append((rng.permutation(n).reshape(s) / n - 0.5).astype(dtype))
    return out


CONV_TOL = {np.dtype(np.float32): (1e-4, 1e-5), np.dtype(np.float64): (1e-10, 1e-12)}


def torch_f(t):
    return t.nn.functional


CASES = [
    OpCase(
        "conv2d",
        md.conv2d,
        conv_reference,
        [((2, 3, 5, 5), (4, 3, 3, 3), (4,)), ((1, 2, 4, 6), (3, 2, 1, 2), (3,))],
        forward_tol=CONV_TOL,
        torch_fn=lambda t, x, w, b: torch_f(t).conv2d(x, w, b),
        bad=[
            ((2, 3, 5, 5), (4, 2, 3, 3)),
            ((1, 1, 2, 2), (1, 1, 3, 3)),
            ((3, 5, 5), (4, 3, 3, 3)),
            ((1, 2, 5, 5), (3, 2, 3, 3), (4,)),
            [np.ones((1, 2, 4, 4), np.float32), np.ones((3, 2, 3, 3), np.float64)],
            [np.ones((1, 2, 4, 4), np.int64), np.ones((3, 2, 3, 3), np.int64)],
        ],
    ),
    OpCase(
        "conv2d[stride2,pad1]",
        lambda x, w, b: md.conv2d(x, w, b, stride=2, padding=1),
        lambda x, w, b: conv_reference(x, w, b, 2, 1),
        [((2, 3, 7, 6), (4, 3, 3, 3), (4,)), ((1, 1, 4, 4), (2, 1, 2, 2), (2,))],
        forward_tol=CONV_TOL,
        torch_fn=lambda t, x, w, b: torch_f(t).conv2d(x, w, b, stride=2, padding=1),
    ),
    OpCase(
        "conv2d[asymmetric,nobias]",
        lambda x, w: md.conv2d(x, w, stride=(2, 1), padding=(0, 2)),
        lambda x, w: conv_reference(x, w, None, (2, 1), (0, 2)),
        [((2, 2, 7, 5), (3, 2, 3, 2))],
        forward_tol=CONV_TOL,
        torch_fn=lambda t, x, w: torch_f(t).conv2d(x, w, stride=(2, 1), padding=(0, 2)),
    ),
    OpCase(
        "conv2d[1x1,stride3]",
        lambda x, w: md.conv2d(x, w, stride=3),
        lambda x, w: conv_reference(x, w, None, 3),
        [((2, 4, 8, 7), (5, 4, 1, 1))],
        forward_tol=CONV_TOL,
        torch_fn=lambda t, x, w: torch_f(t).conv2d(x, w, stride=3),
    ),
    OpCase(
        "max_pool2d",
        lambda x: md.max_pool2d(x, 2),
        lambda x: max_pool_reference(x, 2),
        [((2, 3, 4, 6),), ((1, 2, 5, 5),)],
        make=distinct,
        torch_fn=lambda t, x: torch_f(t).max_pool2d(x, 2),
        bad=[((3, 4, 4),), ((1, 1, 1, 4),)],
    ),
    OpCase(
        "max_pool2d[overlap,pad]",
        lambda x: md.max_pool2d(x, 3, stride=2, padding=1),
        lambda x: max_pool_reference(x, 3, 2, 1),
        [((2, 2, 7, 6),)],
        make=distinct,
        torch_fn=lambda t, x: torch_f(t).max_pool2d(x, 3, stride=2, padding=1),
    ),
    OpCase(
        "max_pool2d[rect]",
        lambda x: md.max_pool2d(x, (3, 2), stride=(1, 2), padding=(1, 0)),
        lambda x: max_pool_reference(x, (3, 2), (1, 2), (1, 0)),
        [((1, 2, 5, 6),)],
        make=distinct,
        torch_fn=lambda t, x: torch_f(t).max_pool2d(x, (3, 2), stride=(1, 2), padding=(1, 0)),
    ),
    OpCase(
        "avg_pool2d",
        lambda x: md.avg_pool2d(x, 2),
        lambda x: avg_pool_reference(x, 2),
        [((2, 3, 4, 6),), ((1, 2, 5, 5),)],
        torch_fn=lambda t, x: torch_f(t).avg_pool2d(x, 2),
        bad=[((3, 4, 4),)],
    ),
    OpCase(
        "avg_pool2d[overlap,pad]",
        lambda x: md.avg_pool2d(x, 3, stride=2, padding=1),
        lambda x: avg_pool_reference(x, 3, 2, 1),
        [((2, 2, 7, 6),)],
        torch_fn=lambda t, x: torch_f(t).avg_pool2d(x, 3, stride=2, padding=1),
    ),
    OpCase(
        "avg_pool2d[rect]",
        lambda x: md.avg_pool2d(x, (2, 3), stride=(2, 1), padding=(1, 1)),
        lambda x: avg_pool_reference(x, (2, 3), (2, 1), (1, 1)),
        [((1, 2, 5, 6),)],
        torch_fn=lambda t, x: torch_f(t).avg_pool2d(x, (2, 3), stride=(2, 1), padding=(1, 1)),
    ),
    OpCase(
        "global_avg_pool2d",
        md.global_avg_pool2d,
        lambda x: x.mean(axis=(2, 3)),
        [((2, 3, 4, 5),), ((1, 1, 1, 1),)],
        torch_fn=lambda t, x: x.mean(dim=(2, 3)),
        bad=[((2, 3, 4),)],
    ),
    OpCase(
        "upsample_nearest2d",
        lambda x: md.upsample_nearest2d(x, 2),
        lambda x: x.repeat(2, axis=2).repeat(2, axis=3),
        [((2, 3, 2, 3),)],
        torch_fn=lambda t, x: torch_f(t).interpolate(x, scale_factor=2, mode="nearest"),
        bad=[((2, 3, 4),)],
    ),
    OpCase(
        "upsample_nearest2d[2x3]",
        lambda x: md.upsample_nearest2d(x, (2, 3)),
        lambda x: x.repeat(2, axis=2).repeat(3, axis=3),
        [((1, 2, 3, 2),)],
        torch_fn=lambda t, x: torch_f(t).interpolate(x, scale_factor=(2, 3), mode="nearest"),
    ),
]

globals().update(define_tests(CASES))


@pytest.mark.parametrize("fn", [md.max_pool2d, md.avg_pool2d])
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=2, padding=2),
        dict(kernel_size=0),
        dict(kernel_size=2, stride=0),
        dict(kernel_size=(2, 2, 2)),
        dict(kernel_size=2.0),
    ],
)
def test_pool_arguments_are_checked(fn, kwargs):
    with pytest.raises(ValueError, match=fn.__name__):
        fn(md.zeros((1, 1, 6, 6)), **kwargs)


@pytest.mark.parametrize("kwargs", [dict(stride=0), dict(padding=-1), dict(stride=(1, 2, 3))])
def test_conv_arguments_are_checked(kwargs):
    with pytest.raises(ValueError, match="conv2d"):
        md.conv2d(md.zeros((1, 1, 5, 5)), md.zeros((1, 1, 3, 3)), **kwargs)


def test_upsample_scale_is_checked():
    with pytest.raises(ValueError, match="upsample_nearest2d"):
        md.upsample_nearest2d(md.zeros((1, 1, 2, 2)), 1.5)
    with pytest.raises(ValueError, match="upsample_nearest2d"):
        md.upsample_nearest2d(md.zeros((1, 1, 2, 2)), 0)


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_max_pool_ties_send_the_gradient_to_the_first_max_like_torch():
    import torch

    x = np.zeros((1, 1, 4, 5))
    x[0, 0, 1:3, 1:4] = 1.0  # plateaus: several equal maxima in most windows
    g = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    xt = md.tensor(x, requires_grad=True)
    md.max_pool2d(xt, 2, stride=2, padding=1).backward(md.tensor(g))
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_pool2d(tx, 2, stride=2, padding=1).backward(torch.tensor(g))
    np.testing.assert_array_equal(xt.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("kernel", [2, (2, 3), 3])
@pytest.mark.parametrize("batch_last", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_max_pool_gradient_of_tiling_windows_matches_the_general_path(kernel, batch_last, dtype):
    """Windows that tile the image (kernel = stride, no padding) take a shortcut in the
    image's layout; it gives the general path's bits, with sizes that leave rows and
    columns out, infinite gradients (dropped as +0.0, not NaN), signed zeros, ties (ReLU's
    zeros, plateaus, windows of -inf: the first maximum gets the gradient), in blocks of
    channels as small as one, and it hands windows with a NaN to the general path."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 7, 8)).astype(dtype)
    if batch_last:
        x = np.ascontiguousarray(x.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)
    op = MaxPool2dGrad(MaxPool2d(kernel, None, 0).window)
    oh, ow = op.window.out_hw(x.shape[2:])
    g = rng.standard_normal((3, 4, oh, ow)).astype(dtype)
    g[0, 0, 0, 0], g[1, 1, 1, 1], g[2, 3, 0, 1] = np.inf, -np.inf, -0.0

    class GeneralPath(MaxPool2dGrad):
        def tiled(self, xp, x, g, workspace):
            return None

    general = GeneralPath(op.window)
    relu, plateaus, with_nan = np.maximum(x, 0), x.copy(), x.copy()
    plateaus[0, 0, :3, :4] = 1.0
    plateaus[1, 2, :, :] = -np.inf
    plateaus[2, 1, 1:5, 2:6] = -0.0
    with_nan[1, 0, 2, 2] = np.nan
    workspace = 1 << 20
    per_channel = oh * ow * 3 * (x.itemsize + 2)
    assert op.tiled(np, x, g, workspace) is not None
    assert op.tiled(np, with_nan, g, workspace) is None
    assert op.tiled(np, x, g, per_channel - 1) is None  # not one channel's scratch
    for values in (x, relu, plateaus, with_nan):
        theirs = np.ascontiguousarray(general.forward(np, values, g)).tobytes()
        ours = op.forward(np, values, g)
        assert ours.shape == x.shape
        assert np.ascontiguousarray(ours).tobytes() == theirs
        for room in (per_channel, 3 * per_channel):  # blocks of one and of three channels
            ours = op.tiled(np, values, g, room)
            if values is not with_nan:
                assert np.ascontiguousarray(ours).tobytes() == theirs
    assert not np.isnan(op.forward(np, x, g)).any()


def test_conv_cost_counts_multiply_adds():
    op = Conv2d(stride=1, padding=1)
    x, w = ((2, 3, 8, 8), np.dtype(np.float32)), ((4, 3, 3, 3), np.dtype(np.float32))
    out = ((2, 4, 8, 8), np.dtype(np.float32))
    flops, nbytes = op.cost([x, w], [out])
    assert flops == 2 * (2 * 4 * 8 * 8) * (3 * 3 * 3)
    assert nbytes == 4 * (2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 2 * 4 * 8 * 8)


def test_window_kernels_keep_the_batch_last_layout_and_their_bits():
    """conv2d, pooling and upsampling return NCHW views of batch-last memory, which relu
    keeps, so the next conv reads its input without a transpose; the layout changes no
    bit, forward or backward, and upsampling is one op whose result stays batch-last."""
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((3, 2, 6, 6)).astype(np.float32))
    w1, w2 = (
        md.tensor(rng.standard_normal((4, c, 3, 3)).astype(np.float32), requires_grad=True)
        for c in (2, 4)
    )

    def run(layout):
        h = layout(md.relu(md.conv2d(x, w1, padding=1)))
        y = md.avg_pool2d(md.conv2d(h, w2, stride=2, padding=1), 2)
        up = md.upsample_nearest2d(md.max_pool2d(h, 2), 2)
        (y.sum() + (up * up).sum()).backward()
        grads = [w1.grad.numpy(), w2.grad.numpy()]
        w1.grad = w2.grad = None
        return h, [y.numpy(), up.numpy(), *grads]

    h, batch_last = run(lambda t: t)
    assert not h.cell.contiguous and h.numpy().transpose(1, 2, 3, 0).flags.c_contiguous
    _, batch_first = run(md.copy)
    for a, b in zip(batch_last, batch_first, strict=True):
        assert a.shape == b.shape and np.ascontiguousarray(a).tobytes() == b.tobytes()
    with md.Runtime() as runtime:
        t = md.relu(md.conv2d(x, w1, padding=1))
        before = runtime.stats()["ops"]
        up = md.upsample_nearest2d(t, 2)
        assert runtime.stats()["ops"] - before == 1
        assert up.numpy().transpose(1, 2, 3, 0).flags.c_contiguous


def test_conv_net_is_bit_identical_under_a_tight_budget():
    """Six same-sized conv layers, so the peak (every activation kept for backward) is far
    above what one op needs and the budgets below force evictions and recomputation."""
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((2, 4, 8, 8)).astype(np.float32))
    weights = [
        md.tensor(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, requires_grad=True)
        for _ in range(6)
    ]
    bias = md.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)

    def step():
        h = x
        for i, w in enumerate(weights):
            h = md.relu(md.conv2d(h, w, bias if i == 0 else None, padding=1))
        h = md.max_pool2d(h, 3, stride=1, padding=1)
        h = md.avg_pool2d(md.upsample_nearest2d(md.avg_pool2d(h, 2), 2), 3, stride=1, padding=1)
        loss = md.global_avg_pool2d(h * h).sum()
        loss.backward()
        return loss

    reports = assert_remat_equivalent(
        step, budgets=[0.65, 0.8], heuristics=["dtr", "lru"], grads_of=[bias, *weights]
    )
    assert all(r["remats"] > 0 for r in reports), reports


# ---- the window kernels against loops over kernel positions -----------------------------------

GEOMETRIES = [
    (k, s, p, hw)
    for k in (1, 2, 3, 4)
    for s in (1, 2, 3)
    for p in (0, 1, 2, 4)
    for hw in ((5, 7), (4, 4), (1, 3))
    if (hw[0] + 2 * p - k) // s + 1 >= 1 and (hw[1] + 2 * p - k) // s + 1 >= 1
]


def fold_by_kernel_position(window, cols, in_hw):
    """The adjoint of the window view, one add per kernel position (the old kernel)."""
    c, kh, kw, oh, ow, n = cols.shape
    (sh, sw), (ph, pw) = window.stride, window.padding
    padded = np.zeros((c, in_hw[0] + 2 * ph, in_hw[1] + 2 * pw, n), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            padded[:, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += cols[
                :, i, j
            ]
    return padded[:, ph : ph + in_hw[0], pw : pw + in_hw[1]]


@pytest.mark.parametrize("k,s,p,hw", GEOMETRIES)
def test_fold_adds_in_kernel_order_bit_for_bit(k, s, p, hw):
    """Window.fold (a strided gather by phase) gives what adding each kernel position in
    row-major order gives, bit for bit, for overlapping, disjoint and gapped windows."""
    window = Window("fold", k, s, p)
    oh, ow = window.out_hw(hw)
    cols = np.random.default_rng(k * 100 + s * 10 + p).standard_normal((2, k, k, oh, ow, 3))
    cols = cols.astype(np.float32)
    got = window.fold(np, cols, hw)
    assert (
        got.tobytes() == np.ascontiguousarray(fold_by_kernel_position(window, cols, hw)).tobytes()
    )


@pytest.mark.parametrize("k,s,p,hw", GEOMETRIES)
def test_conv_input_gradient_by_phase_is_the_adjoint(k, s, p, hw):
    """<conv(x), g> == <x, conv2d_grad_input(g)> in float64, for every geometry: kernels
    smaller than the stride (gaps), padding beyond the kernel, rows no window reaches."""
    rng = np.random.default_rng(k * 100 + s * 10 + p)
    x = rng.standard_normal((2, 3, *hw))
    w = rng.standard_normal((4, 3, k, k))
    oh, ow = Window("conv", k, s, p).out_hw(hw)
    g = rng.standard_normal((2, 4, oh, ow))
    y = conv_reference(x, w, stride=s, padding=p)
    gx = Conv2dGradInput((s, s), (p, p), x.shape).forward(np, g, w)
    assert gx.shape == x.shape
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(x, gx), rtol=1e-10)
    # and pixel by pixel: the gradient of one output pixel is its window of weights
    one = np.zeros_like(g)
    one[1, 2, oh - 1, 0] = 1.0
    expected = np.zeros((2, 3, hw[0] + 2 * p, hw[1] + 2 * p))
    top, left = (oh - 1) * s, 0
    expected[1, :, top : top + k, left : left + k] = w[2]
    expected = expected[:, :, p : p + hw[0], p : p + hw[1]]
    np.testing.assert_allclose(
        Conv2dGradInput((s, s), (p, p), x.shape).forward(np, one, w), expected, atol=1e-12
    )


def test_zero_where_keeps_values_bit_for_bit_and_drops_to_plus_zero():
    values = np.array([1.5, -0.0, np.inf, -np.inf, np.nan, -2.0, 3.0], dtype=np.float32)
    drop = np.array([False, False, False, True, True, True, False])
    got = zero_where(np, drop, values)
    expected = np.where(drop, np.float32(0.0), values)
    assert got.dtype == values.dtype and got.tobytes() == expected.tobytes()
    wide = zero_where(np, np.array([[True], [False]]), np.arange(3.0))  # broadcasts
    assert wide.tobytes() == np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 2.0]]).tobytes()


def conv_grad_references(x, w, g, stride, padding):
    """dL/dx and dL/dw of conv_reference for the output gradient g, in float64."""
    sh, sw = pair(stride)
    ph, pw = pair(padding)
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
    xpad = pad_image(x64, padding)
    gx = np.zeros_like(xpad)
    gw = np.zeros_like(w64)
    _, _, oh, ow = g.shape
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            rows, cols = slice(i, i + sh * (oh - 1) + 1, sh), slice(j, j + sw * (ow - 1) + 1, sw)
            gw[:, :, i, j] = np.einsum("nohw,nchw->oc", g64, xpad[:, :, rows, cols])
            gx[:, :, rows, cols] += np.einsum("nohw,oc->nchw", g64, w64[:, :, i, j])
    return gx[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]], gw


@pytest.mark.parametrize("fraction", [1, 4, 40, 10**6])  # from one run per shift to many
@pytest.mark.parametrize(
    "geometry",
    [  # (n, c, hw, o, kernel, stride, padding)
        (6, 3, (7, 7), 4, (3, 3), 1, 1),
        (5, 2, (8, 6), 3, (3, 2), (2, 1), (1, 0)),
        (4, 4, (9, 9), 6, (3, 3), 2, 1),
        (3, 5, (6, 7), 2, (1, 1), 2, 0),
        (4, 1, (6, 6), 3, (5, 5), 1, 3),
        (3, 3, (7, 5), 2, (2, 2), 1, 0),
    ],
)
def test_shifted_products_at_every_chunk_size(monkeypatch, fraction, geometry):
    """The kernels sum shifted products in runs of at most a 1/CHUNK_FRACTION share of
    their largest operand: whole-output products, runs of several rows (wrapped columns
    skipped or zeroed), single rows and pieces of rows, with strides (phases) and
    padding, give the same convolution and gradients."""
    from minidtr.ops import shift
    from minidtr.ops.conv import Conv2dGradWeight

    monkeypatch.setattr(shift, "CHUNK_FRACTION", fraction)
    n, c, hw, o, kernel, stride, padding = geometry
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, *hw)).astype(np.float32)
    w = rng.standard_normal((o, c, *kernel)).astype(np.float32)
    op = Conv2d(stride, padding)
    out = op.forward(np, x, w)
    np.testing.assert_allclose(
        out, conv_reference(x, w, None, stride, padding), rtol=1e-4, atol=1e-4
    )
    g = rng.standard_normal(out.shape).astype(np.float32)
    gx, gw = conv_grad_references(x, w, g, stride, padding)
    got_gx = Conv2dGradInput(pair(stride), pair(padding), x.shape).forward(np, g, w)
    got_gw = Conv2dGradWeight(pair(stride), pair(padding), w.shape).forward(np, x, g)
    np.testing.assert_allclose(got_gx, gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_gw, gw, rtol=1e-4, atol=1e-4)
    assert got_gx.shape == x.shape and got_gw.shape == w.shape
