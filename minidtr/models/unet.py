"""U-Net (Ronneberger et al., 2015) for per-pixel classification.

The encoder applies a block of ``convs`` conv3x3-BN-ReLU (two in the paper's
U-Net) at each level and halves
the resolution with 2x2 max pooling, doubling the width; the decoder
upsamples (nearest neighbour, then a 3x3 convolution that halves the width),
concatenates the encoder's output of the same level (the skip connection) and
applies another block. A 1x1 convolution gives the class scores per pixel.
The skips keep every encoder level's output alive until the decoder reaches
it, the memory pattern that makes U-Net hard for rematerialization.
"""

from __future__ import annotations

from .. import nn
from .. import ops as F
from ..nn.init import Rng
from ..tensor import Tensor
from .build import Build


class ConvBlock(nn.Module):
    def __init__(self, b: Build, c_in: int, c_out: int, convs: int = 2):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(convs):
            layers += [
                b.conv(c_in if i == 0 else c_out, c_out, 3, padding=1, bias=False),
                b.batch_norm(c_out, relu=True),
            ]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


class Up(nn.Module):
    """Upsample 2x, conv3x3 to ``c_out`` channels, concatenate the skip, ConvBlock."""

    def __init__(self, b: Build, c_in: int, c_out: int, convs: int = 2):
        super().__init__()
        self.reduce = b.conv(c_in, c_out, 3, padding=1)
        self.block = ConvBlock(b, 2 * c_out, c_out, convs)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        up = self.reduce(F.upsample_nearest2d(x, 2))
        return self.block(F.concat([skip, up], axis=1))


class UNet(nn.Module):
    def __init__(
        self,
        in_channels: int = 1,
        classes: int = 3,
        width: int = 8,
        levels: int = 2,
        rng: Rng = None,
        device: str = "cpu",
        *,
        convs: int = 2,
    ):
        super().__init__()
        if levels < 1:
            raise ValueError(f"UNet needs at least one down/up level, got {levels}")
        if convs < 1:
            raise ValueError(f"UNet needs at least one convolution per block, got {convs}")
        b = Build.of(rng, device)
        self.levels = levels
        widths = [width * 2**i for i in range(levels + 1)]
        self.down = nn.ModuleList(
            ConvBlock(b, in_channels if i == 0 else widths[i - 1], widths[i], convs)
            for i in range(levels + 1)
        )
        self.up = nn.ModuleList(
            Up(b, widths[i + 1], widths[i], convs) for i in reversed(range(levels))
        )
        self.head = b.conv(width, classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        """(N, C, H, W) -> (N, classes, H, W) scores; H and W divisible by 2 ** levels."""
        skips = []
        h = x
        for i, block in enumerate(self.down):
            h = block(h if i == 0 else F.max_pool2d(h, 2))
            skips.append(h)
        skips.pop()
        for up in self.up:
            h = up(h, skips.pop())
        return self.head(h)
