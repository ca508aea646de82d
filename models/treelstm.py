"""A Tree-LSTM evaluating ListOps expressions, trained under a memory budget.

    python models/treelstm.py --ratio 0.4 --steps 20

The model is minidtr.models.TreeLSTM, the class `minidtr train treelstm` trains. Every
expression is a tree of its own shape, so every batch builds a different graph: no plan
made before the run could fit them all, while DTR decides op by op as the graph unfolds.
"""

from __future__ import annotations

from collections.abc import Sequence

import common

import minidtr as md
from minidtr.data import generate_listops, tree_to_string
from minidtr.data.listops import VOCAB_SIZE
from minidtr.models import TreeLSTM


def main(argv: Sequence[str] | None = None) -> dict:
    args = common.parse_args(__doc__, argv, ratio=0.4, batch=64)
    md.manual_seed(args.seed)

    # Data: 2,000 generated expressions such as [MAX 3 [MIN 4 7] 2], nested at most five
    # deep (an argument is a digit with probability 0.4, else a nested expression), each
    # labelled with its value 0-9. The inputs are trees, not arrays.
    data = generate_listops(n=2000, seed=args.seed, max_depth=5, max_args=4, leaf_probability=0.4)
    print("an example:", tree_to_string(data.train_x[0]), "=", int(data.train_y[0]))
    batches = common.minibatches(args, len(data.train_y))

    # Model: child-sum Tree-LSTM cells of 32 units over 16-wide token embeddings, run up
    # the trees level by level, eight trees at a time; each root's state is classified
    # into the 10 values.
    model = TreeLSTM(VOCAB_SIZE, 10, embed=16, hidden=32, group=8, rng=args.seed)
    optimizer = md.optim.Adam(model.parameters(), lr=1e-2)

    def step() -> float:
        indices = next(batches)
        trees, values = [data.train_x[i] for i in indices], md.tensor(data.train_y[indices])
        loss = md.cross_entropy(model(trees), values)
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
    return common.report("Tree-LSTM", losses, runtime, peak, model)


if __name__ == "__main__":
    raise SystemExit(common.run(main))
