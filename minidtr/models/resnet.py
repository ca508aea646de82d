"""CIFAR-style ResNet (He et al., 2016, section 4.2): depth 6n + 2.

A 3x3 convolution, then three stages of n basic blocks of widths w, 2w, 4w
(the second and third halve the resolution in their first block, with a 1x1
strided convolution on the shortcut), global average pooling and a linear
classifier. Every convolution is followed by batch normalization. ResNet-32
is n = 5.
"""

from __future__ import annotations

from .. import nn
from .. import ops as F
from ..nn.init import Rng
from ..tensor import Tensor
from .build import Build


def conv_bn(
    b: Build, c_in: int, c_out: int, kernel: int, stride: int, relu: bool = False
) -> nn.Sequential:
    """A convolution and its batch norm (with ``relu``, the ReLU fused into the norm)."""
    return nn.Sequential(
        b.conv(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False),
        b.batch_norm(c_out, relu=relu),
    )


class BasicBlock(nn.Module):
    """relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)), with each ReLU (and the sum)
    fused into the batch norm before it."""

    def __init__(self, b: Build, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.first = conv_bn(b, c_in, c_out, 3, stride, relu=True)
        self.second = b.conv(c_out, c_out, 3, padding=1, bias=False)
        self.second_norm = b.batch_norm(c_out, relu=True)
        self.shortcut = (
            conv_bn(b, c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        h = self.second(self.first(x))
        return self.second_norm(h, residual=self.shortcut(x))


class ResNet(nn.Module):
    def __init__(
        self,
        depth: int = 20,
        width: int = 16,
        in_channels: int = 3,
        classes: int = 10,
        rng: Rng = None,
        device: str = "cpu",
    ):
        super().__init__()
        if depth < 8 or (depth - 2) % 6 != 0:
            raise ValueError(
                f"ResNet depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, ...), got {depth}"
            )
        b = Build.of(rng, device)
        n = (depth - 2) // 6
        self.depth = depth
        self.stem = conv_bn(b, in_channels, width, 3, 1, relu=True)
        blocks: list[nn.Module] = []
        c_in = width
        for stage, c_out in enumerate((width, 2 * width, 4 * width)):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(BasicBlock(b, c_in, c_out, stride))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.classifier = b.linear(c_in, classes)

    def forward(self, x: Tensor) -> Tensor:
        """(N, C, H, W) images -> (N, classes) logits."""
        h = self.blocks(self.stem(x))
        return self.classifier(F.global_avg_pool2d(h))
