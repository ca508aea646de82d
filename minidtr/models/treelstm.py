"""Child-sum Tree-LSTM (Tai, Socher and Manning, 2015) over ListOps trees.

Each node has an input x (the embedding of its digit or operator token) and
any number of children with states (h_k, c_k)::

    h~ = sum_k h_k
    i, o, u = sigmoid(W_i x + U_i h~), sigmoid(W_o x + U_o h~), tanh(W_u x + U_u h~)
    f_k = sigmoid(W_f x + U_f h_k)                  one forget gate per child
    c = i * u + sum_k f_k * c_k,   h = o * tanh(c)

``lstm_gates`` computes W x + U h~ for i, o, u as one op and ``child_sum_cell``
the gates' nonlinearities and the update of c and h as one (fused backward too);
the forget gates, one per child, stay separate ops.

The graph follows the trees: a batch of differently shaped trees gives a
different graph every step, which static checkpointing cannot plan for. For
speed the nodes of a tree at the same height are computed together: level 0
is every leaf, level L every node whose tallest child is at level L - 1. A
node's children may sit at any lower level; ``gather_rows`` gathers them from
their levels in one op, and ``sum_children`` sums them into their parents
through a (parents, most children) table of slots: memory linear in the
nodes (``ops/gather.py``). The root's h is classified.

``forward`` encodes the trees of a batch in groups of ``group`` trees (one,
by default: each tree its own graph, as the paper's Tree-LSTM does): many
small ops whose working set is one level of a group, so that memory is the
sum over the batch and eviction has room to work. ``encode_batch`` levels the
trees it is given together (fewer, larger ops: faster, but each op then holds
a whole level of them).
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


def child_slots(parent: np.ndarray, n_parents: int) -> np.ndarray:
    """(n_parents, most children) int64: row 1 + k of child k in its parent's row, 0 (the
    zero row) where a parent has fewer children."""
    counts = np.bincount(parent, minlength=n_parents)
    slots = np.zeros((n_parents, max(int(counts.max()), 1)), dtype=np.int64)
    order = np.argsort(parent, kind="stable")  # each parent's children, in their order
    firsts = np.cumsum(counts) - counts  # where each parent's run starts in ``order``
    sorted_parents = parent[order]
    slots[sorted_parents, np.arange(parent.size) - firsts[sorted_parents]] = order + 1
    return slots


class TreeLSTM(nn.Module):
    def __init__(
        self,
        vocab: int,
        classes: int,
        embed: int = 16,
        hidden: int = 32,
        group: int = 1,
        rng: Rng = None,
        device: str = "cpu",
    ):
        super().__init__()
        if group < 1:
            raise ValueError(f"TreeLSTM: group must be at least 1 tree, got {group}")
        b = Build.of(rng, device)
        self.hidden = hidden
        self.group = group
        self.embedding = b.embedding(vocab, embed)
        self.input_iou = b.linear(embed, 3 * hidden)  # i, o, u from x
        self.input_f = b.linear(embed, hidden)  # f from x: only nodes with children need it
        self.hidden_iou = b.linear(hidden, 3 * hidden, bias=False)
        self.hidden_f = b.linear(hidden, hidden, bias=False)
        self.classifier = b.linear(hidden, classes)

    def forward(self, trees: Sequence[ListOpsTree]) -> Tensor:
        """A list of trees -> (len(trees), classes) scores; each group of ``group``
        consecutive trees is its own graph."""
        if self.group == 1:
            roots = F.stack([self.encode(tree) for tree in trees])
        else:
            k = self.group
            roots = F.concat([self.encode_batch(trees[i : i + k]) for i in range(0, len(trees), k)])
        return self.classifier(roots)

    def encode(self, tree: ListOpsTree) -> Tensor:
        """The root's hidden state (hidden,), computed level by level up the tree."""
        return self.encode_batch([tree])[0]

    def encode_batch(self, trees: Sequence[ListOpsTree]) -> Tensor:
        """The roots' hidden states (len(trees), hidden), with the nodes of equal height
        across all the trees computed together (fewer, larger ops)."""
        levels, root_level, root_row = schedule(trees)
        device = self.classifier.weight.device

        def index(array: np.ndarray) -> Tensor:  # int32: index arrays are constants
            return tensor(array.astype(np.int32), device=device)

        states: list[tuple[Tensor, Tensor]] = []
        for level in levels:
            x = self.embedding(tensor(level.tokens, device=device))
            if level.child_level:
                f = self.input_f(x)
                rows = [index(r) for r in level.child_rows]
                h_kids = F.gather_rows([states[g][0] for g in level.child_level], rows)
                c_kids = F.gather_rows([states[g][1] for g in level.child_level], rows)
                slots = index(child_slots(level.child_parent, len(level.tokens)))
                iou = F.lstm_gates(
                    x,
                    F.sum_children(h_kids, slots),
                    self.input_iou.weight,
                    self.hidden_iou.weight,
                    self.input_iou.bias,
                )
                forget = F.sigmoid(f[index(level.child_parent)] + self.hidden_f(h_kids))
                c_in = F.sum_children(forget * c_kids, slots)
            else:
                iou, c_in = self.input_iou(x), None
            states.append(F.child_sum_cell(iou, c_in))
        if len(trees) == 1:
            return states[int(root_level[0])][0][int(root_row[0]) : int(root_row[0]) + 1]
        order = np.argsort(np.lexsort((root_row, root_level)), kind="stable")
        used = sorted(set(root_level.tolist()))
        roots = F.gather_rows(
            [states[lv][0] for lv in used], [index(root_row[root_level == lv]) for lv in used]
        )
        return roots[order]
