"""Layers with parameters (Linear, Conv2d, Embedding) and the stateless ones (activations,
pooling, Flatten, Dropout, losses): thin modules over the functional ops."""

from __future__ import annotations

import math
import numbers

from .. import ops as F
from ..ops.op import ShapeError
from ..ops.random import next_seed
from ..ops.window import as_pair
from ..tensor import DEFAULT_DTYPE, Tensor
from .init import Rng, bias_uniform, generator, kaiming_uniform, layer_options, normal, parameter
from .module import Module


def check_input(
    module: Module, x: Tensor, axis: int, size: int, what: str, ndim: tuple[int, ...] | None = None
) -> None:
    """Raise a ShapeError naming the module unless ``x`` has ``size`` entries along ``axis``
    (and one of the numbers of dimensions in ``ndim``, when given)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{module!r}: expected a Tensor, got {type(x).__name__}")
    dims_ok = x.ndim >= 1 if ndim is None else x.ndim in ndim
    if not dims_ok or x.shape[axis] != size:
        dims = "an" if ndim is None else "a " + " or ".join(str(n) for n in ndim) + "-d"
        raise ShapeError(
            f"{module!r}: expected {dims} input with {size} {what} on axis "
            f"{axis}, got shape {x.shape}"
        )


def pair(value: int | tuple[int, int], where: str, name: str, least: int) -> tuple[int, int]:
    """An int or a pair of ints >= ``least`` as a pair, checked when the layer is made
    (an error naming the layer and the argument, not NumPy's at the first forward)."""
    result = as_pair(value, name, where)
    if min(result) < least:
        raise ValueError(f"{where}: {name} must be >= {least}, got {value!r}")
    return result


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features), over the last axis."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
        rng: Rng = None,
    ):
        super().__init__()
        dtype = layer_options(
            "Linear", dtype, device, in_features=in_features, out_features=out_features
        )
        rng = generator(rng, "Linear")
        self.in_features = in_features
        self.out_features = out_features
        shape = (out_features, in_features)
        self.weight = parameter(kaiming_uniform(shape, rng=rng), dtype, device, name="weight")
        self.bias = (
            parameter(bias_uniform((out_features,), in_features, rng), dtype, device, name="bias")
            if bias
            else None
        )

    def forward(self, x: Tensor) -> Tensor:
        check_input(self, x, -1, self.in_features, "features")
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Conv2d(Module):
    """2-D convolution over NCHW input, weight (out, in, kh, kw) (``md.conv2d``)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
        rng: Rng = None,
    ):
        super().__init__()
        dtype = layer_options(
            "Conv2d", dtype, device, in_channels=in_channels, out_channels=out_channels
        )
        rng = generator(rng, "Conv2d")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = pair(kernel_size, "Conv2d", "kernel_size", 1)
        pair(stride, "Conv2d", "stride", 1)
        pair(padding, "Conv2d", "padding", 0)
        self.stride = stride
        self.padding = padding
        shape = (out_channels, in_channels, *self.kernel_size)
        self.weight = parameter(kaiming_uniform(shape, rng=rng), dtype, device, name="weight")
        fan_in = in_channels * math.prod(self.kernel_size)
        self.bias = (
            parameter(bias_uniform((out_channels,), fan_in, rng), dtype, device, name="bias")
            if bias
            else None
        )

    def forward(self, x: Tensor) -> Tensor:
        check_input(self, x, 1, self.in_channels, "channels", ndim=(4,))
        return F.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}"
        )


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by integer indices."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
        rng: Rng = None,
    ):
        super().__init__()
        dtype = layer_options(
            "Embedding", dtype, device, num_embeddings=num_embeddings, embedding_dim=embedding_dim
        )
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        shape = (num_embeddings, embedding_dim)
        rng = generator(rng, "Embedding")
        self.weight = parameter(normal(shape, 1.0, rng), dtype, device, name="weight")

    def forward(self, indices: Tensor) -> Tensor:
        if not isinstance(indices, Tensor) or indices.dtype.kind not in "iu":
            kind = indices.dtype if isinstance(indices, Tensor) else type(indices).__name__
            raise TypeError(f"{self!r}: expected a Tensor of integer indices, got {kind}")
        return F.embedding(self.weight, indices)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Dropout(Module):
    """Zero each element with probability ``p`` in training (scaling the rest by 1/(1-p));
    the identity in eval mode. Each call draws its mask's seed from ``rng`` (default:
    minidtr's default generator), and the seed stays in the recipe, so a recomputed
    mask is the same mask."""

    def __init__(self, p: float = 0.5, rng: Rng = None):
        super().__init__()
        if not isinstance(p, numbers.Real):
            raise TypeError(f"Dropout: p must be a number, got {type(p).__name__} {p!r}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p
        self.rng = None if rng is None else generator(rng, "Dropout")

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        return F.dropout(x, self.p, training=True, seed=next_seed(self.rng))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    """``inplace`` is taken for PyTorch code's sake and changes nothing: no op writes
    into its input here (a recipe that read it must recompute the same bits), so the
    input keeps its value either way."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Flatten(Module):
    """Merge the axes from ``start_axis`` on (default 1: keep the batch axis)."""

    def __init__(self, start_axis: int = 1):
        super().__init__()
        self.start_axis = start_axis

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_axis)

    def extra_repr(self) -> str:
        return f"start_axis={self.start_axis}"


class Pool2d(Module):
    """A pooling layer's window (``MaxPool2d``, ``AvgPool2d``), checked when made."""

    def __init__(self, kernel_size: int | tuple[int, int], stride=None, padding=0):
        super().__init__()
        where = type(self).__name__
        pair(kernel_size, where, "kernel_size", 1)
        if stride is not None:
            pair(stride, where, "stride", 1)
        pair(padding, where, "padding", 0)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(Pool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(Pool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)


def mean_reduction(where: str, reduction: str) -> str:
    """A loss layer's ``reduction``: its op averages, so only PyTorch's default, "mean"."""
    if reduction != "mean":
        raise ValueError(
            f"{where}: reduction must be 'mean' (the op averages; 'sum' and 'none' are not "
            f"supported), got {reduction!r}"
        )
    return reduction


class CrossEntropyLoss(Module):
    """Mean cross-entropy of logits (batch, classes) against integer targets (batch,)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = mean_reduction("CrossEntropyLoss", reduction)

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(logits, targets)


class MSELoss(Module):
    """Mean squared error."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = mean_reduction("MSELoss", reduction)

    def forward(self, prediction: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(prediction, target)


__all__ = [
    "AvgPool2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "Identity",
    "Linear",
    "MSELoss",
    "MaxPool2d",
    "ReLU",
    "Sigmoid",
    "Tanh",
]
