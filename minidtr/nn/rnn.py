"""Recurrent cells: LSTMCell, with PyTorch's parameter layout and gate order."""

from __future__ import annotations

import math
from typing import Any

from .. import ops as F
from ..ops.op import ShapeError
from ..tensor import DEFAULT_DTYPE, Tensor, zeros
from .init import Rng, generator, layer_options, parameter, uniform
from .layers import check_input
from .module import Module


class LSTMCell(Module):
    """One LSTM step: ``(h, c) = cell(x, (h, c))``.

    gates = x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh, split into
    i, f, g, o (input, forget, cell, output; weight_ih (4H, I), weight_hh
    (4H, H)); c' = sigmoid(f) * c + sigmoid(i) * tanh(g); h' = sigmoid(o) *
    tanh(c'). Two fused ops (``lstm_gates``, ``lstm_cell``): a step keeps only
    its gate pre-activations and states for backward. A missing state is zeros.
    Every parameter starts U(-1/sqrt(H), 1/sqrt(H)). Input (batch, I) with h and c
    (batch, H), or unbatched: (I,) with (H,).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
        rng: Rng = None,
    ):
        super().__init__()
        dtype = layer_options(
            "LSTMCell", dtype, device, input_size=input_size, hidden_size=hidden_size
        )
        rng = generator(rng, "LSTMCell")
        self.input_size = input_size
        self.hidden_size = hidden_size
        bound = 1.0 / math.sqrt(hidden_size) if hidden_size else 0.0
        h4 = 4 * hidden_size

        def make(shape, name):
            return parameter(uniform(shape, bound, rng), dtype, device, name=name)

        self.weight_ih = make((h4, input_size), "weight_ih")
        self.weight_hh = make((h4, hidden_size), "weight_hh")
        self.bias_ih = make((h4,), "bias_ih") if bias else None
        self.bias_hh = make((h4,), "bias_hh") if bias else None

    def forward(
        self, x: Tensor, state: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        check_input(self, x, -1, self.input_size, "features", ndim=(1, 2))
        batched = x.ndim == 2
        if state is not None:
            h, c = self._checked_state(state, x)
        if not batched:
            x = F.reshape(x, (1, self.input_size))
        shape = (x.shape[0], self.hidden_size)
        if state is None:
            h = zeros(shape, dtype=x.dtype, device=x.device)
            c = zeros(shape, dtype=x.dtype, device=x.device)
        elif not batched:
            h, c = F.reshape(h, shape), F.reshape(c, shape)
        gates = F.lstm_gates(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        h, c = F.lstm_cell(gates, c)
        if not batched:
            h, c = F.reshape(h, (self.hidden_size,)), F.reshape(c, (self.hidden_size,))
        return h, c

    def _checked_state(self, state: Any, x: Tensor) -> Any:
        """``state`` if it is (h, c), two tensors of shape (batch, hidden_size) for a
        batched ``x``, (hidden_size,) for an unbatched one (as PyTorch's); otherwise an
        error naming the layer, the shapes wanted and what was given (a TypeError when it
        is not two tensors, a ShapeError when their shapes are wrong)."""
        shape = (*x.shape[:-1], self.hidden_size)
        pair = isinstance(state, tuple | list) and len(state) == 2
        tensors = pair and all(isinstance(t, Tensor) for t in state)
        if tensors and state[0].shape == shape and state[1].shape == shape:
            return state
        if isinstance(state, Tensor):
            given = f"one tensor of shape {state.shape}"
        elif isinstance(state, tuple | list):
            parts = [str(t.shape) if isinstance(t, Tensor) else type(t).__name__ for t in state]
            given = (
                f"h {parts[0]} and c {parts[1]}"
                if pair
                else f"a {type(state).__name__} of {len(state)}: {', '.join(parts)}"
            )
        else:
            given = type(state).__name__
        raise (ShapeError if tensors else TypeError)(
            f"{self!r}: the state must be (h, c), two tensors of shape {shape} for an "
            f"input of shape {x.shape}, got {given}"
        )

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias_ih is not None}"
