"""A DenseNet classifying the 8x8 handwritten digits under a memory budget.

    python models/densenet.py --ratio 0.5 --steps 20

The model is minidtr.models.DenseNet, the class `minidtr train densenet` trains. Every
layer of a dense block reads the concatenation of all earlier outputs, so many saved
activations are alive at once: much for DTR to evict, and much to recompute.
"""

from __future__ import annotations

from collections.abc import Sequence

import common

import minidtr as md
from minidtr.data import load_digits
from minidtr.models import DenseNet


def main(argv: Sequence[str] | None = None) -> dict:
    args = common.parse_args(__doc__, argv, ratio=0.5, batch=128)
    md.manual_seed(args.seed)

    # Data: 1,797 digits as (N, 1, 8, 8) float32 images in [0, 1], labels 0-9.
    data = load_digits(seed=args.seed)
    batches = common.minibatches(args, len(data.train_y))

    # Model: dense blocks of 12, 6 and 4 layers, each layer adding 4 channels (the growth
    # rate), with 1x1-convolution and average-pooling transitions between them.
    model = DenseNet(block_layers=(12, 6, 4), growth=4, in_channels=1, classes=10, rng=args.seed)
    optimizer = md.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step() -> float:
        indices = next(batches)
        images, labels = md.tensor(data.train_x[indices]), md.tensor(data.train_y[indices])
        loss = md.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()  # drop the gradients now: they would keep old parameters alive
        return loss.item()

    # Two steps with no budget: the peak a budget ratio is a fraction of (the first step
    # also creates the optimizer's momentum, so the second is the steady state).
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
    return common.report("DenseNet", losses, runtime, peak, model)


if __name__ == "__main__":
    raise SystemExit(common.run(main))
