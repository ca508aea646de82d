"""A U-Net segmenting rectangles and discs on noise, trained under a memory budget.

    python models/unet.py --ratio 0.4 --steps 20

The model is minidtr.models.UNet, the class `minidtr train unet` trains. Its skip
connections keep encoder activations alive until the decoder reads them: DTR may evict
them in between and recompute them when the decoder (or backward) needs them.
"""

from __future__ import annotations

from collections.abc import Sequence

import common

import minidtr as md
from minidtr.data import shapes_segmentation
from minidtr.models import UNet


def main(argv: Sequence[str] | None = None) -> dict:
    args = common.parse_args(__doc__, argv, ratio=0.4, batch=128)
    md.manual_seed(args.seed)

    # Data: 600 generated 16x16 images (N, 1, 16, 16); each pixel labelled background (0),
    # rectangle (1) or disc (2).
    data = shapes_segmentation(n=600, size=16, seed=args.seed)
    batches = common.minibatches(args, len(data.train_y))

    # Model: two levels down (blocks of four conv-BN-ReLU, 2x2 max pooling) and two up
    # (nearest upsampling, concatenation with the skip), width 4, 8, 16, a 1x1 convolution to
    # 3 class scores per pixel.
    model = UNet(in_channels=1, classes=3, width=4, levels=2, rng=args.seed, convs=4)
    optimizer = md.optim.Adam(model.parameters(), lr=1e-2)

    def step() -> float:
        indices = next(batches)
        images, masks = md.tensor(data.train_x[indices]), md.tensor(data.train_y[indices])
        scores = model(images)  # (N, 3, H, W)
        rows = scores.transpose(0, 2, 3, 1).reshape(-1, 3)  # one row of scores per pixel
        loss = md.cross_entropy(rows, masks.reshape(-1))
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
    return common.report("U-Net", losses, runtime, peak, model)


if __name__ == "__main__":
    raise SystemExit(common.run(main))
