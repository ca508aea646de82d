"""ListOps-style expression trees (after Nangia and Bowman, 2018), generated.

An expression is a digit 0-9 or an operator applied to 2..``max_args``
sub-expressions: ``[MAX 3 [MIN 4 7] 2]`` is 4. The operators:

- ``MAX``, ``MIN``: the largest / smallest argument;
- ``MED``: the median, the lower middle value when the count is even;
- ``SUM_MOD``: the sum modulo 10.

The task is to predict the value (10 classes) from the tree. Every example has
its own shape, so a tree model builds a different graph for every batch: the
dynamic case that DTR handles and static checkpoint planners cannot.

Tokens: digits are 0-9, operators 10-13 (``OPERATORS`` order).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from .batches import Split, checked_count, checked_number, checked_split, split_indices

OPERATORS = ("MAX", "MIN", "MED", "SUM_MOD")
VOCAB_SIZE = 10 + len(OPERATORS)


@dataclass(frozen=True)
class ListOpsTree:
    """A digit leaf (``token`` < 10, no children) or an operator node."""

    token: int
    children: tuple[ListOpsTree, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def size(self) -> int:
        return 1 + sum(c.size() for c in self.children)

    def height(self) -> int:
        """0 for a leaf, else 1 + the tallest child."""
        return 0 if self.is_leaf else 1 + max(c.height() for c in self.children)

    def __str__(self) -> str:
        return tree_to_string(self)


def evaluate(tree: ListOpsTree) -> int:
    if tree.is_leaf:
        return tree.token
    values = sorted(evaluate(c) for c in tree.children)
    op = OPERATORS[tree.token - 10]
    if op == "MAX":
        return values[-1]
    if op == "MIN":
        return values[0]
    if op == "MED":
        return values[(len(values) - 1) // 2]
    return sum(values) % 10


def tree_to_string(tree: ListOpsTree) -> str:
    if tree.is_leaf:
        return str(tree.token)
    inner = " ".join(tree_to_string(c) for c in tree.children)
    return f"[{OPERATORS[tree.token - 10]} {inner}]"


def parse_listops(text: str) -> ListOpsTree:
    """The inverse of ``tree_to_string``: ``"[MAX 3 [MIN 4 7] 2]"`` -> a tree."""
    tokens = text.replace("[", " [ ").replace("]", " ] ").split()
    stack: list[list] = [[None, []]]
    for i, tok in enumerate(tokens):
        if tok == "[":
            if i + 1 >= len(tokens) or tokens[i + 1] not in OPERATORS:
                raise ValueError(f"'[' must be followed by one of {OPERATORS} in {text!r}")
            stack.append([None, []])
        elif tok in OPERATORS:
            if len(stack) == 1 or stack[-1][0] is not None or stack[-1][1]:  # ("MAX 3")
                raise ValueError(f"operator {tok} out of place in {text!r}")
            stack[-1][0] = 10 + OPERATORS.index(tok)
        elif tok == "]":
            op, children = stack.pop()
            if len(stack) == 0 or len(children) < 2:
                raise ValueError(f"unbalanced brackets or fewer than 2 arguments in {text!r}")
            stack[-1][1].append(ListOpsTree(op, tuple(children)))
        elif tok.isdigit() and len(tok) == 1:
            stack[-1][1].append(ListOpsTree(int(tok)))
        else:
            raise ValueError(f"unknown token {tok!r} in {text!r}")
    if len(stack) != 1 or len(stack[0][1]) != 1:
        raise ValueError(f"not one complete expression: {text!r}")
    return stack[0][1][0]


def random_tree(
    rng: np.random.Generator, max_depth: int, max_args: int, leaf_probability: float, depth: int = 0
) -> ListOpsTree:
    """An operator node at the root; below it each argument is a leaf with
    ``leaf_probability`` (always at ``max_depth``), else another operator node."""
    n_args = int(rng.integers(2, max_args + 1))
    children = []
    for _ in range(n_args):
        if depth + 1 >= max_depth or rng.random() < leaf_probability:
            children.append(ListOpsTree(int(rng.integers(0, 10))))
        else:
            children.append(random_tree(rng, max_depth, max_args, leaf_probability, depth + 1))
    return ListOpsTree(10 + int(rng.integers(0, len(OPERATORS))), tuple(children))


def generate_listops(
    n: int = 2000,
    seed: int = 0,
    max_depth: int = 3,
    max_args: int = 4,
    leaf_probability: float = 0.6,
    test_fraction: float = 0.2,
) -> Split:
    """``n`` random trees and their values, split into train and test sequences of trees
    (``PackedTrees``) and int64 label arrays."""
    where = "generate_listops"
    checked_split(where, n, test_fraction, seed)
    checked_count(where, "max_depth", max_depth, 1)
    checked_count(where, "max_args", max_args, 2)
    checked_number(where, "leaf_probability", leaf_probability, 0.0, 1.0)
    rng = np.random.default_rng(seed)
    trees = [random_tree(rng, max_depth, max_args, leaf_probability) for _ in range(n)]
    labels = np.array([evaluate(t) for t in trees], dtype=np.int64)
    train, test = split_indices(n, test_fraction, seed)
    return Split(
        PackedTrees([trees[i] for i in train]),
        labels[train],
        PackedTrees([trees[i] for i in test]),
        labels[test],
    )


class PackedTrees(Sequence[ListOpsTree]):
    """Trees kept as one array of (token, number of children) pairs in preorder, each
    rebuilt as a ``ListOpsTree`` when it is read.

    A list of 2,000 trees is about 140,000 node objects, which Python's cycle collector
    walks at each full collection: with the objects a training step makes, that was a
    fifth of a Tree-LSTM step. An array is one object, and rebuilding a batch's trees
    costs a few milliseconds less than it saves."""

    def __init__(self, trees: Sequence[ListOpsTree]):
        pairs: list[int] = []
        starts = [0]
        for tree in trees:
            stack = [tree]
            while stack:
                node = stack.pop()
                pairs += (node.token, len(node.children))
                stack.extend(reversed(node.children))
            starts.append(len(pairs) // 2)
        self.nodes = np.array(pairs, dtype=np.int16).reshape(-1, 2)
        self.starts = np.array(starts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.starts) - 1

    @overload
    def __getitem__(self, index: int) -> ListOpsTree: ...
    @overload
    def __getitem__(self, index: slice) -> list[ListOpsTree]: ...
    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        i = operator.index(index)
        if not -n <= i < n:
            raise IndexError(f"tree index {i} out of range for {n} trees")
        i %= n
        rows = self.nodes[self.starts[i] : self.starts[i + 1]].tolist()
        built: list[ListOpsTree] = []
        for token, arity in reversed(rows):  # children come before their parent
            if arity:
                children = tuple(built[-1 : -arity - 1 : -1])
                del built[-arity:]
                built.append(ListOpsTree(token, children))
            else:
                built.append(ListOpsTree(token))
        return built[0]

    def __repr__(self) -> str:
        return f"PackedTrees({len(self)} trees, {len(self.nodes)} nodes)"
