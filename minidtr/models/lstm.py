"""An LSTM sequence model: embedding, an LSTMCell unrolled over time, a linear head.

Unrolling in Python makes the graph as long as the sequence: each step's
state is an input to the next, and backward needs every step's gates, so
memory grows linearly with the length (the case the paper's LSTM measures).
"""

from __future__ import annotations

from .. import nn
from .. import ops as F
from ..nn.init import Rng, generator
from ..tensor import Tensor


class LSTMModel(nn.Module):
    def __init__(self, vocab: int, embed: int = 16, hidden: int = 64, rng: Rng = None):
        super().__init__()
        rng = generator(rng)
        self.embedding = nn.Embedding(vocab, embed, rng=rng)
        self.cell = nn.LSTMCell(embed, hidden, rng=rng)
        self.head = nn.Linear(hidden, vocab, rng=rng)

    def forward(self, tokens: Tensor) -> Tensor:
        """(N, T) int tokens -> (N, T, vocab) scores for the next token at each position."""
        x = self.embedding(tokens)
        state = None
        outputs = []
        for t in range(tokens.shape[1]):
            state = self.cell(x[:, t], state)
            outputs.append(state[0])
        return self.head(F.stack(outputs, axis=1))
