"""A multilayer perceptron classifying the 8x8 handwritten digits under a memory budget.

    python models/mlp.py --ratio 0.3 --steps 20

The model is minidtr.models.MLP, the class `minidtr train mlp` trains: deep and narrow,
with every training digit in each batch, so that its input batch, parameters and Adam
state (constants, never evicted) are a small part of the peak: see docs/models.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import common

import minidtr as md
from minidtr.data import load_digits
from minidtr.models import MLP


def main(argv: Sequence[str] | None = None) -> dict:
    args = common.parse_args(__doc__, argv, ratio=0.3, batch=1438)
    md.manual_seed(args.seed)

    # Data: 1,797 digits; each 8x8 image flattened to 64 features in [0, 1], labels 0-9.
    data = load_digits(seed=args.seed)
    features = data.train_x.reshape(len(data.train_x), 64)
    batches = common.minibatches(args, len(data.train_y))

    # Model: 64 -> 48 -> ... -> 48 (24 layers) -> 10; each hidden layer is Linear, LayerNorm,
    # ReLU, and adds its input back where the widths agree (what lets so deep a stack learn).
    model = MLP(64, (48,) * 24, 10, rng=args.seed, residual=True)
    optimizer = md.optim.Adam(model.parameters(), lr=3e-3)

    def step() -> float:
        indices = next(batches)
        x, labels = md.tensor(features[indices]), md.tensor(data.train_y[indices])
        loss = md.cross_entropy(model(x), labels)
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
    return common.report("MLP", losses, runtime, peak, model)


if __name__ == "__main__":
    raise SystemExit(common.run(main))
