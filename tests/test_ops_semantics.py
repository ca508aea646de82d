"""Values and errors that must match NumPy/PyTorch semantics (issue 10's regression tests).

Type promotion with Python scalars, gradients at 0, valid inputs that used to crash,
invalid inputs that used to be accepted, and errors that name the op. The same rules
are checked against PyTorch across every op in test_differential_torch.py.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import minidtr as md
from minidtr.ops.shape import IndexSlot

F32, F64, I64, I32, BOOL = (
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.int64),
    np.dtype(np.int32),
    np.dtype(np.bool_),
)


def values(t: md.Tensor):
    return t.numpy().tolist()


# ---- type promotion with scalars -------------------------------------------------------------


def test_float_scalar_with_int_tensor_gives_float32():
    out = md.tensor([1, 2, 3]) * 2.5
    assert out.dtype == F32
    assert values(out) == [2.5, 5.0, 7.5]


def test_comparison_with_float_scalar_compares_as_float():
    out = md.tensor([1, 2]) == 1.5
    assert out.dtype == BOOL
    assert values(out) == [False, False]
    assert values(md.tensor([1, 2]) < 1.5) == [True, False]


def test_int_scalar_with_bool_tensor_gives_int64():
    out = md.tensor([True, False]) + 2
    assert out.dtype == I64
    assert values(out) == [3, 2]


def test_where_with_float_scalar_branch_promotes_the_int_branch():
    cond = md.tensor([True, False])
    out = md.where(cond, md.tensor([1, 2]), 0.5)
    assert out.dtype == F32
    assert values(out) == [1.0, 0.5]
    both = md.where(cond, 1, 0.5)
    assert both.dtype == F32 and values(both) == [1.0, 0.5]
    ints = md.where(cond, 1, 0)
    assert ints.dtype == I64 and values(ints) == [1, 0]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("scalar", [2, 2.5, True, np.float64(2.5), np.int64(3)])
def test_scalar_never_widens_a_float_tensor(dtype, scalar):
    x = md.tensor(np.array([1.0, 2.0], dtype=dtype))
    for out in (x * scalar, scalar + x, x / scalar, x**scalar, md.maximum(x, scalar)):
        assert out.dtype == np.dtype(dtype)


@pytest.mark.parametrize(
    "tensor_dtype, scalar, want",
    [
        (np.int32, 2, I32),
        (np.int32, 2.5, F32),
        (np.int64, np.float64(2.5), F32),
        (np.bool_, True, BOOL),
        (np.bool_, 2, I64),
        (np.bool_, 2.5, F32),
        (np.uint8, 2, np.dtype(np.uint8)),
    ],
)
def test_scalar_promotion_table(tensor_dtype, scalar, want):
    x = md.tensor(np.array([1, 0], dtype=tensor_dtype))
    assert (x + scalar).dtype == want
    assert (scalar * x).dtype == want


def test_int_scalar_that_does_not_fit_is_an_error():
    fits = "add: the scalar 1099511627776 does not fit the tensor's dtype int32"
    with pytest.raises(OverflowError, match=fits):
        md.tensor(np.array([1], dtype=np.int32)) + 2**40
    with pytest.raises(OverflowError, match="uint8"):
        md.tensor(np.array([1], dtype=np.uint8)) - 300


def test_true_division_and_float_functions_of_ints_give_float32():
    x = md.tensor([3, 4])
    assert (x / 2).dtype == F32 and values(x / 2) == [1.5, 2.0]
    assert (x / md.tensor([2, 8])).dtype == F32
    for fn in (md.exp, md.log, md.sqrt, md.sigmoid, md.tanh, md.gelu):
        assert fn(x).dtype == F32
    np.testing.assert_allclose(md.sqrt(x).numpy(), [np.sqrt(3), 2.0], rtol=1e-6)


def test_integer_ops_stay_integer():
    x = md.tensor([-3, 4])
    assert (x**2).dtype == I64 and values(x**2) == [9, 16]
    assert values(md.relu(x)) == [0, 4]
    assert values(-x) == [3, -4]
    assert values(md.maximum(x, 0)) == [0, 4]
    with pytest.raises(ValueError, match="pow: integers to negative integer powers"):
        x**-1


def test_infer_reads_metadata_only_and_values_are_checked_when_the_op_runs():
    """``infer`` runs before room is made and must not read an input's value (which could
    rebuild an evicted input inside it): the value checks of pow, indexing, embedding and
    cross_entropy are their functions', made before the op, and still name the op."""
    from minidtr.ops.arithmetic import Pow
    from minidtr.ops.embedding import Embedding
    from minidtr.ops.loss import CrossEntropy
    from minidtr.ops.shape import Gather

    with md.Runtime() as runtime:
        ints = md.tensor([-1, 2, 7]) + 0  # computed: evictable
        allocator = ints.storage.allocator
        allocator.evict(ints.storage)
        cells = {
            Pow(): (ints.cell, ints.cell),
            Gather((IndexSlot(0),), 1): (md.ones(4).cell, ints.cell),
            Embedding(): (md.ones((5, 2)).cell, ints.cell),
            CrossEntropy(): (md.ones((3, 4)).cell, ints.cell),
        }
        for op, inputs in cells.items():
            op.infer(*inputs)
            assert ints.storage.buffer is None, op.name
        assert runtime.stats()["remats"] == 0
    with pytest.raises(ValueError, match="pow: integers to negative integer powers"):
        md.tensor([2, 3]) ** md.tensor([1, -1])
    with pytest.raises(IndexError, match=r"getitem: index .* is out of range: index 7 is out"):
        md.ones(4)[md.tensor([0, 7])]
    with pytest.raises(IndexError, match="embedding: index 7 is out of range for 5 rows"):
        md.embedding(md.ones((5, 2)), md.tensor([0, 7]))
    with pytest.raises(IndexError, match="cross_entropy: target -1 is out of range for 4"):
        md.cross_entropy(md.ones((2, 4)), md.tensor([0, -1]))
    assert md.ones((0, 3))[md.tensor([], dtype=md.int64)].shape == (0, 3)
    with pytest.raises(IndexError, match="getitem: index .* is out of range"):
        md.ones((0, 3))[md.tensor([0])]  # nothing is in range of an empty axis


def test_tensor_tensor_dtypes_must_match():
    with pytest.raises(md.DTypeError, match="add: dtypes differ; convert one input with astype"):
        md.tensor([1.0]) + md.tensor([1])
    with pytest.raises(md.DTypeError, match="equal: dtypes differ"):
        md.equal(md.tensor([1.0], dtype=md.float64), md.tensor([1.0]))


def test_bool_subtraction_and_negation_are_errors():
    with pytest.raises(md.DTypeError, match="sub: subtracting bool"):
        md.tensor([True]) - md.tensor([False])
    with pytest.raises(md.DTypeError, match="sub: subtracting bool values .* the scalar True"):
        md.tensor([1.0]) - True
    assert (md.tensor([1.0]) - 2).dtype == F32
    with pytest.raises(md.DTypeError, match="neg: negating a bool"):
        -md.tensor([True])


# ---- gradients at 0 and at extreme magnitudes ------------------------------------------------


def grad_of(fn, *arrays):
    tensors = [md.tensor(np.asarray(a, dtype=np.float32), requires_grad=True) for a in arrays]
    md.sum(fn(*tensors)).backward()
    return [t.grad.numpy() for t in tensors]


def test_pow_zero_exponent_gradient_at_zero_is_zero():
    (g,) = grad_of(lambda x: x**0.0, [0.0, 1.0, -2.0])
    assert g.tolist() == [0.0, 0.0, 0.0]


def test_pow_learnable_exponent_gradient_where_base_is_zero():
    x = md.tensor([0.0, 2.0, -1.0])
    p = md.tensor(1.5, requires_grad=True)
    md.sum(md.relu(x) ** p).backward()
    assert np.isfinite(p.grad.numpy())
    np.testing.assert_allclose(p.grad.numpy(), 2.0**1.5 * np.log(2.0), rtol=1e-6)


def test_pow_base_gradient_matches_the_formula_away_from_zero():
    (g,) = grad_of(lambda x: x**3.0, [0.0, 2.0, -1.0])
    assert g.tolist() == [0.0, 12.0, 3.0]


def test_division_denominator_gradient_is_stable_at_extreme_magnitudes():
    a = md.tensor([0.0, 1e-30], requires_grad=True)
    b = md.tensor([1e-23, 1e-23], requires_grad=True)
    md.sum(a / b).backward()
    gb = b.grad.numpy()
    assert np.isfinite(gb).all(), gb
    np.testing.assert_allclose(gb, [0.0, -1e-30 / 1e-23 / 1e-23], rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 4096])  # the expression and the in-place path
def test_sigmoid_keeps_its_small_values_and_saturates_quietly(dtype, n):
    """1 / (1 + exp(-x)): relative error of a rounding or two down to where exp(-x)
    overflows, then 0 without a warning (tanh(x/2)/2 + 1/2 gave 0 at -20 and 44% off at
    -17); exactly 1 where 1 - sigmoid is below half a rounding."""
    points = np.array([-1000.0, -100.0, -30.0, -20.0, -17.0, -5.0, 0.0, 5.0, 20.0, 1000.0])
    x = np.resize(points, n).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = md.sigmoid(md.tensor(x)).numpy()
    with np.errstate(over="ignore"):
        want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    representable = want > np.finfo(dtype).tiny
    np.testing.assert_allclose(y[representable], want[representable], rtol=4 * np.finfo(dtype).eps)
    assert (y[x <= -1000] == 0).all() and (y[x >= 1000] == 1).all()


def test_maximum_splits_the_gradient_on_ties():
    ga, gb = grad_of(md.maximum, [1.0, 2.0, 3.0], [1.0, 5.0, 0.0])
    assert ga.tolist() == [0.5, 0.0, 1.0]
    assert gb.tolist() == [0.5, 1.0, 0.0]


# ---- valid inputs that used to crash ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.uint8, np.int8])
def test_sum_of_ints_and_bools_is_int64(dtype):
    x = md.tensor(np.array([[1, 0, 1], [1, 1, 0]], dtype=dtype))
    assert md.sum(x).dtype == I64 and md.sum(x).item() == 4
    assert values(md.sum(x, axis=1)) == [2, 2]
    assert md.sum(x, axis=0, keepdims=True).shape == (1, 3)


def test_max_of_ints_keeps_the_dtype_and_mean_of_ints_asks_for_a_float():
    x = md.tensor(np.array([3, 7, 5], dtype=np.int32))
    assert md.max(x).dtype == I32 and md.max(x).item() == 7
    with pytest.raises(md.DTypeError, match="mean: .* got int32; convert with astype"):
        md.mean(x)


def test_conv2d_backward_with_an_empty_batch():
    x = md.zeros((0, 2, 5, 5), requires_grad=True)
    w = md.randn((3, 2, 3, 3), seed=0, requires_grad=True)
    b = md.zeros(3, requires_grad=True)
    out = md.conv2d(x, w, b, padding=1)
    assert out.shape == (0, 3, 5, 5)
    md.sum(out).backward()
    assert x.grad.shape == (0, 2, 5, 5)
    assert not w.grad.numpy().any() and not b.grad.numpy().any()


@pytest.mark.parametrize("fn", [md.softmax, md.log_softmax])
@pytest.mark.parametrize("shape, axis", [((2, 0), -1), ((0, 3), -1), ((0, 3), 0)])
def test_softmax_over_empty_tensors(fn, shape, axis):
    x = md.zeros(shape, requires_grad=True)
    out = fn(x, axis)
    assert out.shape == shape
    md.sum(out).backward()
    assert x.grad.shape == shape


def test_flatten_with_a_zero_size_dim():
    x = md.zeros((0, 3, 2))
    assert md.flatten(x, 1).shape == (0, 6)
    assert md.flatten(x).shape == (0,)
    assert md.zeros((2, 0, 3)).flatten(1).shape == (2, 0)
    assert md.tensor(5.0).flatten().shape == (1,)


def test_arange_with_float_arguments():
    x = md.arange(0, 1, 0.25)
    assert x.dtype == F32 and values(x) == [0.0, 0.25, 0.5, 0.75]
    assert md.arange(5).dtype == I64 and values(md.arange(5)) == [0, 1, 2, 3, 4]
    assert values(md.arange(1.0, 2.0, 0.5, dtype=md.float64)) == [1.0, 1.5]
    assert md.arange(0, 1, 0.3).shape == (4,)
    assert md.arange(5, 0, 1).shape == (0,)
    assert values(md.arange(5, 0, -2)) == [5, 3, 1]


def test_empty_list_index_gives_an_empty_result():
    x = md.randn((3, 2), seed=0)
    assert x[[]].shape == (0, 2)
    assert x[:, []].shape == (3, 0)
    mask = np.array([False, True, False])
    assert x[mask, []].shape == (0,)  # as NumPy and PyTorch: [] is an empty integer index
    assert x[md.tensor(mask), []].shape == (0,)
    assert x[[], []].shape == (0,)
    assert x[np.zeros(3, bool), [[]]].shape == (1, 0)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x: md.broadcast_to(x, "ab"), TypeError, "broadcast_to: shape must be"),
        (lambda x: x.assign(np.ones((3, 2))), TypeError, "assign: value must be a Tensor"),
        (lambda x: x[slice("a", None)], TypeError, "getitem: index .* is not valid"),
        (lambda x: x[::0], ValueError, r"getitem: .* step cannot be zero \(input shapes \[\(3, 2"),
        (lambda x: x[[0, [1]]], IndexError, r"getitem: index \[0, \[1\]\] is not valid"),
        (lambda x: x.sum(0, None), TypeError, "sum: keepdims must be True or False, got None"),
        (lambda x: x.mean(0, "no"), TypeError, "mean: keepdims must be True or False"),
        (lambda x: md.grad(x.sum(), x), TypeError, "grad: inputs must be a list"),
        (lambda x: md.nn.Sequential(1), TypeError, "Sequential: expected a Module, got int"),
    ],
)
def test_misuse_is_named_by_minidtr_not_a_lower_layer(call, error, message):
    """Arguments of the wrong kind fail in the function given them, naming it (they were
    NumPy's TypeErrors, an AttributeError, or a misleading message)."""
    x = md.tensor(np.ones((3, 2)), requires_grad=True)
    with pytest.raises(error, match=message):
        call(x)


# ---- invalid inputs that used to be accepted --------------------------------------------------


def test_boolean_mask_must_match_its_axis():
    x = md.zeros((3, 2))
    with pytest.raises(IndexError, match="getitem: boolean index did not match"):
        x[np.array([True, False])]
    with pytest.raises(IndexError, match="getitem"):
        x[:, md.tensor([True, False, True])]
    assert x[np.array([True, False, True])].shape == (2, 2)
    assert x[md.tensor([True, False, True]), 1:].shape == (2, 1)


@pytest.mark.parametrize("axis", [3, -4, 5])
def test_stack_axis_out_of_range(axis):
    with pytest.raises(md.ShapeError, match=f"stack: axis {axis} is out of range"):
        md.stack([md.zeros((2, 3)), md.zeros((2, 3))], axis=axis)


def test_stack_axis_in_range():
    a, b = md.zeros((2, 3)), md.ones((2, 3))
    assert md.stack([a, b], axis=2).shape == (2, 3, 2)
    assert md.stack([a, b], axis=-3).shape == (2, 2, 3)


@pytest.mark.parametrize("axis", [2, 7, -3])
def test_flatten_axis_out_of_range(axis):
    with pytest.raises(md.ShapeError, match=f"flatten: axis {axis} is out of range"):
        md.zeros((2, 3)).flatten(axis)


def test_split_axis_out_of_range():
    with pytest.raises(md.ShapeError, match="split: axis 2 is out of range"):
        md.split(md.zeros((2, 4)), 2, axis=2)


def test_split_into_parts_refuses_unequal_ones_as_np_split_and_ops_md_says_so():
    """ops.md said split(x, 2) worked as np.array_split and torch.chunk, which make
    unequal parts; the code follows np.split, as the page says further down."""
    with pytest.raises(ValueError, match="does not split into 2 equal parts"):
        md.split(md.zeros(5), 2)
    with pytest.raises(ValueError):
        np.split(np.zeros(5), 2)
    page = (Path(__file__).parent.parent / "docs" / "ops.md").read_text()
    sentence = " ".join(page[page.index("`split(x, 2)` cuts") :].split(";")[0].split())
    assert "as NumPy's `np.split`: an axis that does not divide is refused" in sentence


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: x.max(dim=0), "max: axis 0"),
        (lambda x: x.min(dim=-1), "min: axis -1"),
        (lambda x: x.squeeze(0), "squeeze: axis 0"),
        (lambda x: x.sum(dim=0), "sum: axis 0"),
    ],
)
def test_an_axis_of_a_0d_tensor_is_out_of_range_for_0_dimensions(call, message):
    """Not 'for shape () (valid: 0..-1)', an empty range written backwards."""
    with pytest.raises(md.ShapeError, match=f"{message} is out of range for 0 dimensions"):
        call(md.tensor(5.0))


@pytest.mark.parametrize("dtype", [md.int64, md.int32, md.bool_])
def test_requires_grad_is_only_for_floats(dtype):
    with pytest.raises(TypeError, match="floating-point"):
        md.tensor([1, 0], dtype=dtype, requires_grad=True)
    x = md.tensor([1, 0], dtype=dtype)
    with pytest.raises(TypeError, match=f"can require grad, not {dtype}"):
        x.requires_grad = True
    with pytest.raises(TypeError, match="only floating-point"):
        x.requires_grad_()
    with pytest.raises(TypeError, match="only floating-point"):
        md.zeros(3, dtype=dtype, requires_grad=True)
    assert not x.requires_grad and x.grad is None


def test_no_gradient_flows_through_an_integer_result():
    x = md.tensor([1.5, 2.5], requires_grad=True)
    n = x.astype(md.int64)
    assert not n.requires_grad and n.grad_fn is None
    assert not (x > 1.0).requires_grad
    back = n.astype(md.float32) * x
    md.sum(back).backward()
    assert values(x.grad) == [1.0, 2.0]  # only the direct path: d(n * x)/dx = n


@pytest.mark.parametrize("data", [None, ["a"], [b"x"], [1 + 2j], {"a": 1}, [[1], [1, 2]]])
def test_tensor_rejects_data_of_no_numeric_dtype(data):
    with pytest.raises(TypeError, match="tensor\\(\\)"):
        md.tensor(data)


@pytest.mark.parametrize("dtype", [object, str, np.complex64])
def test_dtypes_tensors_cannot_hold(dtype):
    with pytest.raises(TypeError, match="bool, integer or floating-point"):
        md.tensor(np.zeros(2, dtype=dtype))
    with pytest.raises(TypeError, match="astype: tensors hold"):
        md.zeros(2).astype(dtype)
    with pytest.raises(TypeError, match="full: tensors hold"):
        md.full(2, 0, dtype=dtype)


# ---- clear errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda v: md.exp(v), "exp"),
        (lambda v: md.relu(v), "relu"),
        (lambda v: md.sum(v), "sum"),
        (lambda v: md.mean(v), "mean"),
        (lambda v: md.min(v), "min"),
        (lambda v: md.abs(v), "abs"),
        (lambda v: md.clip(v, 0.0, 1.0), "clip"),
        (lambda v: md.softmax(v), "softmax"),
        (lambda v: md.matmul(v, md.zeros((2, 2))), "matmul"),
        (lambda v: md.reshape(v, (2,)), "reshape"),
        (lambda v: md.flatten(v), "flatten"),
        (lambda v: md.transpose(v), "transpose"),
        (lambda v: md.conv2d(md.zeros((1, 1, 3, 3)), v), "conv2d"),
        (lambda v: md.layer_norm(v, None, None), "layer_norm"),
        (lambda v: md.batch_norm(v, None, None), "batch_norm"),
        (lambda v: md.dropout(v), "dropout"),
        (lambda v: md.linear(v, md.zeros((2, 2))), "linear"),
        (lambda v: md.concat([md.zeros(2), v]), "concat"),
        (lambda v: md.stack([md.zeros(2), v]), "stack"),
        (lambda v: md.split(v, 2), "split"),
        (lambda v: md.cross_entropy(v, [0]), "cross_entropy"),
        (lambda v: md.embedding(v, [0]), "embedding"),
        (lambda v: md.astype(v, md.float64), "astype"),
        (lambda v: md.getitem(v, 0), "getitem"),
        (lambda v: md.global_avg_pool2d(v), "global_avg_pool2d"),
        (lambda v: md.max_pool2d(v, 2), "max_pool2d"),
    ],
)
@pytest.mark.parametrize("value", [[1.0, 2.0], np.ones(2, np.float32), None])
def test_non_tensor_arguments_get_a_type_error_naming_the_op(call, name, value):
    with pytest.raises(TypeError, match=f"^{name}: .*(list|ndarray|NoneType)"):
        call(value)


def test_binary_ops_accept_arrays_and_lists_as_tensors():
    x = md.tensor([1.0, 2.0])
    assert values(x + [1.0, 1.0]) == [2.0, 3.0]
    assert values(np.array([1.0, 1.0], np.float32) * x) == [1.0, 2.0]
    with pytest.raises(TypeError, match="add: expected a Tensor, a scalar or an array, got NoneT"):
        x + None  # noqa: B018
    with pytest.raises(TypeError, match="mul: expected a Tensor, a scalar or an array, got str"):
        md.mul(x, "a")


def test_arange_bad_arguments():
    with pytest.raises(ValueError, match="arange: step must not be zero"):
        md.arange(0, 5, 0)
    with pytest.raises(ValueError, match="arange: stop must be finite"):
        md.arange(0, float("inf"))
    with pytest.raises(TypeError, match="arange: start must be a number, got str"):
        md.arange("a", 3)


def test_arange_of_numpy_integers_has_a_shape_of_ints():
    shape = md.arange(np.int64(1), np.int64(7), np.int64(2)).shape
    assert shape == (3,) and type(shape[0]) is int  # (np.int64(3),) broke json.dumps


def test_full_refuses_a_value_an_integer_dtype_cannot_hold():
    """As PyTorch's ``full`` (a fraction is cut there too); NaN filled int64 with its lowest
    value, 300 failed inside NumPy naming no function."""
    assert md.full((2,), 2.5, md.int64).numpy().tolist() == [2, 2]
    with pytest.raises(OverflowError, match=r"full: value 300 does not fit uint8 \(0..255\)"):
        md.full((2,), 300, np.uint8)
    with pytest.raises(
        ValueError, match=r"full: value nan cannot fill an integer tensor \(int64\)"
    ):
        md.full((2,), float("nan"), md.int64)
    assert md.full((2,), 7, np.bool_).numpy().tolist() == [True, True]


def test_stack_mismatch_is_reported_as_stack():
    with pytest.raises(md.ShapeError, match=r"^stack: .*\(2,\) float32, \(3,\) float32"):
        md.stack([md.zeros(2), md.zeros(3)])
    with pytest.raises(md.DTypeError, match="^stack: "):
        md.stack([md.zeros(2), md.zeros(2, dtype=md.float64)])


def test_bad_axes_and_shapes_name_the_op():
    with pytest.raises(TypeError, match="sum: axis must be None, an int or a tuple of ints"):
        md.sum(md.zeros(3), axis=1.5)
    with pytest.raises(TypeError, match="softmax: axis must be an int"):
        md.softmax(md.zeros(3), axis=0.5)
    with pytest.raises(TypeError, match="reshape: the shape must be ints"):
        md.reshape(md.zeros(4), (2.0, 2))
    with pytest.raises(TypeError, match=r"^view: the shape must be ints, got \(2.0, 3\)"):
        md.zeros(2, 3).view(2.0, 3)
    with pytest.raises(ValueError, match=r"^view: cannot reshape \(2, 3\) \(6 elements\) into"):
        md.zeros(2, 3).view(4, 2)
    with pytest.raises(ValueError, match=r"^reshape: cannot reshape \(2, 3\) \(6 elements\)"):
        md.zeros(2, 3).reshape([4, 2])
    with pytest.raises(TypeError, match="split: sections must be a non-empty list of ints"):
        md.split(md.zeros(4), [1.5, 2.5])
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        list(md.tensor(1.0))
    assert [t.item() for t in md.tensor([1.0, 2.0])] == [1.0, 2.0]


def test_scalar_bool_index_is_refused_clearly():
    with pytest.raises(IndexError, match="scalar bool index"):
        md.zeros(3)[True]


def test_sum_to_and_global_pool_errors_name_the_op():
    with pytest.raises(
        md.ShapeError, match=r"sum_to: shape \(2, 3\) does not broadcast from \(4,\)"
    ):
        md.sum_to(md.zeros((2, 3)), (4,))
    with pytest.raises(TypeError, match="sum_to: x must be a Tensor, got int"):
        md.sum_to(3, ())
    with pytest.raises(md.DTypeError, match="global_avg_pool2d: needs a floating-point input"):
        md.global_avg_pool2d(md.zeros((1, 1, 2, 2), dtype=md.int64))


# ---- every public op, random (mostly bad) arguments: a clear error naming the op, or a value ----


def random_argument_calls(rng: np.random.Generator) -> dict:
    """For each public op, a call with random arguments: tensors of random shapes and dtypes,
    scalars, None, lists, arrays, and random axes and static arguments."""
    dtypes = [np.float32, np.float64, np.int64, np.int32, np.bool_]

    def shape(most: int = 4) -> tuple:
        return tuple(int(d) for d in rng.choice([0, 1, 2, 3, 4], size=rng.integers(0, most + 1)))

    def arg():
        r = rng.random()
        if r < 0.6:
            dtype = dtypes[rng.integers(len(dtypes))]
            return md.tensor((rng.standard_normal(shape()) * 3).astype(dtype))
        return [1.5, -2, None, [1.0, 2.0], np.ones(2)][rng.integers(5)]

    def pick(*options):
        return options[rng.integers(len(options))]

    axis = pick(None, 0, 1, -1, 3, -5, (0, 1), 1.5, (0, 0))
    return {
        "add": lambda: md.add(arg(), arg()),
        "sub": lambda: md.sub(arg(), arg()),
        "mul": lambda: md.mul(arg(), arg()),
        "div": lambda: md.div(arg(), arg()),
        "pow": lambda: md.pow(arg(), arg()),
        "maximum": lambda: md.maximum(arg(), arg()),
        "less": lambda: md.less(arg(), arg()),
        "equal": lambda: md.equal(arg(), arg()),
        "where": lambda: md.where(arg(), arg(), arg()),
        **{
            name: (lambda f=fn: f(arg()))
            for name, fn in (
                ("neg", md.neg),
                ("exp", md.exp),
                ("log", md.log),
                ("sqrt", md.sqrt),
                ("relu", md.relu),
                ("sigmoid", md.sigmoid),
                ("tanh", md.tanh),
                ("copy", md.copy),
            )
        },
        "gelu": lambda: md.gelu(arg(), pick("none", "tanh", "x")),
        "astype": lambda: md.astype(arg(), pick(md.float32, md.int64, md.bool_, "x", object)),
        "sum": lambda: md.sum(arg(), axis, pick(True, False)),
        "mean": lambda: md.mean(arg(), axis),
        "max": lambda: md.max(arg(), axis),
        "min": lambda: md.min(arg(), dim=pick(0, -1, 2, (0, 1), 1.5), keepdim=pick(True, 1)),
        "argmax": lambda: md.argmax(arg(), axis, pick(True, False, None)),
        "argmin": lambda: md.argmin(arg(), dim=pick(None, 0, -1, 2, 1.5)),
        "squeeze": lambda: md.squeeze(arg(), pick(None, 0, -1, 3, (0, 0), 1.5)),
        "unsqueeze": lambda: md.unsqueeze(arg(), pick(0, -1, 2, 5, None)),
        "permute": lambda: md.permute(arg(), pick((), (1, 0), (0,), (2, 0, 1), (0, 0), 1.5)),
        "sum_to": lambda: md.sum_to(arg(), shape()),
        "reshape": lambda: md.reshape(arg(), shape() + pick((), (-1,))),
        "flatten": lambda: md.flatten(arg(), int(rng.integers(-4, 4))),
        "transpose": lambda: md.transpose(arg(), pick(None, (1, 0), (0,), (2, 0, 1))),
        "broadcast_to": lambda: md.broadcast_to(arg(), shape()),
        "getitem": lambda: md.getitem(
            arg(), pick(0, -1, slice(1, None), (0, 0), [0, 1], np.array([True]), [], 5, 1.5)
        ),
        "concat": lambda: md.concat([arg() for _ in range(rng.integers(0, 3))], pick(0, 1, -3)),
        "stack": lambda: md.stack([arg() for _ in range(rng.integers(0, 3))], pick(0, 2, -3)),
        "split": lambda: md.split(arg(), pick(2, [1, 1], 0, [1, -1], 3), pick(0, 1, -2, 2)),
        "matmul": lambda: md.matmul(arg(), arg()),
        "linear": lambda: md.linear(arg(), arg(), pick(None, arg())),
        "conv2d": lambda: md.conv2d(arg(), arg(), None, pick(0, 1, 2), pick(-1, 0, 1)),
        "max_pool2d": lambda: md.max_pool2d(arg(), pick(0, 1, 2)),
        "avg_pool2d": lambda: md.avg_pool2d(arg(), pick(0, 1, 2)),
        "global_avg_pool2d": lambda: md.global_avg_pool2d(arg()),
        "upsample_nearest2d": lambda: md.upsample_nearest2d(arg(), pick(0, 1, 2)),
        "batch_norm": lambda: md.batch_norm(arg(), arg(), arg()),
        "layer_norm": lambda: md.layer_norm(arg(), arg(), arg()),
        "softmax": lambda: md.softmax(arg(), pick(-3, -1, 0, 2)),
        "log_softmax": lambda: md.log_softmax(arg(), pick(-3, -1, 0, 2)),
        "cross_entropy": lambda: md.cross_entropy(arg(), arg()),
        "mse_loss": lambda: md.mse_loss(arg(), arg()),
        "embedding": lambda: md.embedding(arg(), arg()),
        "dropout": lambda: md.dropout(arg(), float(rng.uniform(-0.5, 1.2))),
        "randn": lambda: md.randn(shape(), dtype=pick(md.float32, md.int64)),
        "arange": lambda: md.arange(*[pick(arg(), 2, -1.5, 0) for _ in range(rng.integers(1, 4))]),
        "tensor": lambda: md.tensor([arg() for _ in range(rng.integers(0, 3))]),
    }


# the mean of an empty slice is NaN, as in NumPy and PyTorch; NumPy also warns, which is
# its message to the user, not a failure of this test
@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_random_arguments_give_a_value_or_an_error_naming_the_op():
    rng = np.random.default_rng(10)
    calls = 0
    for _ in range(25):
        for name, call in random_argument_calls(rng).items():
            calls += 1
            try:
                with np.errstate(all="ignore"):
                    call()
            except (ValueError, TypeError, IndexError, OverflowError) as error:
                head = str(error).split(":")[0]
                assert head in (name, name + "()"), f"{name}: the error names {head!r}: {error}"
    assert calls == 25 * len(random_argument_calls(rng))


def test_a_convolution_with_no_output_channels_gives_an_empty_result():
    """(PyTorch refuses an empty weight; the product of an empty weight is empty, not an
    error inside the kernel's reshape.)"""
    x = md.tensor(np.ones((1, 2, 4, 4)), requires_grad=True)
    y = md.conv2d(x, md.tensor(np.ones((0, 2, 3, 3))))
    assert y.shape == (1, 0, 2, 2)
    y.sum().backward()
    assert x.grad.numpy().tolist() == np.zeros((1, 2, 4, 4)).tolist()


def test_clip_bounds_are_numbers_of_the_tensors_kind():
    x, ints = md.tensor([-2.0, 0.5, 3.0]), md.tensor([-2, 0, 3])
    assert values(md.clip(x, 0, 1)) == [0.0, 0.5, 1.0]  # int bounds on a float tensor
    assert values(md.clip(ints, max=1)) == [-2, 0, 1] and md.clip(ints, -1).dtype == md.int64
    assert values(md.clip(md.tensor(np.array([-100, 100], np.int8)), -1000, 7)) == [-100, 7]
    assert values(md.clip(x, 1, -1)) == [-1.0, -1.0, -1.0]  # min > max: max, as NumPy and PyTorch
    with pytest.raises(ValueError, match="clip: give min, max or both"):
        md.clip(x)
    with pytest.raises(
        md.DTypeError, match=r"clip: a int64 tensor takes integer bounds, got min=0.5"
    ):
        md.clip(ints, 0.5)
    with pytest.raises(ValueError, match="clip: max must not be NaN"):
        md.clip(x, max=float("nan"))
    with pytest.raises(TypeError, match="clip: min must be a number or None, got True"):
        md.clip(x, True)
    with pytest.raises(md.DTypeError, match="clip: needs a numeric input, got bool"):
        md.clip(md.tensor([True]), 0)


def test_abs_min_and_clip_are_tensor_methods_too():
    x = md.tensor([[-2.0, 1.0], [0.5, -0.25]])
    assert values(abs(x)) == values(x.abs()) == [[2.0, 1.0], [0.5, 0.25]]
    assert values(x.min(axis=1)) == [-2.0, -0.25] and x.min().item() == -2.0
    assert values(x.clip(-1, 0.75)) == [[-1.0, 0.75], [0.5, -0.25]]


def test_item_assignment_is_refused_and_augmented_assignment_rebinds():
    x = md.ones((2, 3))
    with pytest.raises(TypeError, match=r"item assignment .*shape \(2, 3\).*md\.where"):
        x[0, 1] = 2.0
    assert x.tolist() == [[1.0] * 3] * 2
    y = x
    x += 1
    assert x is not y and y.tolist() == [[1.0] * 3] * 2 and x.tolist() == [[2.0] * 3] * 2


def test_a_numpy_ufunc_on_a_tensor_that_requires_grad_is_refused():
    """np.tanh(x) gave an array, and the gradient through it was silently lost (PyTorch
    refuses it too); ``array (op) tensor`` is still the tensor's reflected operator."""
    x = md.tensor([0.5, 1.0], requires_grad=True)
    with pytest.raises(TypeError, match="np.tanh on a Tensor that requires grad would drop"):
        np.tanh(x)
    a = np.array([2.0, 3.0], np.float32)
    for made in (a * x, a + x, a - x, a / x, a**x, np.float64(2.0) * x):
        assert isinstance(made, md.Tensor) and made.requires_grad
    assert (a < x).numpy().tolist() == [False, False] and (a > x).numpy().all()
    (a * x).sum().backward()
    assert x.grad.numpy().tolist() == [2.0, 3.0]
    np.testing.assert_allclose(np.tanh(md.tensor([0.5])), np.tanh(np.float32(0.5)), rtol=1e-6)


def test_equality_with_none_and_membership_are_pytorchs():
    x = md.tensor([1.0, 2.0])
    assert (x == None) is False and (x != None) is True  # noqa: E711
    assert x in [None, x] and x not in [None, "a"]
    assert 2.0 in md.tensor([[1.0, 2.0], [3.0, 4.0]]) and 5 not in md.tensor([[1.0, 2.0]])


def test_transpose_of_two_axes_that_would_leave_a_matrix_alone_is_refused():
    """NumPy reads transpose(0, 1) of a matrix as the identity, PyTorch as the swap."""
    m = md.tensor([[1.0, 2.0], [3.0, 4.0]])
    for axes in ((0, 1), (-2, -1)):
        with pytest.raises(ValueError, match=r"PyTorch's transpose\(0, 1\) swaps"):
            m.transpose(*axes)
    assert m.transpose(1, 0).tolist() == m.T.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert md.ones((2, 3, 4)).transpose(0, 2, 1).shape == (2, 4, 3)


def test_dtype_names_are_numpy_dtypes_as_in_torch():
    """md.int8 ... md.uint8 name the dtypes ops.md lists, as torch.int8 ... torch.uint8 do."""
    names = ["bool_", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
    for name in names:
        dtype = getattr(md, name)
        assert dtype == np.dtype(name.rstrip("_"))
        assert md.zeros(2, dtype=dtype).dtype == dtype
    assert (md.tensor([250], dtype=md.uint8) + 5).numpy().tolist() == [255]


def test_a_tensor_from_an_array_like_object_takes_its_numpy_view():
    """A PyTorch tensor (anything with __array__): its dtype was checked as a NumPy dtype
    ('torch.float32 is not a dtype')."""
    torch = pytest.importorskip("torch")
    x = md.tensor(torch.arange(6, dtype=torch.float64).reshape(2, 3))
    assert x.dtype == np.float64 and x.shape == (2, 3) and x.numpy()[1, 2] == 5.0
    assert md.tensor(torch.ones(2), dtype=md.float16).dtype == np.float16


def test_a_hand_written_update_of_a_parameter_under_no_grad_updates_it():
    """``for p in model.parameters(): p -= lr * p.grad`` rebound the loop's name only and
    left the weights as they were; now the parameter takes the value (copy-on-write, a
    constant), outside no_grad it is refused as in PyTorch, and other tensors rebind."""
    model = md.nn.Linear(3, 2)
    model(md.ones((4, 3))).sum().backward()
    before = [p.numpy() for p in model.parameters()]
    handles = list(model.parameters())
    with md.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
            p *= 2.0
    for p, old, handle in zip(model.parameters(), before, handles, strict=True):
        assert p is handle and p.is_leaf and p.requires_grad
        np.testing.assert_array_equal(p.numpy(), (old - 0.5 * p.grad.numpy()) * 2.0)
    with pytest.raises(RuntimeError, match=r"x -= \.\.\.: x is a leaf that requires grad"):
        w = model.weight
        w -= 1.0
    with pytest.raises(md.DTypeError, match="add: dtypes differ"), md.no_grad():
        w += md.ones((2, 3), dtype=md.float64)
    broadcast = r"x \+= y: the result is \(4, 2, 3\) float32"
    with pytest.raises(ValueError, match=broadcast), md.no_grad():
        w += md.ones((4, 2, 3))
    x = md.ones(2)
    alias = x
    x += 1.0  # not a parameter: rebinds, the other name keeps the old value
    assert alias.numpy().tolist() == [1.0, 1.0] and x.numpy().tolist() == [2.0, 2.0]


def test_the_op_families_are_not_names_of_the_package():
    """md.gather was the module gather.py ("'module' object is not callable")."""
    for name in ("gather", "norm", "random", "linalg", "activation", "shape"):
        assert not hasattr(md, name), name
    assert callable(md.gather_rows) and callable(md.layer_norm) and callable(md.randn)
    assert "ModuleType" not in md.ops.__all__ and not hasattr(md, "ModuleType")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_of_a_value_over_half_the_largest_float_is_that_value(dtype, approximate):
    """(1 + t) / 2 before times x: (1 + t) x overflowed to inf above half the largest
    float, where PyTorch gives x; the order it replaces gave the same bits elsewhere."""
    if approximate == "none":
        pytest.importorskip("scipy")  # (float64's erf; float32's non-contiguous one)
    big = np.finfo(dtype).max
    x = np.array([[big * 0.6, big, -big * 0.6, 1.5], [big * 0.75, big * 0.51, -1.0, 0.3]], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # x**3 overflows in the tanh form
        for t in (md.tensor(x), md.tensor(x.T.copy()).T):  # contiguous and not
            y = md.gelu(t, approximate=approximate).numpy()
            np.testing.assert_array_equal(y[:, :2], x[:, :2])
            assert (y[0, 2] == 0.0) and np.isfinite(y).all()
    ordinary = np.random.default_rng(0).standard_normal(10_000).astype(dtype) * 4
    inner = np.power(ordinary, 3)
    inner *= 0.044715
    inner += ordinary
    inner *= math.sqrt(2.0 / math.pi)
    before = (np.tanh(inner) + 1.0) * ordinary * 0.5
    ours = md.gelu(md.tensor(ordinary), approximate="tanh").numpy()
    np.testing.assert_array_equal(ours, before)


def test_pytorch_s_dim_names_on_softmax_flatten_and_joins():
    """A PyTorch user's F.softmax(x, dim=-1), x.flatten(start_dim=1), torch.cat(ts, dim=1)
    were TypeErrors; the values are PyTorch's, and giving both names is refused."""
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    x, t = md.tensor(a), torch.tensor(a)
    pairs = [
        (md.softmax(x, dim=1), torch.softmax(t, dim=1)),
        (x.softmax(dim=-1), t.softmax(dim=-1)),
        (x.log_softmax(dim=0), t.log_softmax(dim=0)),
        (x.flatten(start_dim=1), t.flatten(start_dim=1)),
        (md.concat([x, x], dim=2), torch.cat([t, t], dim=2)),
        (md.stack([x, x], dim=-1), torch.stack([t, t], dim=-1)),
        (md.split(x, 2, dim=2)[1], torch.chunk(t, 2, dim=2)[1]),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
    for call in (
        lambda: md.softmax(x, 0, dim=1),
        lambda: md.concat([x, x], 1, dim=1),
        lambda: x.flatten(1, start_dim=1),
    ):
        with pytest.raises(TypeError, match="not both"):
            call()
