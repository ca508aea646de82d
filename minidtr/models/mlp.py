"""A multilayer perceptron: Linear + ReLU layers, then a Linear classifier."""

from __future__ import annotations

from collections.abc import Sequence

from .. import nn
from ..nn.init import Rng, generator
from ..tensor import Tensor


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: Sequence[int], classes: int, rng: Rng = None):
        super().__init__()
        rng = generator(rng)
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h, rng=rng), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, classes, rng=rng))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """(N, in_features) -> (N, classes) logits."""
        return self.layers(x)
