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


# Each model's presets are a function of the size alone, so that the model can be built
# without its data (``build_model``: ``minidtr models`` counts parameters in a moment, where
# loading the datasets takes seconds).


def mlp_model(size: str = "small", seed: int = 0, device: str = "cpu") -> MLP:
    # small: deep and narrow (24 layers of 48 need the layer norms and skips of
    # ``residual`` to learn in a few dozen steps)
    hidden, residual = _pick(
        size,
        {"tiny": ((32,) * 3, False), "small": ((48,) * 24, True), "paper": ((512,) * 6, False)},
    )
    return MLP(64, hidden, 10, rng=seed, device=device, residual=residual)


def make_mlp(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    # small: every training digit in each batch (None), so that the parameters, Adam's
    # moments and the batch are under a tenth of the peak
    batch = _pick(size, {"tiny": 256, "small": None, "paper": 1024})
    model = mlp_model(size, seed, device)
    data = load_digits(seed)
    batch = batch or len(data.train_y)
    return Task("mlp", size, model, data, batch, _adam(3e-3), _flat_images, device=device)


def resnet_model(size: str = "small", seed: int = 0, device: str = "cpu") -> ResNet:
    depth, width = _pick(size, {"tiny": (8, 4), "small": (32, 4), "paper": (32, 16)})
    return ResNet(depth, width, in_channels=1, classes=10, rng=seed, device=device)


def make_resnet(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    # lr 0.02 on small: at 0.05 the weights move so fast in 40 steps that batch norm's
    # running statistics (momentum 0.1) lag them and eval accuracy swings from 30% to 90%
    # over seeds (PyTorch too, from the same initial weights and batches).
    batch, lr = _pick(size, {"tiny": (8, 0.05), "small": (256, 0.02), "paper": (56, 0.05)})
    model = resnet_model(size, seed, device)
    return Task("resnet", size, model, load_digits(seed), batch, _sgd(lr), _images, device=device)


def densenet_model(size: str = "small", seed: int = 0, device: str = "cpu") -> DenseNet:
    blocks, growth = _pick(
        size, {"tiny": ((2, 2), 4), "small": ((12, 6, 4), 4), "paper": ((6, 12, 24), 12)}
    )
    return DenseNet(blocks, growth, in_channels=1, classes=10, rng=seed, device=device)


def make_densenet(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    batch = _pick(size, {"tiny": 8, "small": 128, "paper": 64})
    model = densenet_model(size, seed, device)
    return Task(
        "densenet", size, model, load_digits(seed), batch, _sgd(0.05), _images, device=device
    )


def unet_model(size: str = "small", seed: int = 0, device: str = "cpu") -> UNet:
    # small: narrow, with four convolutions per block (and a large batch, make_unet), so
    # that no full-resolution op (the skip's concatenation and its gradient) needs much of
    # the peak
    width, levels, convs = _pick(size, {"tiny": (4, 1, 2), "small": (4, 2, 4), "paper": (16, 3, 2)})
    return UNet(1, 3, width, levels, rng=seed, device=device, convs=convs)


def make_unet(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    batch, lr = _pick(size, {"tiny": (4, 3e-3), "small": (128, 1e-2), "paper": (32, 3e-3)})
    model = unet_model(size, seed, device)
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


def lstm_model(size: str = "small", seed: int = 0, device: str = "cpu") -> LSTMModel:
    hidden = _pick(size, {"tiny": 16, "small": 32, "paper": 256})
    return LSTMModel(16, embed=16, hidden=hidden, rng=seed, device=device)


def make_lstm(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    length, batch = _pick(size, {"tiny": (6, 8), "small": (16, 256), "paper": (32, 128)})
    data = counting_sequences(n=2000, length=length, vocab=16, seed=seed)
    model = lstm_model(size, seed, device)
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


def _transformer_length(size: str) -> int:
    """The sequences' length: the data's, and the positional embedding's."""
    return _pick(size, {"tiny": 6, "small": 16, "paper": 32})


def transformer_model(size: str = "small", seed: int = 0, device: str = "cpu") -> Transformer:
    dim, layers = _pick(size, {"tiny": (16, 1), "small": (16, 6), "paper": (64, 4)})
    return Transformer(
        16,
        _transformer_length(size),
        dim=dim,
        heads=4 if dim >= 32 else 2,
        layers=layers,
        rng=seed,
        device=device,
    )


def make_transformer(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    batch = _pick(size, {"tiny": 8, "small": 64, "paper": 128})
    length = _transformer_length(size)
    data = counting_sequences(n=2000, length=length, vocab=16, seed=seed)
    model = transformer_model(size, seed, device)
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


def treelstm_model(size: str = "small", seed: int = 0, device: str = "cpu") -> TreeLSTM:
    hidden, group = _pick(size, {"tiny": (16, 1), "small": (32, 8), "paper": (128, 1)})
    return TreeLSTM(VOCAB_SIZE, 10, embed=16, hidden=hidden, group=group, rng=seed, device=device)


def make_treelstm(size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    depth, leaf, batch, lr = _pick(
        size,
        {"tiny": (2, 0.6, 16, 3e-3), "small": (5, 0.4, 64, 1e-2), "paper": (6, 0.4, 64, 3e-3)},
    )
    data = generate_listops(n=2000, seed=seed, max_depth=depth, max_args=4, leaf_probability=leaf)
    model = treelstm_model(size, seed, device)
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


# Each model without its data: the same model ``make_task`` builds.
MODEL_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "mlp": mlp_model,
    "resnet": resnet_model,
    "densenet": densenet_model,
    "unet": unet_model,
    "lstm": lstm_model,
    "transformer": transformer_model,
    "treelstm": treelstm_model,
}


def build_model(name: str, size: str = "small", seed: int = 0, device: str = "cpu") -> nn.Module:
    """Model ``name`` at ``size``, as ``make_task`` builds it, without loading its data."""
    if name not in MODEL_BUILDERS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    return MODEL_BUILDERS[name](size, seed, device)


def make_task(name: str, size: str = "small", seed: int = 0, device: str = "cpu") -> Task:
    """Build model ``name`` at ``size`` with its data (seeded by ``seed``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    return MODELS[name][0](size, seed, device)


def chance_level(task: Task) -> float:
    """Accuracy of always predicting the most frequent training target."""
    counts = np.bincount(np.asarray(task.data.train_y).reshape(-1))
    return float(counts.max() / counts.sum()) if counts.size else math.nan
