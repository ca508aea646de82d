"""PyTorch twins of minidtr's bundled models, for the benchmarks against PyTorch.

``twin_of(model)`` builds, from a minidtr model, the same network in PyTorch: every
sub-module is mirrored (``mirror``) into a PyTorch module with the same name, shapes and
settings, so that the twin's ``state_dict`` has minidtr's parameter and buffer names and
``load_weights`` copies the initial weights over by name (step-0 losses then agree).
The structure is read from the minidtr model, not written down again, so a twin follows
its preset (tiny, small or paper). Each top-level twin computes what its minidtr model's
``Task.loss`` does, op for op where PyTorch has the op: the fused ones (batch norm with
its ReLU and residual sum, the LSTM's and the Tree-LSTM's cells) are their unfused
PyTorch equivalents, and attention is written out as minidtr writes it (matmul,
softmax, matmul), not ``scaled_dot_product_attention``.

A twin runs as a chain of links (``chain``: the first state and the functions that map
each state to the next), so that PyTorch's checkpointing can cut any of them into
segments (``twin_loss(..., segments=k)``), as ``checkpoint_sequential`` cuts a
``Sequential``: the links in k segments of equal length, every one but the last under
``torch.utils.checkpoint.checkpoint`` (only its input kept, its inside recomputed in
backward). The links: the MLP's layers; the ResNet's stem, blocks and head; the
DenseNet's stem, dense layers (each appends its output to the features), transitions
and head; the U-Net's blocks (the state carries the encoder's outputs not yet
consumed by the decoder); the LSTM's time steps (the state is h, c and the loss so far);
the Transformer's embedding, layers and head; the Tree-LSTM's groups of trees (the
state is the roots encoded so far).

Needs torch; the library itself never imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as TF
from torch import nn as tnn
from torch.utils.checkpoint import checkpoint

from minidtr import nn as mnn
from minidtr import optim as moptim
from minidtr.models import densenet, lstm, mlp, resnet, transformer, treelstm, unet

Link = Callable[..., tuple]


# ---- leaves: PyTorch's layers with minidtr's settings -----------------------------------


class BatchNorm(tnn.BatchNorm2d):
    """minidtr's ``BatchNorm2d``: with ``relu``, ``relu(bn(x) (+ residual))``, one op there
    and two or three here."""

    def __init__(self, source: mnn.BatchNorm2d):
        super().__init__(source.num_features, eps=source.eps, momentum=source.momentum)
        self.relu = source.relu

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        y = super().forward(x)
        if residual is not None:
            y = y + residual
        return torch.relu(y) if self.relu else y


def _linear(m: mnn.Linear) -> tnn.Module:
    return tnn.Linear(m.in_features, m.out_features, bias=m.bias is not None)


def _conv(m: mnn.Conv2d) -> tnn.Module:
    return tnn.Conv2d(
        m.in_channels,
        m.out_channels,
        m.kernel_size,
        stride=m.stride,
        padding=m.padding,
        bias=m.bias is not None,
    )


LEAVES: dict[type, Callable[[Any], tnn.Module]] = {
    mnn.Linear: _linear,
    mnn.Conv2d: _conv,
    mnn.BatchNorm2d: BatchNorm,
    mnn.LayerNorm: lambda m: tnn.LayerNorm(m.normalized_shape, eps=m.eps),
    mnn.Embedding: lambda m: tnn.Embedding(m.num_embeddings, m.embedding_dim),
    mnn.LSTMCell: lambda m: tnn.LSTMCell(m.input_size, m.hidden_size, m.bias_ih is not None),
    mnn.ReLU: lambda m: tnn.ReLU(),
    mnn.GELU: lambda m: tnn.GELU(approximate=m.approximate),
    mnn.Identity: lambda m: tnn.Identity(),
    mnn.Sequential: lambda m: tnn.Sequential(*(mirror(c) for c in m.children())),
    mnn.ModuleList: lambda m: tnn.ModuleList(mirror(c) for c in m.children()),
}


def mirror(module: mnn.Module) -> tnn.Module:
    """The PyTorch module of minidtr ``module``, its sub-modules mirrored under their names."""
    kind = type(module)
    if kind in LEAVES:
        return LEAVES[kind](module)
    if kind not in TWINS:
        raise TypeError(f"no PyTorch twin for {kind.__name__}")
    return TWINS[kind](module)


class Mirrored(tnn.Module):
    """A twin of a minidtr module: its children mirrored, and the plain attributes its
    forward reads (``COPIED``) copied."""

    COPIED: tuple[str, ...] = ()

    def __init__(self, source: mnn.Module):
        super().__init__()
        for name, child in source.named_children():
            setattr(self, name, mirror(child))
        for name in self.COPIED:
            setattr(self, name, getattr(source, name))


def _single(module: Callable) -> Link:
    """A link of one module on a one-tensor state."""
    return lambda h: (module(h),)


def _pooled_scores(classifier: tnn.Module, h: torch.Tensor) -> tuple:
    """Global average pooling, then the classifier (the image classifiers' head)."""
    return (classifier(h.mean(dim=(2, 3))),)


class Twin(Mirrored):
    """A top-level twin: the model's input from raw examples, its chain, and its loss."""

    @staticmethod
    def inputs(examples: Any, indices: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(examples[indices]))

    def chain(self, model_input: Any, targets: torch.Tensor) -> tuple[tuple, list[Link]]:
        raise NotImplementedError

    def loss(self, state: tuple, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the scores (the state's one tensor): rows of class scores,
        or (N, C, H, W) scores per pixel against targets in (N, H, W) order."""
        (scores,) = state
        if scores.ndim == 4:
            n, _, h, w = scores.shape
            return TF.cross_entropy(scores, targets.view(n, h, w))
        return TF.cross_entropy(scores.reshape(-1, scores.shape[-1]), targets)


# ---- MLP and ResNet ----------------------------------------------------------------------


class ResidualLayer(Mirrored):
    COPIED = ("skip",)

    def forward(self, x):
        y = self.layers(x)
        return x + y if self.skip else y


class MLP(Twin):
    @staticmethod
    def inputs(examples, indices):
        return torch.from_numpy(examples[indices].reshape(len(indices), -1))

    def chain(self, x, targets):
        return (x,), [_single(layer) for layer in self.layers]


class BasicBlock(Mirrored):
    def forward(self, x):
        return self.second_norm(self.second(self.first(x)), residual=self.shortcut(x))


class ResNet(Twin):
    def chain(self, x, targets):
        return (x,), [_single(self.stem), *(_single(b) for b in self.blocks), self.head]

    def head(self, h):
        return _pooled_scores(self.classifier, h)


# ---- DenseNet and U-Net ------------------------------------------------------------------


class DenseLayer(Mirrored):
    def forward(self, x):
        return self.conv(torch.relu(self.norm(x)))


class DenseBlock(Mirrored):
    def links(self) -> list[Link]:
        """One link a layer, appending its output to the features: layer k's input is
        the concatenation of the block's input and the k - 1 outputs before it, as in
        minidtr's block, with as many concatenations (the last is the block's output)."""
        return [lambda h, layer=layer: (torch.cat([h, layer(h)], dim=1),) for layer in self.layers]


class Transition(Mirrored):
    def forward(self, x):
        return TF.avg_pool2d(self.conv(torch.relu(self.norm(x))), 2)


class DenseNet(Twin):
    def chain(self, x, targets):
        links = [_single(self.stem)]
        for stage in self.stages:
            links += stage.links() if isinstance(stage, DenseBlock) else [_single(stage)]
        return (x,), [*links, self.head]

    def head(self, h):
        return _pooled_scores(self.classifier, torch.relu(self.norm(h)))


class ConvBlock(Mirrored):
    def forward(self, x):
        return self.layers(x)


class Up(Mirrored):
    def forward(self, x, skip):
        up = self.reduce(TF.interpolate(x, scale_factor=2, mode="nearest"))
        return self.block(torch.cat([skip, up], dim=1))


class UNet(Twin):
    COPIED = ("levels",)

    def chain(self, x, targets):
        """The state is the encoder's outputs that the decoder has yet to use, then the
        latest output."""

        def down(i: int, block: tnn.Module) -> Link:
            if i == 0:
                return lambda h: (block(h),)
            return lambda *outs: (*outs, block(TF.max_pool2d(outs[-1], 2)))

        def up(block: tnn.Module) -> Link:
            return lambda *outs: (*outs[:-2], block(outs[-1], outs[-2]))

        links = [down(i, block) for i, block in enumerate(self.down)]
        links += [up(block) for block in self.up]
        return (x,), [*links, _single(self.head)]


# ---- LSTM and Transformer ----------------------------------------------------------------


class LSTMModel(Twin):
    def chain(self, tokens, targets):
        """One link a time step; the state is (h, c, the cross-entropies summed so far),
        each step's loss taken at its step, as minidtr's ``LSTMModel.loss`` does."""
        n, length = tokens.shape
        by_step = targets.view(n, length)

        def step(t: int) -> Link:
            def link(h, c, total):
                h, c = self.cell(self.embedding(tokens[:, t]), (h, c))
                return h, c, total + TF.cross_entropy(self.head(h), by_step[:, t])

            return link

        zeros = torch.zeros(n, self.cell.hidden_size)
        return (zeros, zeros, torch.zeros(())), [step(t) for t in range(length)]

    def loss(self, state, targets):
        length = targets.numel() // state[0].shape[0]
        return state[2] * (1.0 / length)


class MultiHeadAttention(Mirrored):
    COPIED = ("heads",)

    def forward(self, x, mask):
        b, t, d = x.shape
        dh = d // self.heads

        def heads(part):  # (B, T, D) -> (B, H, T, Dh)
            return part.reshape(b, t, self.heads, dh).permute(0, 2, 1, 3)

        q, k, v = (heads(p) for p in self.qkv(x).split(d, dim=2))
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(dh))
        if mask is not None:
            scores = scores + mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(context.permute(0, 2, 1, 3).reshape(b, t, d))


class EncoderLayer(Mirrored):
    def forward(self, x, mask):
        x = x + self.attention(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class Transformer(Twin):
    COPIED = ("causal",)

    def chain(self, tokens, targets):
        t = tokens.shape[1]
        mask = None
        if self.causal:
            future = torch.ones(t, t, dtype=torch.bool).triu(1)
            mask = torch.zeros(t, t).masked_fill(future, transformer.MASKED)

        def embed(tokens):
            return (self.tokens(tokens) + self.positions(torch.arange(t)),)

        layers = [lambda x, layer=layer: (layer(x, mask),) for layer in self.layers]
        return (tokens,), [embed, *layers, _single(lambda x: self.head(self.norm(x)))]


# ---- Tree-LSTM ---------------------------------------------------------------------------


def _sum_children(rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """(n_children, hidden) -> (n_parents, hidden), as minidtr's ``sum_children``."""
    padded = torch.cat([rows.new_zeros(1, rows.shape[1]), rows])
    return padded[slots].sum(dim=1)


def _child_sum_cell(iou: torch.Tensor, c_in: torch.Tensor | None):
    i, o, u = iou.chunk(3, dim=-1)
    c = torch.sigmoid(i) * torch.tanh(u)
    if c_in is not None:
        c = c + c_in
    return torch.sigmoid(o) * torch.tanh(c), c


class TreeLSTM(Twin):
    """Level by level over each group of ``group`` trees, with minidtr's schedule (the
    host-side index arrays of ``minidtr.models.treelstm``), one link a group."""

    COPIED = ("group",)

    @staticmethod
    def inputs(examples, indices):
        return [examples[i] for i in indices]

    def chain(self, trees, targets):
        k = self.group
        groups = [trees[i : i + k] for i in range(0, len(trees), k)]
        links = [lambda *roots, g=g: (*roots, self.encode_batch(g)) for g in groups]
        return (), links

    def loss(self, state, targets):
        return TF.cross_entropy(self.classifier(torch.cat(state)), targets)

    def encode_batch(self, trees: Sequence) -> torch.Tensor:
        levels, root_level, root_row = treelstm.schedule(trees)
        states: list[tuple[torch.Tensor, torch.Tensor]] = []
        for level in levels:
            x = self.embedding(torch.from_numpy(level.tokens))
            if level.child_level:
                states.append(self.inner_level(x, level, states))
            else:
                states.append(_child_sum_cell(self.input_iou(x), None))
        order = np.argsort(np.lexsort((root_row, root_level)), kind="stable")
        used = sorted(set(root_level.tolist()))
        rows = [states[lv][0][torch.from_numpy(root_row[root_level == lv])] for lv in used]
        return torch.cat(rows)[torch.from_numpy(order)]

    def inner_level(self, x, level, states):
        """(h, c) of the nodes of a level with children."""
        pairs = [
            (g, torch.from_numpy(r))
            for g, r in zip(level.child_level, level.child_rows, strict=True)
        ]
        h_kids = torch.cat([states[g][0][r] for g, r in pairs])
        c_kids = torch.cat([states[g][1][r] for g, r in pairs])
        n = len(level.tokens)
        slots = torch.from_numpy(treelstm.child_slots(level.child_parent, n))
        iou = self.input_iou(x) + TF.linear(_sum_children(h_kids, slots), self.hidden_iou.weight)
        f = self.input_f(x)[torch.from_numpy(level.child_parent)]
        forget = torch.sigmoid(f + self.hidden_f(h_kids))
        return _child_sum_cell(iou, _sum_children(forget * c_kids, slots))


TWINS: dict[type, type[Mirrored]] = {
    mlp.MLP: MLP,
    mlp.ResidualLayer: ResidualLayer,
    resnet.ResNet: ResNet,
    resnet.BasicBlock: BasicBlock,
    densenet.DenseNet: DenseNet,
    densenet.DenseBlock: DenseBlock,
    densenet.DenseLayer: DenseLayer,
    densenet.Transition: Transition,
    unet.UNet: UNet,
    unet.ConvBlock: ConvBlock,
    unet.Up: Up,
    lstm.LSTMModel: LSTMModel,
    transformer.Transformer: Transformer,
    transformer.EncoderLayer: EncoderLayer,
    transformer.MultiHeadAttention: MultiHeadAttention,
    treelstm.TreeLSTM: TreeLSTM,
}


# ---- weights, optimizer, batches, the loss -----------------------------------------------


def load_weights(twin: tnn.Module, model: mnn.Module) -> None:
    """Copy ``model``'s parameters and buffers into ``twin`` by name; every name must
    match (PyTorch's batch norm alone has one more buffer, its count of batches)."""
    named = [*model.named_parameters(), *model.named_buffers()]
    state = {name: torch.from_numpy(np.array(t.numpy())) for name, t in named}
    missing, unexpected = twin.load_state_dict(state, strict=False)
    missing = [name for name in missing if not name.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise ValueError(f"twin and model differ: missing {missing}, unexpected {unexpected}")


def twin_of(model: mnn.Module) -> Twin:
    """The PyTorch twin of minidtr ``model``, with its current weights."""
    twin = mirror(model)
    load_weights(twin, model)
    return twin


# minidtr's optimizers, PyTorch's, and the settings they share
OPTIMIZERS = {
    moptim.Adam: (torch.optim.Adam, ("lr", "betas", "eps", "weight_decay")),
    moptim.SGD: (torch.optim.SGD, ("lr", "momentum", "weight_decay")),
}


def optimizer_like(optimizer: moptim.Optimizer, params) -> torch.optim.Optimizer:
    """PyTorch's optimizer with the settings of minidtr's ``optimizer``."""
    if type(optimizer) not in OPTIMIZERS:
        raise TypeError(f"no PyTorch optimizer for {optimizer!r}")
    kind, settings = OPTIMIZERS[type(optimizer)]
    return kind(params, **{name: getattr(optimizer, name) for name in settings})


def batch(twin: Twin, task, indices: np.ndarray) -> tuple[Any, torch.Tensor]:
    """The twin's input and int64 target rows for training examples ``indices``."""
    targets = torch.from_numpy(np.asarray(task.data.train_y[indices]).reshape(-1))
    return twin.inputs(task.data.train_x, indices), targets


def twin_loss(twin: Twin, model_input: Any, targets: torch.Tensor, segments: int = 0):
    """The mean loss, the chain cut into ``segments`` checkpointed segments (0: none;
    at most one a link), every segment but the last checkpointed, as
    ``checkpoint_sequential`` does."""
    state, links = twin.chain(model_input, targets)
    segments = min(segments, len(links))
    size = len(links) // segments if segments else len(links)
    checkpointed = size * (segments - 1) if segments else 0
    for start in range(0, checkpointed, size):
        state = checkpoint(_run(links[start : start + size]), *state, use_reentrant=False)
    state = _run(links[checkpointed:])(*state)
    return twin.loss(state, targets)


def _run(links: Sequence[Link]) -> Callable[..., tuple]:
    def run(*state):
        for link in links:
            state = link(*state)
        return state

    return run


def parameter_count(module) -> int:
    """Scalars in the parameters of a PyTorch or a minidtr module."""
    return sum(math.prod(p.shape) for p in module.parameters())
