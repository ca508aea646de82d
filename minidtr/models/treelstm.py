"""Child-sum Tree-LSTM (Tai, Socher and Manning, 2015) over ListOps trees.

Each node has an input x (the embedding of its digit or operator token) and
any number of children with states (h_k, c_k)::

    h~ = sum_k h_k
    i, o, u = sigmoid(W_i x + U_i h~), sigmoid(W_o x + U_o h~), tanh(W_u x + U_u h~)
    f_k = sigmoid(W_f x + U_f h_k)                  one forget gate per child
    c = i * u + sum_k f_k * c_k,   h = o * tanh(c)

The graph follows the trees: a batch of differently shaped trees gives a
different graph every step, which static checkpointing cannot plan for. For
speed the nodes of a tree at the same height are computed together: level 0
is every leaf, level L every node whose tallest child is at level L - 1. A
node's children may sit at any lower level; they are gathered by index and
summed into their parent with a 0/1 matrix. The root's h is classified.

``forward`` encodes each tree of a batch separately, as the paper's Tree-LSTM
does: many small ops whose working set is one tree level, so that memory is
the sum over the batch and eviction has room to work. ``encode_batch`` levels
all trees together (fewer, larger ops: faster, but each op then holds a whole
batch level).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import nn
from .. import ops as F
from ..data.listops import ListOpsTree
from ..nn.init import Rng
from ..tensor import Tensor, tensor
from .build import Build


@dataclass
class Level:
    """The nodes of one height across a batch of trees (host-side index arrays)."""

    tokens: np.ndarray  # (n,) token of each node
    child_level: list[int]  # per group of children: the level they come from
    child_rows: list[np.ndarray]  # per group: their rows in that level
    child_parent: np.ndarray  # (n_children,) the parent's row here, groups concatenated


def schedule(trees: Sequence[ListOpsTree]) -> tuple[list[Level], np.ndarray, np.ndarray]:
    """Levels of a batch, and for each tree its root's (level, row)."""
    tokens: list[list[int]] = []
    children: list[list[tuple[int, int, int]]] = []  # per level: (child level, row, parent)
    roots = []
    for tree in trees:
        stack: list[tuple[ListOpsTree, bool]] = [(tree, False)]
        placed: list[tuple[int, int]] = []  # (level, row) of finished nodes, in post-order
        while stack:
            node, expanded = stack.pop()
            if not expanded and node.children:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(node.children))
                continue
            kids = [placed.pop() for _ in node.children][::-1]
            level = 1 + max(lv for lv, _ in kids) if kids else 0
            while len(tokens) <= level:
                tokens.append([])
                children.append([])
            row = len(tokens[level])
            tokens[level].append(node.token)
            children[level].extend((lv, r, row) for lv, r in kids)
            placed.append((level, row))
        roots.append(placed.pop())
    levels = []
    for toks, kids in zip(tokens, children, strict=True):
        groups = sorted({lv for lv, _, _ in kids})
        rows = [np.array([r for lv, r, _ in kids if lv == g], dtype=np.int64) for g in groups]
        parent = np.array([p for g in groups for lv, _, p in kids if lv == g], dtype=np.int64)
        levels.append(Level(np.array(toks, dtype=np.int64), groups, rows, parent))
    root_level = np.array([lv for lv, _ in roots], dtype=np.int64)
    root_row = np.array([r for _, r in roots], dtype=np.int64)
    return levels, root_level, root_row


def segment_matrix(parent: np.ndarray, n_parents: int, dtype) -> np.ndarray:
    """S with S[parent[k], k] = 1, so S @ rows sums each parent's children."""
    s = np.zeros((n_parents, len(parent)), dtype=dtype)
    s[parent, np.arange(len(parent))] = 1
    return s


class TreeLSTM(nn.Module):
    def __init__(
        self,
        vocab: int,
        classes: int,
        embed: int = 16,
        hidden: int = 32,
        rng: Rng = None,
        device: str = "cpu",
    ):
        super().__init__()
        b = Build.of(rng, device)
        self.hidden = hidden
        self.embedding = b.embedding(vocab, embed)
        self.input_gates = b.linear(embed, 4 * hidden)  # i, o, u, f from x
        self.hidden_iou = b.linear(hidden, 3 * hidden, bias=False)
        self.hidden_f = b.linear(hidden, hidden, bias=False)
        self.classifier = b.linear(hidden, classes)

    def forward(self, trees: Sequence[ListOpsTree]) -> Tensor:
        """A list of trees -> (len(trees), classes) scores; each tree is its own graph."""
        return self.classifier(F.stack([self.encode(tree) for tree in trees]))

    def encode(self, tree: ListOpsTree) -> Tensor:
        """The root's hidden state (hidden,), computed level by level up the tree."""
        return self.encode_batch([tree])[0]

    def encode_batch(self, trees: Sequence[ListOpsTree]) -> Tensor:
        """The roots' hidden states (len(trees), hidden), with the nodes of equal height
        across all the trees computed together (fewer, larger ops)."""
        levels, root_level, root_row = schedule(trees)
        dtype = self.classifier.weight.dtype
        device = self.classifier.weight.device
        states: list[tuple[Tensor, Tensor]] = []
        for level in levels:
            gates = self.input_gates(self.embedding(tensor(level.tokens, device=device)))
            i, o, u, f = F.split(gates, 4, axis=1)
            if level.child_level:
                pairs = list(zip(level.child_level, level.child_rows, strict=True))
                h_kids = F.concat([states[g][0][r] for g, r in pairs])
                c_kids = F.concat([states[g][1][r] for g, r in pairs])
                sums = tensor(
                    segment_matrix(level.child_parent, len(level.tokens), dtype), device=device
                )
                hi, ho, hu = F.split(self.hidden_iou(F.matmul(sums, h_kids)), 3, axis=1)
                i, o, u = i + hi, o + ho, u + hu
                forget = F.sigmoid(f[level.child_parent] + self.hidden_f(h_kids))
                c = F.sigmoid(i) * F.tanh(u) + F.matmul(sums, forget * c_kids)
            else:
                c = F.sigmoid(i) * F.tanh(u)
            h = F.sigmoid(o) * F.tanh(c)
            states.append((h, c))
        if len(trees) == 1:
            return states[int(root_level[0])][0][int(root_row[0]) : int(root_row[0]) + 1]
        order = np.argsort(np.lexsort((root_row, root_level)), kind="stable")
        used = sorted(set(root_level.tolist()))
        roots = F.concat([states[lv][0][root_row[root_level == lv]] for lv in used])
        return roots[order]
