"""A causal Transformer predicting the next token of counting sequences, under a budget.

    python models/transformer.py --ratio 0.3 --steps 20

The model is minidtr.models.Transformer, the class `minidtr train transformer` trains.
The attention scores, a (batch, heads, T, T) tensor per layer, are the largest
activations: the first ones DTR weighs for eviction.
"""

from __future__ import annotations

from collections.abc import Sequence

import common

import minidtr as md
from minidtr.data import counting_sequences
from minidtr.models import Transformer


def main(argv: Sequence[str] | None = None) -> dict:
    args = common.parse_args(__doc__, argv, ratio=0.3, batch=64)
    md.manual_seed(args.seed)

    # Data: 2,000 sequences x[t + 1] = (x[t] + d) mod 16 from a random start and stride d;
    # inputs are 16 tokens, targets the same sequences shifted by one (N, 16) int64.
    data = counting_sequences(n=2000, length=16, vocab=16, seed=args.seed)
    batches = common.minibatches(args, len(data.train_y))

    # Model: token and position embeddings of width 16, six pre-norm layers of causal
    # 2-head attention and a GELU MLP, a linear head over the 16 tokens.
    model = Transformer(16, max_length=16, dim=16, heads=2, layers=6, rng=args.seed)
    optimizer = md.optim.Adam(model.parameters(), lr=3e-3)

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
    return common.report("Transformer", losses, runtime, peak, model)


if __name__ == "__main__":
    raise SystemExit(common.run(main))
