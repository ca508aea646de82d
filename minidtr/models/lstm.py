"""An LSTM sequence model: embedding, an LSTMCell unrolled over time, a linear head.

Unrolling in Python makes the graph as long as the sequence: each step's
state is an input to the next, and backward needs every step's gates, so
memory grows linearly with the length (the case the paper's LSTM measures).
Tokens are embedded and scored one step at a time: embedding the whole
sequence at once would make backward sum a full-size gradient per step. The
training loss (``loss``) is a cross-entropy per step, so no op holds every
step's scores; ``forward`` stacks the (small) scores for evaluation.
"""

from __future__ import annotations

from collections.abc import Iterator

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

    def step_scores(self, tokens: Tensor) -> Iterator[Tensor]:
        """(N, T) int tokens -> each step's (N, vocab) scores for the next token, in order."""
        state = None
        for t in range(tokens.shape[1]):
            state = self.cell(self.embedding(tokens[:, t]), state)
            yield self.head(state[0])

    def forward(self, tokens: Tensor) -> Tensor:
        """(N, T) int tokens -> (N, T, vocab) scores for the next token at each position."""
        return F.stack(list(self.step_scores(tokens)), axis=1)

    def loss(self, tokens: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy over every position, (N * T,) targets in (N, T) row order,
        taken step by step: each step's scores go into that step's cross-entropy, whose
        backward runs when the backward reaches the step, instead of one loss over the
        stacked scores, whose gradient is cut into T slices at the start of the backward."""
        n, length = tokens.shape
        by_step = F.reshape(targets, (n, length))
        total = None
        for t, scores in enumerate(self.step_scores(tokens)):
            term = F.cross_entropy(scores, by_step[:, t])
            total = term if total is None else total + term
        return total * (1.0 / length)
