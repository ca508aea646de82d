"""ResNet-32 classifying the 8x8 handwritten digits, trained under a memory budget.

    python models/resnet.py --ratio 0.3 --steps 20
    python models/resnet.py --budget 4000000 --heuristic lru

The model is minidtr.models.ResNet, the class `minidtr train resnet` trains.
"""

from __future__ import annotations

from collections.abc import Sequence

import common

import minidtr as md
from minidtr.data import load_digits
from minidtr.models import ResNet


def main(argv: Sequence[str] | None = None) -> dict:
    args = common.parse_args(__doc__, argv, ratio=0.3, batch=256)
    md.manual_seed(args.seed)

    # Data: 1,797 digits as (N, 1, 8, 8) float32 images in [0, 1], labels 0-9.
    data = load_digits(seed=args.seed)
    batches = common.minibatches(args, len(data.train_y))

    # Model: depth 6n + 2 = 32, three stages of five basic blocks (4, 8, 16 channels).
    model = ResNet(depth=32, width=4, in_channels=1, classes=10, rng=args.seed)
    # lr 0.02: faster, and batch norm's running statistics (used at eval) lag the weights
    optimizer = md.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

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
    return common.report("ResNet-32", losses, runtime, peak, model)


if __name__ == "__main__":
    raise SystemExit(common.run(main))
