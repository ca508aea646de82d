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

import dataclasses
import heapq
import itertools
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

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

    __slots__ = ("op", "edges", "inputs", "outputs", "metas", "seq", "freed", "retained")

    def __init__(self, op: Op, edges: tuple, inputs: tuple, outputs: tuple, metas: tuple):
        self.op = op
        # per input: the Node that made it (its only output), an OutputEdge (one output of
        # a node with several), the leaf Tensor itself, or None when no gradient flows to it
        self.edges = edges
        self.inputs = inputs
        self.outputs = outputs
        self.metas = metas  # shape and dtype of each input, flat
        self.seq = next(_sequence)
        self.freed: bool | str = False  # or the name of the error that stopped a backward
        # weak references to the outputs' tensors that called retain_grad(), or None
        self.retained: list[weakref.ref[Tensor]] | None = None

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


class OutputEdge(NamedTuple):
    """An edge to output ``index`` of ``node``, an op with several outputs."""

    node: Node
    index: int


def _edge(t: Tensor):
    """Where the gradient of input ``t`` goes (see ``Node.edges``)."""
    fn = t.grad_fn
    if fn is not None:
        return fn if fn.op.n_outputs == 1 else OutputEdge(fn, t.cell.index)
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
    if len(tensors) == 1:  # an activation's output, a unary op's input: the common case
        return (Tensor(tensors[0].cell),)
    saved: list = [None] * len(tensors)
    for i in retain:
        saved[i] = Tensor(tensors[i].cell)
    return tuple(saved)


def backward(root: Tensor, grad: Tensor | None = None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires grad, and
    into the ``.grad`` of every non-leaf that called ``retain_grad()``."""
    found = _gradients(root, grad, retain_graph, "backward", finish=_as_constant)
    for leaf, g in found.values():
        if leaf._requires_grad:  # not frozen since the forward (as PyTorch's AccumulateGrad)
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
    if isinstance(inputs, Tensor):
        raise TypeError("grad: inputs must be a list of leaf tensors, got a single Tensor")
    for t in inputs:
        if not isinstance(t, Tensor) or t.grad_fn is not None or not t.requires_grad:
            raise ValueError("grad: inputs must be leaf tensors that require grad")
    found = _gradients(root, grad, retain_graph, "grad")
    return [found[id(t)].grad if id(t) in found else None for t in inputs]


class LeafGrad(NamedTuple):
    """A leaf and its gradient so far (``_Walk.leaf_grads``, by the leaf's id)."""

    leaf: Tensor
    grad: Tensor


@dataclasses.dataclass(slots=True)
class _Walk:
    """The state of one run of the backward graph (``_gradients``)."""

    waiting: dict[Node, int]  # per node: how many of its consumers have not run yet
    leaf_uses: dict[int, int]  # per leaf (by id): how many edges to it have not been run
    # per node whose gradient has started to arrive: the gradient of its output, or for
    # an op with several outputs a list with one gradient (or None) per output
    pending: dict[Node, Tensor | list]
    leaf_grads: dict[int, LeafGrad]
    finish: Callable[[Tensor], Tensor] | None  # applied to a leaf's finished gradient
    retain_graph: bool
    caller: str  # "backward" or "grad", for the messages
    ready: list = dataclasses.field(default_factory=list)  # heap of (-seq, node)


def _gradients(
    root: Tensor,
    grad: Tensor | None,
    retain_graph: bool,
    caller: str,
    finish: Callable[[Tensor], Tensor] | None = None,
) -> dict[int, LeafGrad]:
    """Run the backward graph from ``root``; returns {id(leaf): LeafGrad(leaf, gradient)}.

    ``finish`` is applied to a leaf's gradient as soon as the last node feeding it has
    run, not at the end: ``backward`` makes it a constant there. Left evictable until the
    end, a finished weight gradient is a small, cheap-looking victim whose recipe reaches
    back through the whole (by then evicted and dead) backward chain, and rebuilding it
    recomputes that chain.
    """
    grad = _root_gradient(root, grad, caller)
    if root.grad_fn is None:
        grad = grad.detach()
        return {id(root): LeafGrad(root, grad if finish is None else finish(grad))}
    node = root.grad_fn
    waiting, leaf_uses = _count_consumers(node)
    walk = _Walk(waiting, leaf_uses, {}, {}, finish, retain_graph, caller)
    if node.op.n_outputs == 1:
        walk.pending[node] = grad.detach()
    else:
        walk.pending[node] = slots = [None] * node.op.n_outputs
        slots[root.cell.index] = grad.detach()
    with no_grad():
        try:
            _run(walk, node)
        except BaseException as error:
            if node.freed is True:  # part of the graph is gone: a retry must say why
                node.freed = type(error).__name__
            raise
    return walk.leaf_grads


def _run(walk: _Walk, node: Node) -> None:
    """Run ``node`` and then every node whose consumers have all run, latest first.

    This loop runs once per node, so it is written for speed: a single-output node's
    gradient is kept bare (a list only for several outputs), a node that becomes ready
    when no other is waiting runs next without going through the heap (the heap would
    pop it first anyway), and a one-input node's bare gradient is passed on without a
    zip or a one-element tuple."""
    waiting, pending, ready = walk.waiting, walk.pending, walk.ready
    retain_graph, caller = walk.retain_graph, walk.caller
    while True:
        incoming = pending.pop(node)
        if node.retained is not None and caller == "backward":
            _retain(node, incoming)
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
            elif g is None and (kind is Node or kind is OutputEdge):  # no gradient for it
                following = _no_gradient(walk, edge, following)
                continue
            elif kind is OutputEdge:
                target = _send_to_output(edge, g, pending)
            elif edge is not None:  # g: the leaf's sum, so that what it replaced dies now
                g = _send_to_leaf(walk, edge, g)
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
            _, node = heapq.heappop(ready)
        else:
            return


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
    if allocator_module.CHECK_OPS or op.check_results:
        check_gradients(node, result if type(result) is tuple else (result,))
    return pairs, result


def _retain(node: Node, incoming: Tensor | list) -> None:
    """Add the gradient of each output of ``node`` whose tensor called ``retain_grad()``
    to that tensor's ``.grad`` (a constant: it is kept, as a leaf's is)."""
    for ref in node.retained:
        t = ref()
        if t is None or t.grad_fn is not node:
            continue
        g = incoming if node.op.n_outputs == 1 else incoming[t.cell.index]
        if g is not None:
            t._grad = _as_constant(g if t._grad is None else ops.add(t._grad, g))


def _send_to_output(edge: OutputEdge, g: Tensor, pending: dict) -> Node:
    """Hand ``g`` to one output of a node with several; returns the node."""
    target, index = edge
    slots = pending.get(target)
    if slots is None:
        slots = pending[target] = [None] * target.op.n_outputs
    slots[index] = g if slots[index] is None else ops.add(slots[index], g)
    return target


def _no_gradient(walk: _Walk, edge: Node | OutputEdge, following: Node | None) -> Node | None:
    """A consumer ran and sent no gradient (None) to ``edge``'s node: it counts as run all
    the same, and when it was the last, the node becomes ready, or is skipped when no
    consumer sent it anything (``_skip``). Returns ``following`` (see ``_run``), pushed to
    the heap when another node becomes ready."""
    target = edge if type(edge) is Node else edge.node
    left = walk.waiting[target] = walk.waiting[target] - 1
    if left:
        return following
    ready = walk.ready
    if following is not None:
        heapq.heappush(ready, (-following.seq, following))
    if target in walk.pending:
        heapq.heappush(ready, (-target.seq, target))
    else:  # no consumer sent it a gradient: it does not run
        for reached in _skip(walk, target):
            heapq.heappush(ready, (-reached.seq, reached))
    return None


def _send_to_leaf(walk: _Walk, leaf: Tensor, g: Tensor | None) -> Tensor | None:
    """Add ``g`` to a leaf's gradient; after the leaf's last use, ``finish`` it. Returns
    the leaf's gradient as it now stands (None when ``g`` was None).

    Under ``backward`` (whose ``finish`` makes a constant), a leaf with several uses
    (an RNN's weights, once per time step) sums its gradients as PyTorch's
    AccumulateGrad does: the first is copied into a constant of the walk's own
    (``_accumulator``) and the others are added into it in place (``_add_into``), not
    as ops: no storage, recipe or backward node per use, nothing to recompute (a
    partial sum's recipe would reach back through the whole backward chain), and no
    new buffer per sum. The sums are ``ops.add``'s, in the same order, to the bit."""
    key = id(leaf)
    left = walk.leaf_uses[key] = walk.leaf_uses[key] - 1
    leaf_grads, finish = walk.leaf_grads, walk.finish
    if g is not None:
        so_far = leaf_grads.get(key)
        if finish is None:  # ``grad``: the sums are ops, and nothing is finished
            if so_far is not None:
                g = ops.add(so_far.grad, g)
        elif so_far is None:
            g = finish(g) if left == 0 else _accumulator(g)
        elif _add_into(so_far.grad, g):
            return so_far.grad
        else:  # a sum of another shape or dtype (an op's bug): an op, then owned again
            g = finish(ops.add(so_far.grad, g))
        leaf_grads[key] = LeafGrad(leaf, g)
        return g
    if left == 0 and finish is not None and key in leaf_grads:
        leaf_grads[key] = LeafGrad(leaf, finish(leaf_grads[key].grad))
    return None


def _accumulator(g: Tensor) -> Tensor:
    """A leaf's first gradient copied into a constant that nothing else holds, for its
    later gradients to be added into (``g`` itself may be held elsewhere: an add's
    backward sends the same tensor to both of its inputs)."""
    with no_grad(), as_constants():
        return ops.copy(g)


def _add_into(total: Tensor, g: Tensor) -> bool:
    """``total += g`` in place, ``total`` a constant made by ``_accumulator`` or
    ``finish`` from an op's fresh output; False, with nothing done, where ``ops.add``
    would make another shape or dtype or refuse the devices. ``g`` is read as any value
    is (rebuilt first if it was evicted)."""
    storage = total.cell  # a constant of its own: never evicted, never a view
    cell = g.cell
    if cell.shape != storage.shape or cell.dtype != storage.dtype or g.device != total.device:
        return False
    addend = cell.storage.allocator.read(cell)
    storage.allocator.xp.add(storage.buffer, addend, out=storage.buffer)
    return True


def _freed_error(node: Node, caller: str) -> RuntimeError:
    if isinstance(node.freed, str):  # the name of the error that stopped a backward
        return RuntimeError(
            f"{caller}: the graph through {node.op.name} was freed by a backward that "
            f"stopped part-way ({node.freed}); run the forward again (retain_graph=True "
            "keeps a graph through such a stop)"
        )
    return RuntimeError(
        f"{caller}: the graph through {node.op.name} was already used and freed; "
        "pass retain_graph=True to the first backward to run it twice"
    )


def _count_error(result: tuple, edges: tuple, op: Op, caller: str) -> ValueError:
    return ValueError(
        f"{caller}: {op.name}'s backward returned {len(result)} gradients for {len(edges)} inputs"
    )


def _skip(walk: _Walk, node: Node) -> list[Node]:
    """Pass over a node none of whose consumers sent a gradient (a backward may return None
    for an input): it does not run, but its inputs count it as a consumer that has run, or
    the nodes it feeds would wait for ever and lose what their other consumers sent. Nodes
    reached only through skipped ones are skipped too; a leaf whose last use this was has
    its gradient finished. Returns the nodes made ready (some gradient reached them)."""
    waiting, pending, leaf_uses = walk.waiting, walk.pending, walk.leaf_uses
    reached: list[Node] = []
    stack = [node]
    while stack:
        node = stack.pop()
        if not walk.retain_graph:
            node.inputs = node.outputs = ()
            node.freed = True
        for edge in node.edges:
            kind = type(edge)
            if kind is Node or kind is OutputEdge:
                target = edge if kind is Node else edge.node
                left = waiting[target] = waiting[target] - 1
                if left == 0:
                    (reached if target in pending else stack).append(target)
            elif edge is not None:  # a leaf
                key = id(edge)
                left = leaf_uses[key] = leaf_uses[key] - 1
                if left == 0 and walk.finish is not None and key in walk.leaf_grads:
                    done = walk.finish(walk.leaf_grads[key].grad)
                    walk.leaf_grads[key] = LeafGrad(edge, done)
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
        if g is not None and not isinstance(g, Tensor):
            raise TypeError(
                f"{node.op.name}: backward returned a {type(g).__name__} as the gradient of "
                f"input {i}: return Tensors, computed with minidtr ops (or None)"
            )
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
    """``leaf.grad += g``, stored as a constant (``g``, finished, is one already). Reads
    and writes the slot behind the ``grad`` property (whose checks are for users)."""
    if leaf._grad is None:
        leaf._grad = g
        return
    with no_grad():
        leaf._grad = _as_constant(ops.add(leaf._grad, g))


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
            if kind is Node or kind is OutputEdge:
                target = edge if kind is Node else edge.node
                if target in counts:
                    counts[target] += 1
                else:
                    counts[target] = 1
                    stack.append(target)
            elif edge is not None:  # a leaf tensor
                key = id(edge)
                leaf_uses[key] = leaf_uses.get(key, 0) + 1
    return counts, leaf_uses
