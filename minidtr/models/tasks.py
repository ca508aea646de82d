"""Each model paired with its dataset, loss and metric, at three sizes.

A ``Task`` holds a built model, its data split, an optimizer factory and the
two functions that connect them: ``inputs`` turns raw examples into what the
model takes, and every model's output is reshaped to rows of class scores, so
that the loss is always ``cross_entropy(rows, targets)`` and the metric the
fraction of rows whose top score is the target (classification accuracy,
next-token accuracy or pixel accuracy).

Sizes: ``tiny`` (tests: a step in milliseconds), ``small`` (the default: a
step in about a second on a laptop CPU, and shaped like the paper's models in
memory: parameters, optimizer state and batch a small part of the peak, no
single op needing much of it), ``paper`` (closer to the paper's configurations,
e.g. ResNet-32 of width 16 at batch 56; minutes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import nn, optim
from .. import ops as F
from ..data import (
    Split,
    counting_sequences,
    generate_listops,
    load_digits,
    shapes_segmentation,
)
from ..data.listops import VOCAB_SIZE
from ..tensor import Tensor, tensor
from .densenet import DenseNet
from .lstm import LSTMModel
from .mlp import MLP
from .resnet import ResNet
from .transformer import Transformer
from .treelstm import TreeLSTM
from .unet import UNet

SIZES = ("tiny", "small", "paper")


@dataclass
class Task:
    name: str
    size: str
    model: nn.Module
    data: Split
    batch_size: int
    make_optimizer: Callable[[list[Tensor]], optim.Optimizer]
    inputs: Callable[[Any, np.ndarray, str], Any]  # (examples, indices, device) -> model input
    metric: str = "accuracy"
    device: str = "cpu"
    # (model input, targets) -> mean loss, for a model that computes its loss its own way
    loss_fn: Callable[[Any, Tensor], Tensor] | None = None

    def batch(self, indices: np.ndarray, train: bool = True) -> tuple[Any, Tensor]:
        """Model input and int64 target rows for the examples at ``indices``."""
        x = self.data.train_x if train else self.data.test_x
        y = self.data.train_y if train else self.data.test_y
        return self.inputs(x, indices, self.device), tensor(
            y[indices].reshape(-1), device=self.device
        )

    def scores(self, model_input: Any) -> Tensor:
        """The model's output as rows of class scores (M, classes)."""
        out = self.model(model_input)
        if out.ndim == 4:  # (N, C, H, W) per-pixel scores
            out = F.transpose(out, (0, 2, 3, 1))
        return F.reshape(out, (-1, out.shape[-1]))

    def loss(self, model_input: Any, targets: Tensor) -> Tensor:
        """The mean loss. Only the loss is returned: a caller that held the score rows
        too would keep them resident, and rebuildable, until the end of the step."""
        if self.loss_fn is not None:
            return self.loss_fn(model_input, targets)
        return F.cross_entropy(self.scores(model_input), targets)

    @property
    def n_train(self) -> int:
        return len(self.data.train_y)


def _images(x: np.ndarray, idx: np.ndarray, device: str) -> Tensor:
    return tensor(x[idx], device=device)


def _flat_images(x: np.ndarray, idx: np.ndarray, device: str) -> Tensor:
    return tensor(x[idx].reshape(len(idx), -1), device=device)


def _tokens(x: np.ndarray, idx: np.ndarray, device: str) -> Tensor:
    return tensor(x[idx], device=device)


def _trees(x: list, idx: np.ndarray, device: str) -> list:
    return [x[i] for i in idx]


def _adam(lr: float) -> Callable[[list[Tensor]], optim.Optimizer]:
    return lambda params: optim.Adam(params, lr=lr)


def _sgd(lr: float, momentum: float = 0.9) -> Callable[[list[Tensor]], optim.Optimizer]:
    return lambda params: optim.SGD(params, lr=lr, momentum=momentum)


def _pick(size: str, table: dict[str, Any]) -> Any:
    if size not in table:
        raise ValueError(f"unknown size {size!r}; expected one of {SIZES}")
    return table[size]


def make_mlp(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    # small: deep and narrow, with every training digit in each batch (None), so that the
    # parameters, Adam's moments and the batch are under a tenth of the peak (24 layers of
    # 48 need the layer norms and skips of ``residual`` to learn in a few dozen steps).
    hidden, residual, batch = _pick(
        size,
        {
            "tiny": ((32,) * 3, False, 256),
            "small": ((48,) * 24, True, None),
            "paper": ((512,) * 6, False, 1024),
        },
    )
    model = MLP(64, hidden, 10, rng=seed, device=device, residual=residual)
    data = load_digits(seed)
    batch = batch or len(data.train_y)
    return Task("mlp", size, model, data, batch, _adam(3e-3), _flat_images, device=device)


def make_resnet(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    # lr 0.02 on small: at 0.05 the weights move so fast in 40 steps that batch norm's
    # running statistics (momentum 0.1) lag them and eval accuracy swings from 30% to 90%
    # over seeds (PyTorch too, from the same initial weights and batches).
    depth, width, batch, lr = _pick(
        size,
        {"tiny": (8, 4, 8, 0.05), "small": (32, 4, 256, 0.02), "paper": (32, 16, 56, 0.05)},
    )
    model = ResNet(depth, width, in_channels=1, classes=10, rng=seed, device=device)
    return Task("resnet", size, model, load_digits(seed), batch, _sgd(lr), _images, device=device)


def make_densenet(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    blocks, growth, batch = _pick(
        size,
        {"tiny": ((2, 2), 4, 8), "small": ((12, 6, 4), 4, 128), "paper": ((6, 12, 24), 12, 64)},
    )
    model = DenseNet(blocks, growth, in_channels=1, classes=10, rng=seed, device=device)
    return Task(
        "densenet", size, model, load_digits(seed), batch, _sgd(0.05), _images, device=device
    )


def make_unet(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    # small: narrow, with four convolutions per block and a large batch, so that no
    # full-resolution op (the skip's concatenation and its gradient) needs much of the peak.
    width, levels, convs, batch, lr = _pick(
        size,
        {
            "tiny": (4, 1, 2, 4, 3e-3),
            "small": (4, 2, 4, 128, 1e-2),
            "paper": (16, 3, 2, 32, 3e-3),
        },
    )
    model = UNet(1, 3, width, levels, rng=seed, device=device, convs=convs)
    data = shapes_segmentation(n=600, size=16, seed=seed)
    return Task(
        "unet",
        size,
        model,
        data,
        batch,
        _adam(lr),
        _images,
        metric="pixel accuracy",
        device=device,
    )


def make_lstm(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    hidden, length, batch = _pick(
        size, {"tiny": (16, 6, 8), "small": (32, 16, 256), "paper": (256, 32, 128)}
    )
    data = counting_sequences(n=2000, length=length, vocab=16, seed=seed)
    model = LSTMModel(16, embed=16, hidden=hidden, rng=seed, device=device)
    return Task(
        "lstm",
        size,
        model,
        data,
        batch,
        _adam(1e-2),
        _tokens,
        metric="next-token accuracy",
        device=device,
        loss_fn=model.loss,
    )


def make_transformer(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    dim, layers, length, batch = _pick(
        size, {"tiny": (16, 1, 6, 8), "small": (16, 6, 16, 64), "paper": (64, 4, 32, 128)}
    )
    data = counting_sequences(n=2000, length=length, vocab=16, seed=seed)
    model = Transformer(
        16, length, dim=dim, heads=4 if dim >= 32 else 2, layers=layers, rng=seed, device=device
    )
    return Task(
        "transformer",
        size,
        model,
        data,
        batch,
        _adam(3e-3),
        _tokens,
        metric="next-token accuracy",
        device=device,
    )


def make_treelstm(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    hidden, depth, leaf, group, batch, lr = _pick(
        size,
        {
            "tiny": (16, 2, 0.6, 1, 16, 3e-3),
            "small": (32, 5, 0.4, 8, 64, 1e-2),
            "paper": (128, 6, 0.4, 1, 64, 3e-3),
        },
    )
    data = generate_listops(n=2000, seed=seed, max_depth=depth, max_args=4, leaf_probability=leaf)
    model = TreeLSTM(VOCAB_SIZE, 10, embed=16, hidden=hidden, group=group, rng=seed, device=device)
    return Task("treelstm", size, model, data, batch, _adam(lr), _trees, device=device)


MODELS: dict[str, tuple[Callable[..., Task], str]] = {
    "mlp": (make_mlp, "multilayer perceptron on the 8x8 digits"),
    "resnet": (make_resnet, "CIFAR-style ResNet (6n+2, BatchNorm) on the 8x8 digits"),
    "densenet": (make_densenet, "DenseNet (dense concatenation blocks) on the 8x8 digits"),
    "unet": (make_unet, "U-Net segmenting rectangles and discs on noise (16x16)"),
    "lstm": (make_lstm, "LSTM next-token prediction on counting sequences"),
    "transformer": (make_transformer, "causal Transformer encoder on counting sequences"),
    "treelstm": (make_treelstm, "child-sum Tree-LSTM evaluating ListOps trees"),
}


def make_task(name: str, size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    """Build model ``name`` at ``size`` with its data (seeded by ``seed``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    return MODELS[name][0](size, seed, device)


def chance_level(task: Task) -> float:
    """Accuracy of always predicting the most frequent training target."""
    counts = np.bincount(np.asarray(task.data.train_y).reshape(-1))
    return float(counts.max() / counts.sum()) if counts.size else math.nan
