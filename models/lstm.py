"""An LSTM predicting the next token of counting sequences, trained under a memory budget.

    python models/lstm.py --ratio 0.5 --steps 20

The model is minidtr.models.LSTMModel, the class `minidtr train lstm` trains. The cell is
unrolled in Python, one op after another: DTR needs no graph in advance, it sees each op
as it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import common

import minidtr as md
from minidtr.data import counting_sequences
from minidtr.models import LSTMModel


def main(argv: Sequence[str] | None = None) -> dict:
    args = common.parse_args(__doc__, argv, ratio=0.5, batch=256)
    md.manual_seed(args.seed)

    # Data: 2,000 sequences x[t + 1] = (x[t] + d) mod 16 from a random start and stride d;
    # inputs are 16 tokens, targets the same sequences shifted by one (N, 16) int64.
    data = counting_sequences(n=2000, length=16, vocab=16, seed=args.seed)
    batches = common.minibatches(args, len(data.train_y))

    # Model: a 16-token embedding of width 16, an LSTM cell of 32 units, a linear head.
    model = LSTMModel(16, embed=16, hidden=32, rng=args.seed)
    optimizer = md.optim.Adam(model.parameters(), lr=1e-2)

    def step() -> float:
        indices = next(batches)
        tokens, targets = md.tensor(data.train_x[indices]), md.tensor(data.train_y[indices])
        scores = model(tokens)  # (N, T, 16): scores for the next token at every position
        loss = md.cross_entropy(scores.reshape(-1, 16), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()  # drop the gradients now: they would keep old parameters alive
        return loss.item()

    # Two steps with no budget: the peak a budget ratio is a fraction of (the first step
    # also creates Adam's moments, so the second is the steady state).
    with md.Runtime(cost="flops") as unbounded:
        step(), step()
    peak = unbounded.stats()["peak_memory"]

    # The rest under the budget: activations are evicted when memory runs short and
    # recomputed when backward needs them; every loss is what it would be without.
    budget = common.budget_from(args, peak)
    with md.Runtime(
        budget=budget, heuristic=args.heuristic, max_slowdown=args.max_slowdown, cost="flops"
    ) as runtime:
        losses = [step() for _ in range(args.steps)]
    return common.report("LSTM", losses, runtime, peak, model)


if __name__ == "__main__":
    raise SystemExit(common.run(main))
