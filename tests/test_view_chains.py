"""Chains of views: a view of a view of ... is read in a bounded number of steps (not by
walking the whole chain, which made a chain of n views cost n² view ops), and reads the
same bits before and after its storage is evicted and rebuilt."""

import numpy as np
import pytest

import minidtr as md
from minidtr.ops import shape as shape_ops
from minidtr.runtime.views import MAX_VIEW_DEPTH, StridedLayout
from minidtr.testing import recompute


@pytest.fixture(autouse=True)
def own_allocator(fresh_allocator):
    yield


@pytest.fixture
def getitem_calls(monkeypatch):
    """How many times a basic-indexing view op has run its kernel."""
    calls = [0]
    forward = shape_ops.GetItem.forward

    def counted(self, xp, x):
        calls[0] += 1
        return forward(self, xp, x)

    monkeypatch.setattr(shape_ops.GetItem, "forward", counted)
    return calls


def test_a_long_chain_of_slices_reads_in_bounded_steps(getitem_calls):
    n = 600
    x = md.tensor(np.arange(n + 1, dtype=np.float32))
    y = x
    for _ in range(n):
        y = y[1:]
    # building: each slice read its input (at most MAX_VIEW_DEPTH ops) and ran once
    assert getitem_calls[0] <= n * (MAX_VIEW_DEPTH + 1)
    getitem_calls[0] = 0
    assert y.numpy().tolist() == [float(n)]
    assert getitem_calls[0] <= MAX_VIEW_DEPTH  # was n: the whole chain, on every read
    assert y.cell.depth <= MAX_VIEW_DEPTH and y.cell.storage is x.storage


def test_chains_of_mixed_views_read_the_same_bits_after_a_rebuild():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 40, 5)).astype(np.float32)
    base = md.tensor(a) * 3.0  # evictable, so it can be rebuilt
    expected = a * np.float32(3.0)
    y, e = base, expected
    for i in range(2 * MAX_VIEW_DEPTH + 1):  # slices, transposes, reversed strides
        if i % 4 == 0:
            y, e = y.transpose(2, 1, 0), e.transpose(2, 1, 0)
        elif i % 4 == 1:
            y, e = y[:, 1:, :], e[:, 1:, :]
        elif i % 4 == 2:
            y, e = y[::-1], e[::-1]
        else:
            y, e = y.transpose(2, 1, 0), e.transpose(2, 1, 0)
    assert y.cell.layout is not None  # past MAX_VIEW_DEPTH: read from the buffer directly
    parts = md.split(y, [1, y.shape[0] - 1], axis=0)  # a multi-output view op on it
    before = [y.numpy(), parts[1].numpy()]
    np.testing.assert_array_equal(before[0], e)
    recompute(base)  # the buffer is evicted and recomputed, laid out as before
    assert y.cell.layout.view_of(base.storage.buffer) is not None
    after = [y.numpy(), parts[1].numpy()]
    for b, c in zip(before, after, strict=True):
        assert b.tobytes() == c.tobytes()
    np.testing.assert_array_equal(md.sum(y * 1.0).numpy(), np.sum(e * np.float32(1.0)))


def test_a_broadcast_read_through_its_layout_stays_read_only():
    y = md.broadcast_to(md.tensor(np.arange(4, dtype=np.float32)) * 1.0, (3, 4))
    for _ in range(MAX_VIEW_DEPTH):  # one view op deeper than MAX_VIEW_DEPTH
        y = y[:, :]
    assert y.cell.layout is not None
    array = y.cell.storage.allocator.read(y.cell)
    assert not array.flags.writeable
    assert array.tolist() == [[0.0, 1.0, 2.0, 3.0]] * 3


def test_a_buffer_laid_out_differently_is_read_by_walking_the_chain():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = a.T[1:, ::2]
    layout = StridedLayout(view, a)
    assert layout.view_of(a).tobytes() == view.tobytes()
    assert layout.view_of(np.asfortranarray(a)) is None  # other strides: no layout read
    assert StridedLayout.locate(view, a) is not None
    assert StridedLayout.locate(view.copy(), a) is None  # not in a's memory: no layout
    assert StridedLayout.locate(a[::-1, ::-2], a) is not None  # negative strides
    assert StridedLayout.locate(a[:0], a) is None

    b = np.arange(4 * 40, dtype=np.float32).reshape(4, 40)
    x = md.tensor(b) * 1.0
    y = x
    for _ in range(MAX_VIEW_DEPTH + 1):
        y = y[:, 1:]
    assert y.cell.layout is not None
    storage = x.storage
    storage.buffer = np.asfortranarray(storage.buffer)  # same values, other strides
    assert y.numpy().tolist() == b[:, MAX_VIEW_DEPTH + 1 :].tolist()


def test_reading_one_part_of_a_split_remakes_that_part_only(monkeypatch):
    """Each read of a part replayed the whole split (n slices): reading n parts, or the
    backward of a concat or stack of n tensors (a split), took O(n^2) slices."""
    from minidtr.ops.shape import Split

    sliced = []
    forward = Split.forward
    monkeypatch.setattr(
        Split, "forward", lambda self, xp, x: sliced.append(1) or forward(self, xp, x)
    )
    x = md.tensor(np.arange(40.0).reshape(10, 4))
    parts = md.split(x, [1, 2, 3, 4])
    made = len(sliced)
    for part, start in zip(parts, [0, 1, 3, 6], strict=True):
        np.testing.assert_array_equal(part.numpy(), x.numpy()[start : start + part.shape[0]])
    assert len(sliced) == made  # the reads made no whole split
