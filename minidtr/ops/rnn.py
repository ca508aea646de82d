"""The LSTM's two fused ops: ``lstm_gates`` (both gate linears as one op) and ``lstm_cell``
(the four gate nonlinearities and the cell update as one op, with a fused backward).

Written as separate ops, one LSTM step makes two (batch, 4H) linear outputs, their sum
and four activations, and only the activations are kept for backward: the linears and
their sum are dead once the gates are computed, so rebuilding an evicted activation
under a budget needs three matrix-sized ops and the memory of all three. Fused, a step
keeps one (batch, 4H) value, the gate pre-activations, whose rebuild is one product of
the step's input and hidden state; ``lstm_cell``'s backward recomputes the activations
from it (elementwise, cheap), as cuDNN's and PyTorch's fused LSTM cells do.
"""

from __future__ import annotations

import math

from ..runtime.storage import Cell
from ..tensor import Tensor
from .activation import sigmoid_values
from .linalg import LinearWeightGrad
from .op import Op, apply, expect_tensor, float_dtype, numel

# cost-model flops per hidden element, the same per-element rates as the unfused ops
# (a sigmoid or tanh 8, a multiply or add 1): three sigmoids, two tanh and the update
CELL_FLOPS = 45
# the backward recomputes the activations and tanh(c') (40 + 8), then the products
CELL_GRAD_FLOPS = 66
# the child-sum cell: two sigmoids and two tanh, the update; its backward likewise
CHILD_SUM_FLOPS = 35
CHILD_SUM_GRAD_FLOPS = 52


def cell_bytes(cell: Cell, times: float) -> int:
    """``times`` the bytes of ``cell``'s value, rounded up."""
    return math.ceil(times * math.prod(cell.shape) * cell.dtype.itemsize)


class LSTMCell(Op):
    """(gates (..., 4H), c (..., H)) -> (h', c'): c' = sigmoid(f) * c + sigmoid(i) * tanh(g),
    h' = sigmoid(o) * tanh(c'). Keeps its two inputs for backward, nothing else."""

    name = "lstm_cell"
    n_outputs = 2
    retain_inputs = (0, 1)

    def infer(self, gates: Cell, c: Cell):
        dtype = float_dtype(self, gates, c)
        if not c.shape or gates.shape[:-1] != c.shape[:-1] or gates.shape[-1] != 4 * c.shape[-1]:
            raise self.error(
                "gates must have shape (..., 4H) for a cell state (..., H), the same leading "
                "dimensions",
                gates,
                c,
            )
        return [(c.shape, dtype), (c.shape, dtype)]

    def forward(self, xp, gates, c):
        h = c.shape[-1]  # the gates one at a time: two of them alive at once
        f = sigmoid_values(xp, gates[..., h : 2 * h])
        c_new = f * c
        del f
        i = sigmoid_values(xp, gates[..., :h])
        g = xp.tanh(gates[..., 2 * h : 3 * h])
        i *= g
        c_new += i
        del i, g
        h_new = xp.tanh(c_new)
        h_new *= sigmoid_values(xp, gates[..., 3 * h :])
        return h_new, c_new

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float(CELL_FLOPS * numel(out_metas[0])), nbytes

    def workspace(self, gates: Cell, c: Cell) -> int:
        """Two activations, of the cell's size, at a time."""
        return cell_bytes(c, 2.0)

    def backward(self, ctx, grads):
        dh, dc = grads
        if dh is None and dc is None:
            return None, None
        given = tuple(g for g in (dh, dc) if g is not None)
        grad_op = LSTMCellGrad(dh is not None, dc is not None, ctx.needs_grad[1])
        out = apply(grad_op, ctx.inputs[0], ctx.inputs[1], *given)
        if not ctx.needs_grad[1]:
            return (out if ctx.needs_grad[0] else None), None
        return (out[0] if ctx.needs_grad[0] else None), out[1]


def _through_output_gate(xp, dh, dc, o, c_new, do, scratch):
    """The gradients through ``h = o * tanh(c_new)`` shared by both cells: writes the
    output gate's pre-activation gradient into ``do`` and returns the cell state's
    (``dc`` added), a new array. ``c_new`` (a scratch array, overwritten) is needed only
    where ``dh`` is given; ``scratch`` is an output slice not yet written."""
    if dh is None:
        do[...] = 0.0
        return dc.copy()
    tanh_c = xp.tanh(c_new, out=c_new)
    xp.multiply(dh, tanh_c, out=do)
    xp.subtract(1.0, o, out=scratch)  # do *= o * (1 - o)
    scratch *= o
    do *= scratch
    total = dh * o
    xp.multiply(tanh_c, tanh_c, out=tanh_c)  # total *= 1 - tanh_c^2
    xp.subtract(1.0, tanh_c, out=tanh_c)
    total *= tanh_c
    if dc is not None:
        total += dc
    return total


def _times_sigmoid_slope(xp, out, s, scratch) -> None:
    """out *= s * (1 - s), through ``scratch``."""
    xp.subtract(1.0, s, out=scratch)
    scratch *= s
    out *= scratch


def _times_tanh_slope(xp, out, t, scratch) -> None:
    """out *= 1 - t * t, through ``scratch``."""
    xp.multiply(t, t, out=scratch)
    xp.subtract(1.0, scratch, out=scratch)
    out *= scratch


class LSTMCellGrad(Op):
    """(dgates, dc) of ``lstm_cell`` from its inputs and its outputs' gradients (either
    may be absent), recomputing the activations from the pre-activations:
    dc' = dc + dh * o * (1 - tanh(c')^2); di = dc' * g * i(1 - i), df = dc' * c * f(1 - f),
    dg = dc' * i * (1 - g^2), do = dh * tanh(c') * o(1 - o); dc_prev = dc' * f."""

    name = "lstm_cell_grad"
    differentiable = False

    def __init__(self, has_dh: bool, has_dc: bool, wants_dc: bool):
        self.has_dh = has_dh
        self.has_dc = has_dc
        self.wants_dc = wants_dc
        self.n_outputs = 2 if wants_dc else 1

    def infer(self, gates: Cell, c: Cell, *grads: Cell):
        metas = [(gates.shape, gates.dtype)]
        return metas + [(c.shape, c.dtype)] if self.wants_dc else metas

    def forward(self, xp, gates, c, *grads):
        """Gate-major, (4, rows, H): each gate's values contiguous, where the (..., 4H)
        slices are strided (a pass over a (256, 32) slice of a (256, 128) array costs NumPy
        three times one over 8,192 contiguous values). The activations go into one
        gate-major copy of the pre-activations; the gradients into the output's memory
        seen gate-major, interleaved at the end through the activations' buffer. The same
        operations on each element as over the slices, so the same floats."""
        dh = grads[0] if self.has_dh else None
        dc = grads[-1] if self.has_dc else None
        h = c.shape[-1]
        rows = math.prod(c.shape[:-1])
        acts = xp.empty((4, rows, h), dtype=gates.dtype)
        acts[...] = gates.reshape(rows, 4, h).transpose(1, 0, 2)
        i, f, g, o = acts
        for gate in (i, f, o):
            sigmoid_values(xp, gate, out=gate)
        xp.tanh(g, out=g)
        c = c.reshape(rows, h)
        dgates = xp.empty(gates.shape, dtype=gates.dtype)
        di, df, dg, do = dgates.reshape(4, rows, h)  # scratch until the interleave
        c_new = None
        if dh is not None:  # the output's gates serve as scratch until they are written
            dh = dh.reshape(rows, h)
            c_new = f * c
            xp.multiply(i, g, out=di)
            c_new += di
        if dc is not None:
            dc = dc.reshape(rows, h)
        total = _through_output_gate(xp, dh, dc, o, c_new, do, df)
        del c_new
        xp.multiply(total, g, out=di)
        _times_sigmoid_slope(xp, di, i, df)
        xp.multiply(total, i, out=dg)
        _times_tanh_slope(xp, dg, g, df)
        xp.multiply(total, c, out=df)
        _times_sigmoid_slope(xp, df, f, i)  # i is no longer needed: its buffer serves
        if self.wants_dc:
            total *= f
        acts[...] = dgates.reshape(4, rows, h)
        dgates.reshape(rows, 4, h)[...] = acts.transpose(1, 0, 2)
        if not self.wants_dc:
            return dgates
        return dgates, total.reshape(gates.shape[:-1] + (h,))

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float(CELL_GRAD_FLOPS * numel(in_metas[1])), nbytes

    def workspace(self, gates: Cell, c: Cell, *grads: Cell) -> int:
        """The four activations, the new cell state and the total gradient (the cell's
        size each; the output's slices serve as the rest of its scratch)."""
        return cell_bytes(c, 6.0)


class ChildSumCell(Op):
    """The child-sum Tree-LSTM's cell (Tai et al., 2015) from iou (..., 3H) and c_in
    (..., H), the children's forget-gated cell states summed (absent at a leaf):
    c' = sigmoid(i) * tanh(u) + c_in, h' = sigmoid(o) * tanh(c'). Keeps its inputs."""

    name = "child_sum_cell"
    n_outputs = 2

    def __init__(self, has_c_in: bool):
        self.has_c_in = has_c_in
        self.retain_inputs = (0, 1) if has_c_in else (0,)

    def infer(self, iou: Cell, *c_in: Cell):
        dtype = float_dtype(self, iou, *c_in)
        hidden = iou.shape[-1] // 3 if iou.shape else 0
        shape = (*iou.shape[:-1], hidden)
        if not iou.shape or iou.shape[-1] != 3 * hidden or (c_in and c_in[0].shape != shape):
            raise self.error(
                "iou must have shape (..., 3H) and c_in (..., H), the same leading dimensions",
                iou,
                *c_in,
            )
        return [(shape, dtype), (shape, dtype)]

    def forward(self, xp, iou, *c_in):
        h = iou.shape[-1] // 3  # the gates one at a time: two of them alive at once
        i = sigmoid_values(xp, iou[..., :h])
        c_new = xp.tanh(iou[..., 2 * h :])
        c_new *= i
        del i
        if c_in:
            c_new += c_in[0]
        h_new = xp.tanh(c_new)
        h_new *= sigmoid_values(xp, iou[..., h : 2 * h])
        return h_new, c_new

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float(CHILD_SUM_FLOPS * numel(out_metas[0])), nbytes

    def workspace(self, iou: Cell, *c_in: Cell) -> int:
        """Two activations, of the cell's size (a third of iou's), at a time."""
        return cell_bytes(iou, 2 / 3)

    def backward(self, ctx, grads):
        dh, dc = grads
        wants_dc = self.has_c_in and ctx.needs_grad[1]
        if dh is None and dc is None:
            return (None, None) if self.has_c_in else None
        given = tuple(g for g in (dh, dc) if g is not None)
        grad_op = ChildSumCellGrad(dh is not None, dc is not None, self.has_c_in, wants_dc)
        out = apply(grad_op, *ctx.inputs, *given)
        if not self.has_c_in:
            return out if ctx.needs_grad[0] else None
        if not wants_dc:
            return (out if ctx.needs_grad[0] else None), None
        return (out[0] if ctx.needs_grad[0] else None), out[1]


def _child_sum_activations(xp, iou):
    h = iou.shape[-1] // 3
    i = sigmoid_values(xp, iou[..., :h])
    o = sigmoid_values(xp, iou[..., h : 2 * h])
    u = xp.tanh(iou[..., 2 * h :])
    return i, o, u


class ChildSumCellGrad(Op):
    """(diou, dc_in) of ``child_sum_cell``: dc' = dc + dh * o * (1 - tanh(c')^2);
    di = dc' * u * i(1 - i), do = dh * tanh(c') * o(1 - o), du = dc' * i * (1 - u^2);
    dc_in = dc'."""

    name = "child_sum_cell_grad"
    differentiable = False

    def __init__(self, has_dh: bool, has_dc: bool, has_c_in: bool, wants_dc: bool):
        self.has_dh = has_dh
        self.has_dc = has_dc
        self.has_c_in = has_c_in
        self.wants_dc = wants_dc
        self.n_outputs = 2 if wants_dc else 1

    def infer(self, iou: Cell, *rest: Cell):
        shape = (*iou.shape[:-1], iou.shape[-1] // 3)
        metas = [(iou.shape, iou.dtype)]
        return metas + [(shape, iou.dtype)] if self.wants_dc else metas

    def forward(self, xp, iou, *rest):
        c_in = rest[0] if self.has_c_in else None
        grads = rest[1:] if self.has_c_in else rest
        dh = grads[0] if self.has_dh else None
        dc = grads[-1] if self.has_dc else None
        i, o, u = _child_sum_activations(xp, iou)
        h = iou.shape[-1] // 3
        diou = xp.empty_like(iou)
        di, do, du = diou[..., :h], diou[..., h : 2 * h], diou[..., 2 * h :]
        c_new = None
        if dh is not None:
            c_new = i * u
            if c_in is not None:
                c_new += c_in
        total = _through_output_gate(xp, dh, dc, o, c_new, do, du)
        del c_new
        xp.multiply(total, u, out=di)
        _times_sigmoid_slope(xp, di, i, du)  # du's slice serves until it is written
        xp.multiply(total, i, out=du)
        _times_tanh_slope(xp, du, u, o)  # o is no longer needed: its buffer serves
        return (diou, total) if self.wants_dc else diou

    def cost(self, in_metas, out_metas):
        _, nbytes = super().cost(in_metas, out_metas)
        return float(CHILD_SUM_GRAD_FLOPS * numel(in_metas[0]) / 3), nbytes

    def workspace(self, iou: Cell, *rest: Cell) -> int:
        """The three activations, the new cell state and the total gradient, of the cell's
        size each (a third of iou's)."""
        return cell_bytes(iou, 5 / 3)


class LSTMGates(Op):
    """``x @ weight_ih.T + h @ weight_hh.T (+ bias_ih) (+ bias_hh)``: the LSTM's two gate
    linears and their sum as one op, one (..., 4H) output."""

    name = "lstm_gates"
    retain_inputs = (0, 1, 2, 3)

    def __init__(self, has_bias_ih: bool, has_bias_hh: bool):
        self.has_bias_ih = has_bias_ih
        self.has_bias_hh = has_bias_hh

    def infer(self, x: Cell, h: Cell, w_ih: Cell, w_hh: Cell, *biases: Cell):
        cells = (x, h, w_ih, w_hh, *biases)
        dtype = float_dtype(self, *cells)
        if len(w_ih.shape) != 2 or len(w_hh.shape) != 2 or w_ih.shape[0] != w_hh.shape[0]:
            raise self.error(
                "weight_ih and weight_hh must be (G, input) and (G, hidden) with one G", *cells
            )
        if not x.shape or x.shape[-1] != w_ih.shape[1]:
            raise self.error("x's last axis must match weight_ih's second", *cells)
        if h.shape[:-1] != x.shape[:-1] or h.shape[-1] != w_hh.shape[1]:
            raise self.error(
                "h must have x's leading dimensions and weight_hh's second as its last", *cells
            )
        for b in biases:
            if b.shape != (w_ih.shape[0],):
                raise self.error(f"biases must have shape ({w_ih.shape[0]},)", *cells)
        return [((*x.shape[:-1], w_ih.shape[0]), dtype)]

    def forward(self, xp, x, h, w_ih, w_hh, *biases):
        y = xp.matmul(x, w_ih.T)
        y += xp.matmul(h, w_hh.T)
        for b in biases:
            y += b
        return y

    def workspace(self, x: Cell, h: Cell, w_ih: Cell, *rest: Cell) -> int:
        """The second product, of the output's size."""
        return math.prod(x.shape[:-1]) * w_ih.shape[0] * x.dtype.itemsize

    def cost(self, in_metas, out_metas):
        (x_shape, dtype), (h_shape, _), (w_shape, _), *_ = in_metas
        flops = 2.0 * (math.prod(x_shape) + math.prod(h_shape)) * w_shape[0]
        nbytes = sum(math.prod(s) for s, _ in (*in_metas, *out_metas)) * dtype.itemsize
        return flops, float(nbytes)

    def backward(self, ctx, g):
        from .linalg import matmul
        from .reduce import sum as reduce_sum

        x, h, w_ih, w_hh = ctx.inputs[:4]
        need = ctx.needs_grad
        grads = [
            matmul(g, w_ih) if need[0] else None,
            matmul(g, w_hh) if need[1] else None,
            apply(LinearWeightGrad(), g, x) if need[2] else None,
            apply(LinearWeightGrad(), g, h) if need[3] else None,
        ]
        n_bias = len(ctx.in_shapes) - 4
        if n_bias:
            axes = tuple(range(g.ndim - 1))
            db = reduce_sum(g, axis=axes) if axes else g
            grads += [db if need[4 + k] else None for k in range(n_bias)]
        return tuple(grads)


def lstm_gates(
    x: Tensor,
    h: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> Tensor:
    """The LSTM's gate pre-activations ``linear(x, weight_ih, bias_ih) + linear(h, weight_hh,
    bias_hh)`` as one op (weights (4H, input) and (4H, hidden), PyTorch's layout)."""
    tensors = [expect_tensor("lstm_gates", v, w) for v, w in ((x, "x"), (h, "h"))]
    tensors += [expect_tensor("lstm_gates", weight_ih, "weight_ih")]
    tensors += [expect_tensor("lstm_gates", weight_hh, "weight_hh")]
    if bias_ih is not None:
        tensors.append(expect_tensor("lstm_gates", bias_ih, "bias_ih"))
    if bias_hh is not None:
        tensors.append(expect_tensor("lstm_gates", bias_hh, "bias_hh"))
    return apply(LSTMGates(bias_ih is not None, bias_hh is not None), *tensors)


def lstm_cell(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """One LSTM cell update from the gate pre-activations (..., 4H), split i, f, g, o in
    PyTorch's order, and the cell state (..., H): returns (h', c') with
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g) and h' = sigmoid(o) * tanh(c')."""
    expect_tensor("lstm_cell", gates, "gates")
    expect_tensor("lstm_cell", c, "c")
    return apply(LSTMCell(), gates, c)


def child_sum_cell(iou: Tensor, c_in: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The child-sum Tree-LSTM's cell update from the (..., 3H) pre-activations, split
    i, o, u, and ``c_in`` (..., H), the sum of the children's forget-gated cell states
    (None at a leaf, which has no children): returns (h', c') with
    c' = sigmoid(i) * tanh(u) + c_in and h' = sigmoid(o) * tanh(c')."""
    expect_tensor("child_sum_cell", iou, "iou")
    if c_in is None:
        return apply(ChildSumCell(False), iou)
    expect_tensor("child_sum_cell", c_in, "c_in")
    return apply(ChildSumCell(True), iou, c_in)
