"""``backend.add_at``, the scatter-add of the gradients of indexing and of embeddings: the
bits and the errors of ``np.add.at``, whatever the path it takes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidtr import backend

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -3.5]


@st.composite
def scatters(draw):
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    count = draw(st.integers(1, 12))
    trailing = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=2)))
    index_shape = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=2)))
    index_dtype = draw(st.sampled_from([np.int64, np.int32, np.int8, np.uint8, np.uint16]))
    low = 0 if np.dtype(index_dtype).kind == "u" else -count
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows = rng.integers(low, count, size=index_shape).astype(index_dtype)
    values = rng.standard_normal(index_shape + trailing).astype(dtype)
    if values.size and draw(st.booleans()):  # infinities, NaN and signed zeros
        flat = values.reshape(-1)
        flat[rng.integers(0, flat.size, size=max(1, flat.size // 3))] = rng.choice(SPECIAL)
    if values.ndim > 1 and draw(st.booleans()):  # one value repeated along an axis, as
        values = np.broadcast_to(values[:1], values.shape)  # a sum's gradient is
    target = rng.standard_normal((count, *trailing)).astype(dtype) * draw(st.sampled_from([0, 1]))
    wrapped = draw(st.booleans())  # a key tuple of one array, as indexing gives
    return target, (rows,) if wrapped else rows, values


@settings(max_examples=300, deadline=None)
@given(scatters(), st.sampled_from([1, 3, 8192]))
def test_the_same_bits_as_numpy(case, chunk):
    target, index, values = case
    expected = target.copy()
    np.add.at(expected, index, values)
    saved = backend.ADD_AT_CHUNK, backend.ADD_AT_FLAT
    backend.ADD_AT_CHUNK = chunk  # several chunks, one, and the default
    backend.ADD_AT_FLAT = 0  # the flat path for any size
    try:
        got = target.copy()
        backend.add_at(got, index, values)
    finally:
        backend.ADD_AT_CHUNK, backend.ADD_AT_FLAT = saved
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("chunk", [1, 8192])
@pytest.mark.parametrize("bad", [10, -11])
def test_an_index_out_of_range_raises_numpys_error_and_adds_nothing(monkeypatch, chunk, bad):
    monkeypatch.setattr(backend, "ADD_AT_CHUNK", chunk)
    monkeypatch.setattr(backend, "ADD_AT_FLAT", 0)
    target = np.zeros((10, 3), np.float32)
    rows = np.array([1, 2, bad, 3])
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 0 with size 10"):
        backend.add_at(target, rows, np.ones((4, 3), np.float32))
    assert not target.any()


def test_other_keys_go_to_numpy_as_they_are():
    """A slice with an array, two arrays, a broadcast operand, another dtype: ``np.add.at``."""
    rng = np.random.default_rng(0)
    target = rng.standard_normal((5, 4)).astype(np.float32)
    cases = [
        ((slice(None), np.array([0, 0, 3])), rng.standard_normal((5, 3)).astype(np.float32)),
        ((np.array([1, 1]), np.array([2, 2])), np.ones(2, np.float32)),
        (np.array([4, 4, 0]), np.broadcast_to(np.float32(0.5), (3, 4))),
        (np.array([2, 2]), np.ones((2, 4), np.float64)),
        (np.array([True, False, True, False, False]), np.ones((2, 4), np.float32)),
    ]
    for index, values in cases:
        expected, got = target.copy(), target.copy()
        np.add.at(expected, index, values)
        backend.add_at(got, index, values)
        assert got.tobytes() == expected.tobytes(), index
