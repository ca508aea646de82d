"""``Build``: the layer factory the models share, carrying the init generator and the device."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import nn
from ..nn.init import Rng, generator


@dataclass
class Build:
    """Layers drawn from one generator (so a model's initialization follows its seed) and
    placed on one device."""

    rng: np.random.Generator
    device: str = "cpu"

    @classmethod
    def of(cls, rng: Rng, device: str) -> Build:
        return cls(generator(rng), device)

    def linear(self, n_in: int, n_out: int, bias: bool = True) -> nn.Linear:
        return nn.Linear(n_in, n_out, bias=bias, rng=self.rng, device=self.device)

    def conv(
        self,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
    ) -> nn.Conv2d:
        return nn.Conv2d(
            c_in,
            c_out,
            kernel,
            stride=stride,
            padding=padding,
            bias=bias,
            rng=self.rng,
            device=self.device,
        )

    def batch_norm(self, channels: int, relu: bool = False) -> nn.BatchNorm2d:
        return nn.BatchNorm2d(channels, device=self.device, relu=relu)

    def layer_norm(self, dim: int) -> nn.LayerNorm:
        return nn.LayerNorm(dim, device=self.device)

    def embedding(self, n: int, dim: int) -> nn.Embedding:
        return nn.Embedding(n, dim, rng=self.rng, device=self.device)

    def lstm_cell(self, n_in: int, hidden: int) -> nn.LSTMCell:
        return nn.LSTMCell(n_in, hidden, rng=self.rng, device=self.device)
