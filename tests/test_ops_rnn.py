"""lstm_gates, lstm_cell and child_sum_cell (the LSTMs' fused ops) through the generic
harness, plus each output's gradient alone (the last step's c' has none) and the unrolled
cell against PyTorch and under budgets."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_remat_properties import check_between_minimal_and_peak

import minidtr as md
from minidtr.testing.strategies import budget_fractions, deallocs, heuristics
from op_harness import HAS_TORCH, OpCase, define_tests


def rows_and_indices(rng, shapes, dtype):
    """Float sources, then for each an int32 index of its rows (with repeats)."""
    n = len(shapes) // 2
    sources = [rng.standard_normal(s).astype(dtype) for s in shapes[:n]]
    rows = [
        rng.integers(0, s.shape[0], shape).astype(np.int32)
        for s, shape in zip(sources, shapes[n:], strict=True)
    ]
    return [*sources, *rows]


def rows_and_slots(rng, shapes, dtype):
    """Rows (C, ...) and a (P, K) slot table holding each row once (1 + its index), in
    random parents and positions, zeros elsewhere; a child may also sit twice."""
    rows_shape, (parents, k) = shapes
    rows = rng.standard_normal(rows_shape).astype(dtype)
    slots = np.zeros((parents, k), np.int64)
    cells = rng.permutation(parents * k)[: rows_shape[0]] if rows_shape else []
    for child, cell in enumerate(cells):
        slots.flat[cell] = child + 1
    if rows_shape and parents * k > rows_shape[0]:
        free = np.flatnonzero(slots == 0)
        slots.flat[free[0]] = 1  # row 0 twice: its gradient adds both
    return [rows, slots]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def cell_reference(gates, c):
    i, f, g, o = np.split(gates.astype(np.float64), 4, axis=-1)
    c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h_new = sigmoid(o) * np.tanh(c_new)
    return h_new.astype(gates.dtype), c_new.astype(gates.dtype)


def torch_cell(t, gates, c):
    i, f, g, o = gates.chunk(4, dim=-1)
    c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c_new.tanh(), c_new


def child_sum_reference(iou, c_in=0.0):
    i, o, u = np.split(iou.astype(np.float64), 3, axis=-1)
    c_new = sigmoid(i) * np.tanh(u) + c_in
    return (sigmoid(o) * np.tanh(c_new)).astype(iou.dtype), c_new.astype(iou.dtype)


def torch_child_sum(t, iou, c_in=0.0):
    i, o, u = iou.chunk(3, dim=-1)
    c_new = i.sigmoid() * u.tanh() + c_in
    return o.sigmoid() * c_new.tanh(), c_new


def gates_reference(x, h, w_ih, w_hh, b_ih=None, b_hh=None):
    y = x.astype(np.float64) @ w_ih.T + h.astype(np.float64) @ w_hh.T
    for b in (b_ih, b_hh):
        if b is not None:
            y = y + b
    return y.astype(x.dtype)


def torch_gates(t, x, h, w_ih, w_hh, b_ih=None, b_hh=None):
    F = t.nn.functional
    return F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)


CASES = [
    OpCase(
        "lstm_cell",
        md.lstm_cell,
        cell_reference,
        [((5, 12), (5, 3)), ((2, 3, 8), (2, 3, 2)), ((8,), (2,)), ((0, 8), (0, 2))],
        torch_fn=torch_cell,
        bad=[((5, 12), (5, 4)), ((5, 12), (4, 3)), ((12,), ()), ((5, 12), (3,))],
    ),
    OpCase(
        "lstm_cell[h only]",
        lambda gates, c: md.lstm_cell(gates, c)[0],
        lambda gates, c: cell_reference(gates, c)[0],
        [((4, 8), (4, 2))],
        torch_fn=lambda t, gates, c: torch_cell(t, gates, c)[0],
    ),
    OpCase(
        "lstm_cell[c only]",
        lambda gates, c: md.lstm_cell(gates, c)[1],
        lambda gates, c: cell_reference(gates, c)[1],
        [((4, 8), (4, 2))],
        torch_fn=lambda t, gates, c: torch_cell(t, gates, c)[1],
    ),
    OpCase(
        "lstm_cell[constant state]",
        md.lstm_cell,
        cell_reference,
        [((4, 8), (4, 2))],
        grad_inputs=(0,),
        torch_fn=torch_cell,
    ),
    OpCase(
        "child_sum_cell",
        md.child_sum_cell,
        child_sum_reference,
        [((5, 9), (5, 3)), ((2, 3, 6), (2, 3, 2)), ((6,), (2,)), ((0, 6), (0, 2))],
        torch_fn=torch_child_sum,
        bad=[((5, 12), (5, 3)), ((5, 9), (4, 3)), ((9,), ())],
    ),
    OpCase(
        "child_sum_cell[leaf]",
        md.child_sum_cell,
        child_sum_reference,
        [((5, 9),), ((6,),)],
        torch_fn=torch_child_sum,
        bad=[((5, 8),), ((),)],
    ),
    OpCase(
        "child_sum_cell[leaf, c only]",
        lambda iou: md.child_sum_cell(iou)[1],
        lambda iou: child_sum_reference(iou)[1],
        [((4, 6),)],
        torch_fn=lambda t, iou: torch_child_sum(t, iou)[1],
    ),
    OpCase(
        "child_sum_cell[h only]",
        lambda iou, c_in: md.child_sum_cell(iou, c_in)[0],
        lambda iou, c_in: child_sum_reference(iou, c_in)[0],
        [((4, 6), (4, 2))],
        torch_fn=lambda t, iou, c_in: torch_child_sum(t, iou, c_in)[0],
    ),
    OpCase(
        "child_sum_cell[c only, constant c_in]",
        lambda iou, c_in: md.child_sum_cell(iou, c_in)[1],
        lambda iou, c_in: child_sum_reference(iou, c_in)[1],
        [((4, 6), (4, 2))],
        grad_inputs=(0,),
        torch_fn=lambda t, iou, c_in: torch_child_sum(t, iou, c_in)[1],
    ),
    OpCase(
        "gather_rows",
        lambda a, b, ra, rb: md.gather_rows([a, b], [ra, rb]),
        lambda a, b, ra, rb: np.concatenate([a[ra], b[rb]]),
        [((5, 3), (4, 3), (3,), (6,)), ((6, 2, 2), (2, 2, 2), (4,), (1,))],
        make=rows_and_indices,
        torch_fn=lambda t, a, b, ra, rb: t.cat([a[ra], b[rb]]),
        bad=[
            ((5, 3), (4, 2), (3,), (6,)),
            ((5, 3), (4, 3), (3, 1), (6,)),
            [np.ones((5, 3), np.float32), np.ones((4, 3)), np.zeros(2, np.int32), np.zeros(1, int)],
            [
                np.ones((5, 3), np.float32),
                np.ones((4, 3), np.float32),
                np.array([5]),
                np.zeros(1, int),
            ],
        ],
    ),
    OpCase(
        "gather_rows[one source]",
        lambda a, ra: md.gather_rows([a], [ra]),
        lambda a, ra: a[ra],
        [((5, 3), (7,))],
        make=rows_and_indices,
        torch_fn=lambda t, a, ra: a[ra],
    ),
    OpCase(
        "sum_children",
        md.sum_children,
        lambda rows, slots: np.concatenate([np.zeros_like(rows[:1]), rows])[slots].sum(axis=1),
        [((7, 3), (4, 3)), ((5, 2, 2), (6, 2))],
        make=rows_and_slots,
        torch_fn=lambda t, rows, slots: t.cat([t.zeros_like(rows[:1]), rows])[slots].sum(1),
        bad=[
            [np.ones((7, 3), np.float32), np.ones(4, np.int64)],
            [np.ones((7, 3), np.float32), np.ones((4, 3), np.float32)],
            [np.ones((2, 3), np.float32), np.array([[1, 3]])],  # row 2 of two
            [np.float32(1.0), np.ones((4, 3), np.int64)],
        ],
    ),
    OpCase(
        "lstm_gates",
        md.lstm_gates,
        gates_reference,
        [
            ((5, 3), (5, 2), (8, 3), (8, 2), (8,), (8,)),
            ((2, 3, 4), (2, 3, 2), (8, 4), (8, 2), (8,), (8,)),
            ((3,), (2,), (8, 3), (8, 2), (8,), (8,)),
        ],
        torch_fn=torch_gates,
        bad=[
            ((5, 3), (5, 2), (8, 4), (8, 2), (8,), (8,)),
            ((5, 3), (4, 2), (8, 3), (8, 2), (8,), (8,)),
            ((5, 3), (5, 2), (8, 3), (7, 2), (8,), (8,)),
            ((5, 3), (5, 2), (8, 3), (8, 2), (8,), (7,)),
        ],
    ),
    OpCase(
        "lstm_gates[no bias]",
        md.lstm_gates,
        gates_reference,
        [((5, 3), (5, 2), (8, 3), (8, 2))],
        torch_fn=torch_gates,
    ),
    OpCase(
        "lstm_gates[bias_hh only]",
        lambda x, h, w_ih, w_hh, b: md.lstm_gates(x, h, w_ih, w_hh, None, b),
        lambda x, h, w_ih, w_hh, b: gates_reference(x, h, w_ih, w_hh, None, b),
        [((5, 3), (5, 2), (8, 3), (8, 2), (8,))],
        torch_fn=lambda t, x, h, w_ih, w_hh, b: torch_gates(t, x, h, w_ih, w_hh, None, b),
    ),
]

globals().update(define_tests(CASES))


def test_lstm_cell_errors_name_the_op_and_shapes():
    with pytest.raises(md.ShapeError, match=r"lstm_cell: .*\(5, 12\), \(5, 4\)"):
        md.lstm_cell(md.zeros((5, 12)), md.zeros((5, 4)))
    with pytest.raises(md.DTypeError, match="lstm_cell"):
        md.lstm_cell(md.zeros((5, 12)), md.zeros((5, 3), dtype=md.float64))
    with pytest.raises(TypeError, match="lstm_cell: c must be a Tensor"):
        md.lstm_cell(md.zeros((5, 12)), np.zeros((5, 3)))
    with pytest.raises(md.ShapeError, match=r"child_sum_cell: .*\(5, 12\), \(5, 3\)"):
        md.child_sum_cell(md.zeros((5, 12)), md.zeros((5, 3)))
    with pytest.raises(md.ShapeError, match=r"lstm_gates: .*\(5, 3\), \(5, 2\), \(8, 4\)"):
        md.lstm_gates(md.zeros((5, 3)), md.zeros((5, 2)), md.zeros((8, 4)), md.zeros((8, 2)))


def test_fused_cells_keep_saturated_gates_small():
    """Gates far below zero: the fused cells' sigmoids keep their small values (as PyTorch's
    1 / (1 + exp(-x))), in the forward and in the backward's recomputed activations."""
    rng = np.random.default_rng(0)
    gates = rng.uniform(-25.0, -15.0, size=(3, 8)).astype(np.float32)
    c = rng.standard_normal((3, 2)).astype(np.float32)
    g64 = gates.astype(np.float64)
    sig = 1.0 / (1.0 + np.exp(-g64))
    i, f, g, o = sig[:, 0:2], sig[:, 2:4], np.tanh(g64[:, 4:6]), sig[:, 6:8]
    c_want = f * c + i * g
    h_want = o * np.tanh(c_want)
    gates_t = md.tensor(gates, requires_grad=True)
    h, c_new = md.lstm_cell(gates_t, md.tensor(c))
    np.testing.assert_allclose(c_new.numpy(), c_want, rtol=1e-5)
    np.testing.assert_allclose(h.numpy(), h_want, rtol=1e-5)
    (h.sum() + c_new.sum()).backward()
    tanh_c = np.tanh(c_want)
    dc = 1.0 + o * (1.0 - tanh_c**2)
    dgates = np.concatenate(
        [dc * g * i * (1 - i), dc * c * f * (1 - f), dc * i * (1 - g**2), tanh_c * o * (1 - o)],
        axis=1,
    )
    np.testing.assert_allclose(gates_t.grad.numpy(), dgates, rtol=1e-4, atol=1e-20)
    iou = md.tensor(gates[:, :6])
    h_leaf, c_leaf = md.child_sum_cell(iou)
    want_c = sig[:, 0:2] * np.tanh(g64[:, 4:6])
    np.testing.assert_allclose(c_leaf.numpy(), want_c, rtol=1e-5)
    np.testing.assert_allclose(h_leaf.numpy(), sig[:, 2:4] * np.tanh(want_c), rtol=1e-5)


def test_lstm_cell_keeps_only_its_inputs_for_backward():
    """The point of fusing: no activation or output is saved, only the pre-activations and
    the previous cell state."""
    gates = md.randn((3, 8), seed=0, requires_grad=True)
    c = md.randn((3, 2), seed=1, requires_grad=True)
    h, c_new = md.lstm_cell(gates, c)
    node = h.grad_fn
    assert node is c_new.grad_fn
    assert node.inputs[0] is not None and node.inputs[1] is not None
    assert all(o is None for o in node.outputs)


def fused_lstm_program(length: int, hidden: int, seed: int):
    """nn.LSTMCell (the fused ops) unrolled over ``length`` steps, a loss on every h."""

    def run():
        rng = np.random.default_rng(seed)
        xs = rng.standard_normal((length, 3, 4))
        cell = md.nn.LSTMCell(4, hidden, dtype=md.float64, rng=seed)
        state, loss = None, None
        for x in xs:
            state = cell(md.tensor(x), state)
            term = md.mean(state[0] * state[0])
            loss = term if loss is None else loss + term
        loss.backward()
        return {"loss": loss, "grads": [p.grad for p in cell.parameters()]}

    return run


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_unrolled_fused_cell_matches_torch():
    """Twelve steps with a loss on every step's h: loss and parameter gradients equal
    PyTorch's LSTMCell in float64."""
    import torch

    rng = np.random.default_rng(3)
    xs = rng.standard_normal((12, 4, 3))
    cell = md.nn.LSTMCell(3, 5, dtype=md.float64, rng=0)
    ref = torch.nn.LSTMCell(3, 5, dtype=torch.float64)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(torch.tensor(getattr(cell, name).numpy()))
    state = ref_state = None
    loss = total = 0
    for x in xs:
        state = cell(md.tensor(x), state)
        ref_state = ref(torch.tensor(x), ref_state)
        loss = loss + (state[0] * state[0]).sum()
        total = total + (ref_state[0] * ref_state[0]).sum()
    loss.backward()
    total.backward()
    assert abs(loss.item() - total.item()) <= 1e-10 * abs(total.item())
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(
            getattr(cell, name).grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name
        )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(2, 8),
    st.integers(1, 4),
    st.integers(0, 3),
    heuristics(),
    deallocs(),
    budget_fractions(),
)
def test_fused_lstm_is_bit_identical_under_any_budget(
    length, hidden, seed, heuristic, dealloc, fraction
):
    check_between_minimal_and_peak(
        fused_lstm_program(length, hidden, seed), heuristic, dealloc, fraction
    )
