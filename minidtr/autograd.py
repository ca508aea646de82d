"""Reverse mode: the backward graph and ``backward()``.

Each differentiable op application with a grad-requiring input gets a
``Node`` holding the op, an edge per input (the producing node and output
index, a leaf tensor, or None) and the retained inputs/outputs it declared,
as Tensor handles. Those handles are external references: the allocator will
not eagerly free what backward still needs, and drops it as soon as a node has
run (unless ``retain_graph``). Gradients are computed with minidtr ops under
``no_grad``, so they are ordinary tensors with recipes, rematerializable too.

The traversal is iterative (no recursion limit) and deterministic: nodes run
in decreasing creation order once all their consumers have run. A node none of
whose consumers sent it a gradient (a backward may return None) does not run, and
counts as run for its own inputs.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import ops
from .modes import as_constants, grad_enabled, no_grad
from .runtime import allocator as allocator_module
from .tensor import Tensor, ones_like  # defined before tensor.py imports the ops

if TYPE_CHECKING:
    from .ops.op import Op

__all__ = ["Node", "backward", "grad", "grad_enabled", "no_grad"]

_sequence = itertools.count()


class Node:
    """One op application in the backward graph, and the context its op's ``backward``
    receives: ``inputs`` / ``outputs`` hold Tensor handles at the indices the op retains
    (None elsewhere), ``in_shapes`` / ``in_dtypes`` describe its inputs, ``needs_grad``
    says which inputs a gradient flows back to (the others may get None).

    The op itself stays a description (static attributes only): everything about one
    application lives here. A node keeps the inputs' shapes and dtypes, not their cells:
    a cell would keep its storage's metadata alive for as long as the graph. They are
    kept in one flat tuple (shape, dtype, shape, dtype, ...): a node is made for every
    op with grad on, and each object it holds is one more for the cycle collector."""

    __slots__ = ("op", "edges", "inputs", "outputs", "metas", "seq", "freed")

    def __init__(self, op: Op, edges: tuple, inputs: tuple, outputs: tuple, metas: tuple):
        self.op = op
        # per input: the Node that made it (its only output), (Node, output index), the
        # leaf Tensor itself, or None when no gradient flows to it
        self.edges = edges
        self.inputs = inputs
        self.outputs = outputs
        self.metas = metas  # shape and dtype of each input, flat
        self.seq = next(_sequence)
        self.freed = False

    @property
    def in_shapes(self) -> tuple[tuple[int, ...], ...]:
        return self.metas[0::2]

    @property
    def in_dtypes(self) -> tuple:
        return self.metas[1::2]

    @property
    def needs_grad(self) -> tuple[bool, ...]:
        return tuple([edge is not None for edge in self.edges])

    def __repr__(self) -> str:
        return f"Node({self.op.name}, seq={self.seq})"


def _edge(t: Tensor):
    """Where the gradient of input ``t`` goes (see ``Node.edges``)."""
    fn = t.grad_fn
    if fn is not None:
        return fn if fn.op.n_outputs == 1 else (fn, t.cell.index)
    return t if t._requires_grad else None


def attach(op: Op, inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...]) -> None:
    """Record a backward node for an op application whose inputs need gradients.

    Runs once per op with grad on, so it is written for speed: no generator
    expressions, the common one- and two-input cases without lists, and saved handles
    made only at the retained indices."""
    single = len(outputs) == 1
    if single:
        if outputs[0].cell.dtype.kind != "f":
            return  # an integer or bool result is not differentiable: nothing to attach to
    else:
        for t in outputs:
            if t.cell.dtype.kind == "f":
                break
        else:
            return
    n = len(inputs)
    if n == 1:
        a = inputs[0]
        cell = a.cell
        edges: tuple = (_edge(a),)
        metas: tuple = (cell.shape, cell.dtype)
    elif n == 2:
        a, b = inputs
        ca, cb = a.cell, b.cell
        edges = (_edge(a), _edge(b))
        metas = (ca.shape, ca.dtype, cb.shape, cb.dtype)
    else:
        edge_list: list = []
        meta_list: list = []
        for t in inputs:
            cell = t.cell
            edge_list.append(_edge(t))
            meta_list.append(cell.shape)
            meta_list.append(cell.dtype)
        edges, metas = tuple(edge_list), tuple(meta_list)
    retain_in, retain_out = op.retain_inputs, op.retain_outputs
    node = Node(
        op,
        edges,
        _saved(inputs, retain_in) if retain_in else _NONES[n],
        _saved(outputs, retain_out) if retain_out else _NONES[len(outputs)],
        metas,
    )
    if single:
        output = outputs[0]
        output.grad_fn = node
        output._requires_grad = True
        return
    for t in outputs:
        if t.cell.dtype.kind == "f":  # integer and bool results are not differentiable
            t.grad_fn = node
            t._requires_grad = True


class _Nones(dict):
    """n -> a tuple of n Nones, made once per n."""

    def __missing__(self, n: int) -> tuple:
        nones = self[n] = (None,) * n
        return nones


_NONES = _Nones()


def _saved(tensors: tuple[Tensor, ...], retain: tuple[int, ...]) -> tuple:
    """New handles (without a grad_fn, so no cycle) on the retained values, None elsewhere."""
    saved: list = [None] * len(tensors)
    for i in retain:
        saved[i] = Tensor(tensors[i].cell)
    return tuple(saved)


def backward(root: Tensor, grad: Tensor | None = None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
    found = _gradients(root, grad, retain_graph, "backward", finish=_as_constant)
    for leaf, g in found.values():
        _accumulate_leaf(leaf, g)
    if not retain_graph and root.grad_fn is not None:
        _drop_recipe_of_scalar(root)


def _drop_recipe_of_scalar(root: Tensor) -> None:
    """A single-element root (a loss) whose graph was used up becomes a constant, if it is
    resident. Its recipe would keep every value of the step alive, this step's parameters
    among them (an optimizer step replaces them, and a kept loss, say in a list, would keep
    each step's set counted); its value costs a few bytes to keep."""
    cell = root.cell
    if root.size == 1 and not cell.is_view:
        cell.storage.allocator.make_constant(cell.storage, if_resident=True)


def grad(
    root: Tensor, inputs: Sequence[Tensor], grad: Tensor | None = None, retain_graph: bool = False
) -> list[Tensor | None]:
    """d(root)/d(input) for each leaf in ``inputs``, returned rather than accumulated.

    The results are ordinary tensors with recipes (evictable, recomputable); None for an
    input the root does not depend on. ``.grad`` fields are left alone.
    """
    for t in inputs:
        if t.grad_fn is not None or not t.requires_grad:
            raise ValueError("grad: inputs must be leaf tensors that require grad")
    found = _gradients(root, grad, retain_graph, "grad")
    return [found[id(t)][1] if id(t) in found else None for t in inputs]


def _gradients(
    root: Tensor,
    grad: Tensor | None,
    retain_graph: bool,
    caller: str,
    finish: Callable[[Tensor], Tensor] | None = None,
) -> dict[int, tuple[Tensor, Tensor]]:
    """Run the backward graph from ``root``; returns {id(leaf): (leaf, gradient)}.

    ``finish`` is applied to a leaf's gradient as soon as the last node feeding it has
    run, not at the end: ``backward`` makes it a constant there. Left evictable until the
    end, a finished weight gradient is a small, cheap-looking victim whose recipe reaches
    back through the whole (by then evicted and dead) backward chain, and rebuilding it
    recomputes that chain.

    This loop runs once per node, so it is written for speed: a single-output node's
    gradient is kept bare (a list only for several outputs), a node that becomes ready
    when no other is waiting runs next without going through the heap (the heap would
    pop it first anyway), and a one-input node's bare gradient is passed on without a
    zip or a one-element tuple.
    """
    grad = _root_gradient(root, grad, caller)
    if root.grad_fn is None:
        grad = grad.detach()
        return {id(root): (root, grad if finish is None else finish(grad))}
    node = root.grad_fn
    waiting, leaf_uses = _count_consumers(node)
    # per node whose gradient has started to arrive: the gradient of its output, or for
    # an op with several outputs a list with one gradient (or None) per output
    pending: dict[Node, Tensor | list] = {}
    if node.op.n_outputs == 1:
        pending[node] = grad.detach()
    else:
        pending[node] = slots = [None] * node.op.n_outputs
        slots[root.cell.index] = grad.detach()
    leaf_grads: dict[int, tuple[Tensor, Tensor]] = {}
    ready: list = []  # a heap of (-seq, node): the latest node first (seqs are unique)
    state = (waiting, pending, leaf_uses, leaf_grads, finish, retain_graph)  # for _skip
    with no_grad():
        while True:
            incoming = pending.pop(node)
            pairs, result = _run_node(node, incoming, caller)
            if not retain_graph:
                node.inputs = node.outputs = ()  # what the node saved dies here
                node.freed = True
            following = None  # the one node made ready by this one, while the heap is empty
            for edge, g in pairs:
                kind = type(edge)
                if kind is Node and g is not None:  # the common case, spelled out
                    target = edge
                    if target in pending:  # a second consumer's gradient: sum them
                        pending[target] = ops.add(pending[target], g)
                    else:
                        pending[target] = g
                elif g is None and (kind is Node or kind is tuple):  # no gradient for it
                    following = _no_gradient(edge, following, ready, state)
                    continue
                elif kind is tuple:
                    target = _send_to_output(edge, g, pending)
                elif edge is not None:  # g: the leaf's sum, so that what it replaced dies now
                    g = _send_to_leaf(edge, g, leaf_uses, leaf_grads, finish)
                    continue
                else:
                    continue
                left = waiting[target] - 1
                waiting[target] = left
                if left == 0:
                    if following is None and not ready:
                        following = target
                    else:
                        if following is not None:
                            heapq.heappush(ready, (-following.seq, following))
                            following = None
                        heapq.heappush(ready, (-target.seq, target))
            # the gradients this node returned and did not pass on die here (the last
            # first), then the incoming one: the order of the releases in a recorded trace.
            # Those passed on are held by pending, the last one also by g until the next
            # node's loop.
            pairs = result = None  # noqa: F841 (it releases them, in this order)
            incoming = None
            if following is not None:
                node = following
            elif ready:
                node = heapq.heappop(ready)[1]
            else:
                break
    return leaf_grads


def _run_node(node: Node, incoming: Tensor | list, caller: str) -> tuple[Iterable, Any]:
    """Run ``node``'s backward on the gradient of its output (a list of one per output
    for several); returns its gradients paired with its edges, checked, and what the
    backward returned (which the caller holds until the node is done: the order of the
    releases)."""
    op = node.op
    if node.freed:
        raise _freed_error(node, caller)
    result = op.backward(node, incoming if op.n_outputs == 1 else tuple(incoming))
    edges = node.edges
    if type(result) is tuple:
        if len(edges) != len(result):
            raise _count_error(result, edges, op, caller)
        pairs: Iterable = zip(edges, result)  # noqa: B905 (the lengths are checked)
    elif len(edges) == 1:
        pairs = ((edges[0], result),)
    else:
        raise _count_error((result,), edges, op, caller)
    if allocator_module.CHECK_OPS:
        check_gradients(node, result if type(result) is tuple else (result,))
    return pairs, result


def _send_to_output(edge: tuple, g: Tensor, pending: dict) -> Node:
    """Hand ``g`` to one output (of index ``edge[1]``) of a node with several; returns the
    node."""
    target, index = edge
    slots = pending.get(target)
    if slots is None:
        slots = pending[target] = [None] * target.op.n_outputs
    slots[index] = g if slots[index] is None else ops.add(slots[index], g)
    return target


def _no_gradient(edge: Node | tuple, following: Node | None, ready: list, state: tuple):
    """A consumer ran and sent no gradient (None) to ``edge``'s node: it counts as run all
    the same, and when it was the last, the node becomes ready, or is skipped when no
    consumer sent it anything (``_skip``). Returns ``following`` (see ``_gradients``),
    pushed to the heap when another node becomes ready."""
    waiting, pending = state[0], state[1]
    target = edge if type(edge) is Node else edge[0]
    left = waiting[target] = waiting[target] - 1
    if left:
        return following
    if following is not None:
        heapq.heappush(ready, (-following.seq, following))
    if target in pending:
        heapq.heappush(ready, (-target.seq, target))
    else:  # no consumer sent it a gradient: it does not run
        for reached in _skip(target, *state):
            heapq.heappush(ready, (-reached.seq, reached))
    return None


def _send_to_leaf(
    leaf: Tensor,
    g: Tensor | None,
    leaf_uses: dict[int, int],
    leaf_grads: dict[int, tuple[Tensor, Tensor]],
    finish: Callable[[Tensor], Tensor] | None,
) -> Tensor | None:
    """Add ``g`` to a leaf's gradient; after the leaf's last use, ``finish`` it. Returns
    the leaf's gradient as it now stands (None when ``g`` was None)."""
    key = id(leaf)
    left = leaf_uses[key] - 1
    leaf_uses[key] = left
    if g is not None:
        if key in leaf_grads:
            g = ops.add(leaf_grads[key][1], g)
        if finish is not None and left == 0:
            g = finish(g)
        leaf_grads[key] = (leaf, g)
        return g
    if left == 0 and finish is not None and key in leaf_grads:
        leaf_grads[key] = (leaf, finish(leaf_grads[key][1]))
    return None


def _freed_error(node: Node, caller: str) -> RuntimeError:
    return RuntimeError(
        f"{caller}: the graph through {node.op.name} was already used and freed; "
        "pass retain_graph=True to the first backward to run it twice"
    )


def _count_error(result: tuple, edges: tuple, op: Op, caller: str) -> ValueError:
    return ValueError(
        f"{caller}: {op.name}'s backward returned {len(result)} gradients for {len(edges)} inputs"
    )


def _skip(
    node: Node,
    waiting: dict[Node, int],
    pending: dict,
    leaf_uses: dict[int, int],
    leaf_grads: dict[int, tuple[Tensor, Tensor]],
    finish: Callable[[Tensor], Tensor] | None,
    retain_graph: bool,
) -> list[Node]:
    """Pass over a node none of whose consumers sent a gradient (a backward may return None
    for an input): it does not run, but its inputs count it as a consumer that has run, or
    the nodes it feeds would wait for ever and lose what their other consumers sent. Nodes
    reached only through skipped ones are skipped too; a leaf whose last use this was has
    its gradient finished. Returns the nodes made ready (some gradient reached them)."""
    reached: list[Node] = []
    stack = [node]
    while stack:
        node = stack.pop()
        if not retain_graph:
            node.inputs = node.outputs = ()
            node.freed = True
        for edge in node.edges:
            kind = type(edge)
            if kind is Node or kind is tuple:
                target = edge if kind is Node else edge[0]
                left = waiting[target] = waiting[target] - 1
                if left == 0:
                    (reached if target in pending else stack).append(target)
            elif edge is not None:  # a leaf
                key = id(edge)
                left = leaf_uses[key] = leaf_uses[key] - 1
                if left == 0 and finish is not None and key in leaf_grads:
                    leaf_grads[key] = (edge, finish(leaf_grads[key][1]))
    return reached


def _root_gradient(root: Tensor, grad: Tensor | None, caller: str) -> Tensor:
    """The gradient backward starts from: ``grad`` checked against ``root``, or ones."""
    if not root.requires_grad:
        raise RuntimeError(f"{caller}: this tensor does not require grad and has no grad_fn")
    if grad is None:
        if root.size != 1:
            raise RuntimeError(
                f"{caller}: grad can be omitted only for a single-element output, got shape "
                f"{root.shape}; pass grad="
            )
        grad = ones_like(root)
    elif not isinstance(grad, Tensor):
        raise TypeError(f"{caller}: grad must be a Tensor, got {type(grad).__name__}")
    if grad.shape != root.shape or grad.dtype != root.dtype:
        raise ValueError(
            f"{caller}: grad has shape {grad.shape} {grad.dtype}, the output {root.shape} "
            f"{root.dtype}"
        )
    return grad


def check_gradients(node: Node, result: tuple) -> None:
    """Raise if a backward returned a gradient unlike its input (``CHECK_OPS``)."""
    shapes, dtypes = node.in_shapes, node.in_dtypes
    for i, (edge, g) in enumerate(zip(node.edges, result, strict=True)):
        shape, dtype = shapes[i], dtypes[i]
        if edge is not None and g is not None and (g.shape != shape or g.dtype != dtype):
            raise AssertionError(
                f"{node.op.name}: gradient of input {i} has shape {g.shape} {g.dtype}, the "
                f"input {shape} {dtype} (a bug in the op's backward)"
            )


def _as_constant(g: Tensor) -> Tensor:
    """A finished gradient as a contiguous constant.

    Nothing recomputes a finished gradient more cheaply than keeping it, and its recipe
    would keep the whole graph alive (and, after an optimizer step, the old parameters,
    which copy-on-write leaves in place). A gradient that is a view (a transpose, a
    broadcast) is copied, so optimizers work on arrays in the parameter's own layout.
    """
    if g.cell.is_view or not g.cell.contiguous:
        with no_grad(), as_constants():
            return ops.copy(g)
    storage = g.cell  # not a view: its own storage
    storage.allocator.make_constant(storage)
    return g


def _accumulate_leaf(leaf: Tensor, g: Tensor) -> None:
    """``leaf.grad += g``, stored as a constant (``g``, finished, is one already)."""
    if leaf.grad is None:
        leaf.grad = g
        return
    with no_grad():
        leaf.grad = _as_constant(ops.add(leaf.grad, g))


def _count_consumers(root: Node) -> tuple[dict[Node, int], dict[int, int]]:
    """For every node reachable from ``root``, how many reachable nodes feed it a gradient;
    and for every leaf (by id), how many edges of reachable nodes lead to it."""
    counts: dict[Node, int] = {root: 0}
    leaf_uses: dict[int, int] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        for edge in node.edges:
            kind = type(edge)
            if kind is Node or kind is tuple:
                target = edge if kind is Node else edge[0]
                if target in counts:
                    counts[target] += 1
                else:
                    counts[target] = 1
                    stack.append(target)
            elif edge is not None:  # a leaf tensor
                key = id(edge)
                leaf_uses[key] = leaf_uses.get(key, 0) + 1
    return counts, leaf_uses
