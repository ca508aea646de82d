"""A multilayer perceptron: Linear + ReLU layers, then a Linear classifier."""

from __future__ import annotations

from collections.abc import Sequence

from .. import nn
from ..nn.init import Rng
from ..tensor import Tensor
from .build import Build


class MLP(nn.Module):
    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int],
        classes: int,
        rng: Rng = None,
        device: str = "cpu",
    ):
        super().__init__()
        b = Build.of(rng, device)
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [b.linear(width, h), nn.ReLU()]
            width = h
        layers.append(b.linear(width, classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """(N, in_features) -> (N, classes) logits."""
        return self.layers(x)
