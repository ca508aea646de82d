"""DenseNet (Huang et al., 2017): every layer of a block sees all earlier outputs.

A 3x3 stem convolution, then dense blocks separated by transitions. In a
block each layer computes BN-ReLU-conv3x3 with ``growth`` output channels from
the concatenation of the block's input and every earlier layer's output, and
the block outputs the concatenation of all of them: memory grows
quadratically with the block length, which is what makes DenseNet a hard
case for rematerialization. A transition is BN-ReLU-conv1x1 (halving the
channels) and 2x2 average pooling.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import nn
from .. import ops as F
from ..nn.init import Rng
from ..tensor import Tensor
from .build import Build


class DenseLayer(nn.Module):
    def __init__(self, b: Build, c_in: int, growth: int):
        super().__init__()
        self.norm = b.batch_norm(c_in)
        self.conv = b.conv(c_in, growth, 3, padding=1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.relu(self.norm(x)))


class DenseBlock(nn.Module):
    def __init__(self, b: Build, c_in: int, layers: int, growth: int):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(b, c_in + i * growth, growth) for i in range(layers))
        self.out_channels = c_in + layers * growth

    def forward(self, x: Tensor) -> Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(F.concat(features, axis=1) if len(features) > 1 else x))
        return F.concat(features, axis=1)


class Transition(nn.Module):
    def __init__(self, b: Build, c_in: int, c_out: int):
        super().__init__()
        self.norm = b.batch_norm(c_in)
        self.conv = b.conv(c_in, c_out, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(self.conv(F.relu(self.norm(x))), 2)


class DenseNet(nn.Module):
    def __init__(
        self,
        block_layers: Sequence[int] = (4, 4, 4),
        growth: int = 8,
        in_channels: int = 1,
        classes: int = 10,
        rng: Rng = None,
        device: str = "cpu",
    ):
        super().__init__()
        b = Build.of(rng, device)
        channels = 2 * growth
        self.stem = b.conv(in_channels, channels, 3, padding=1, bias=False)
        stages: list[nn.Module] = []
        for i, layers in enumerate(block_layers):
            block = DenseBlock(b, channels, layers, growth)
            stages.append(block)
            channels = block.out_channels
            if i < len(block_layers) - 1:
                stages.append(Transition(b, channels, channels // 2))
                channels //= 2
        self.stages = nn.Sequential(*stages)
        self.norm = b.batch_norm(channels)
        self.classifier = b.linear(channels, classes)

    def forward(self, x: Tensor) -> Tensor:
        """(N, C, H, W) images -> (N, classes) logits; H and W must be divisible by
        2 ** (number of blocks - 1)."""
        h = F.relu(self.norm(self.stages(self.stem(x))))
        return self.classifier(F.global_avg_pool2d(h))
