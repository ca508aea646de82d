"""An LSTM sequence model: embedding, an LSTMCell unrolled over time, a linear head.

Unrolling in Python makes the graph as long as the sequence: each step's
state is an input to the next, and backward needs every step's gates, so
memory grows linearly with the length (the case the paper's LSTM measures).
Tokens are embedded and scored one step at a time, and only the (small) scores
are stacked: embedding the whole sequence at once would make backward sum a
full-size gradient per step, and stacking the hidden states would make one op
hold all of them twice, both large working sets for a single op.
"""

from __future__ import annotations

from .. import nn
from .. import ops as F
from ..nn.init import Rng
from ..tensor import Tensor
from .build import Build


class LSTMModel(nn.Module):
    def __init__(
        self,
        vocab: int,
        embed: int = 16,
        hidden: int = 64,
        rng: Rng = None,
        device: str = "cpu",
    ):
        super().__init__()
        b = Build.of(rng, device)
        self.embedding = b.embedding(vocab, embed)
        self.cell = b.lstm_cell(embed, hidden)
        self.head = b.linear(hidden, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        """(N, T) int tokens -> (N, T, vocab) scores for the next token at each position."""
        state = None
        scores = []
        for t in range(tokens.shape[1]):
            state = self.cell(self.embedding(tokens[:, t]), state)
            scores.append(self.head(state[0]))
        return F.stack(scores, axis=1)
