"""Normalization layers: BatchNorm2d (running statistics as buffers) and LayerNorm."""

from __future__ import annotations

import math

from .. import ops as F
from ..ops.op import ShapeError, expect_number
from ..tensor import DEFAULT_DTYPE, Tensor, full, shape_of
from .init import layer_options
from .layers import check_input
from .module import Module


class BatchNorm2d(Module):
    """Batch normalization over (N, H, W) per channel of an NCHW input.

    Training normalizes with the batch statistics and moves the running ones
    (buffers ``running_mean``, ``running_var``) towards them by ``momentum``
    (the unbiased batch variance, as PyTorch); eval normalizes with the running
    statistics. The update is copy-on-write (``md.batch_norm`` rebinds the
    buffers), so recipes that read the old statistics still replay exactly.
    Without ``track_running_stats`` both modes use batch statistics. With ``relu``
    the layer is ``relu(batch_norm(x))``, and ``layer(x, residual=r)`` is
    ``relu(batch_norm(x) + r)`` (without ``relu``, ``batch_norm(x) + r``), each one op
    (``md.batch_norm(..., relu=True, residual=r)``).

    It keeps no count of batches: PyTorch's ``num_batches_tracked`` serves only its
    ``momentum=None`` (a cumulative average, refused here), so a PyTorch state dict's
    ``num_batches_tracked`` loads and is ignored, and PyTorch loads this one's without
    it (as a state dict from before it had one).
    """

    ignored_state = ("num_batches_tracked",)

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
        relu: bool = False,
    ):
        super().__init__()
        dtype = layer_options("BatchNorm2d", dtype, device, num_features=num_features)
        if momentum is None:
            raise ValueError(
                "BatchNorm2d: momentum=None (PyTorch's cumulative average of the batches) "
                "is not supported: give a number, such as 0.1"
            )
        self.num_features = num_features
        self.relu = relu
        self.eps = expect_number("BatchNorm2d", eps, "eps")
        self.momentum = expect_number("BatchNorm2d", momentum, "momentum")
        self.affine = affine
        self.track_running_stats = track_running_stats
        shape = (num_features,)
        self.weight = full(shape, 1.0, dtype, True, device) if affine else None
        self.bias = full(shape, 0.0, dtype, True, device) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", full(shape, 0.0, dtype, device=device))
            self.register_buffer("running_var", full(shape, 1.0, dtype, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        check_input(self, x, 1, self.num_features, "channels", ndim=(4,))
        use_batch_stats = self.training or not self.track_running_stats
        return F.batch_norm(
            x,
            self.weight,
            self.bias,
            self.running_mean,
            self.running_var,
            training=use_batch_stats,
            momentum=self.momentum,
            eps=self.eps,
            relu=self.relu,
            residual=residual,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
            + (", relu=True" if self.relu else "")
        )


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` axes, then scale and shift
    elementwise (``weight`` ones, ``bias`` zeros, shaped ``normalized_shape``)."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
    ):
        super().__init__()
        self.normalized_shape = shape_of(normalized_shape, "LayerNorm")
        dtype = layer_options("LayerNorm", dtype, device)
        self.eps = expect_number("LayerNorm", eps, "eps")
        self.elementwise_affine = elementwise_affine
        self.weight = (
            full(self.normalized_shape, 1.0, dtype, True, device) if elementwise_affine else None
        )
        self.bias = (
            full(self.normalized_shape, 0.0, dtype, True, device) if elementwise_affine else None
        )

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if not isinstance(x, Tensor):
            raise TypeError(f"{self!r}: expected a Tensor, got {type(x).__name__}")
        if x.ndim < k or x.shape[x.ndim - k :] != self.normalized_shape:
            raise ShapeError(
                f"{self!r}: expected an input whose trailing axes are "
                f"{self.normalized_shape}, got shape {x.shape}"
            )
        if k == 1:
            return F.layer_norm(x, self.weight, self.bias, eps=self.eps)
        n = math.prod(self.normalized_shape)
        flat = F.reshape(x, (*x.shape[: x.ndim - k], n))
        weight = None if self.weight is None else F.reshape(self.weight, (n,))
        bias = None if self.bias is None else F.reshape(self.bias, (n,))
        return F.reshape(F.layer_norm(flat, weight, bias, eps=self.eps), x.shape)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
