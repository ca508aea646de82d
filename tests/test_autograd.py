"""The Tensor API and reverse mode: creation, dtypes, operators, indexing, no_grad, gradient
accumulation, explicit output gradients, long chains, retain_graph, md.grad."""

import numpy as np
import pytest

import minidtr as md


def test_creation_dtypes_follow_the_contract():
    assert md.tensor([1.0, 2.0]).dtype == md.float32
    assert md.tensor([1, 2]).dtype == md.int64
    assert md.tensor([True]).dtype == md.bool_
    assert md.tensor(np.zeros(3)).dtype == md.float64  # arrays keep their dtype
    assert md.tensor(np.zeros(3), dtype=np.float32).dtype == md.float32
    assert md.zeros((2, 3)).shape == (2, 3) and md.ones(4).dtype == md.float32
    assert md.arange(5).numpy().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(TypeError, match="floating-point"):
        md.tensor([1, 2], requires_grad=True)


def test_numpy_returns_a_copy_that_cannot_corrupt_recipes():
    x = md.tensor(np.arange(3.0))
    y = x * 2
    out = y.numpy()
    out[:] = -1
    np.testing.assert_array_equal(y.numpy(), [0.0, 2.0, 4.0])
    data = np.arange(3.0)
    z = md.tensor(data)
    data[:] = 7
    np.testing.assert_array_equal(z.numpy(), [0.0, 1.0, 2.0])


def test_operators_with_scalars_keep_the_tensor_dtype():
    x = md.tensor(np.ones(3, np.float32))
    for y in (x + 1, 1 + x, x - 2.5, 2.5 - x, x * 3, 3 * x, x / 2, 2 / x, x**2, -x):
        assert y.dtype == md.float32
    np.testing.assert_array_equal((2 - x).numpy(), [1, 1, 1])
    assert (x > 0.5).dtype == md.bool_ and not (x > 0.5).requires_grad
    assert md.tensor(np.ones(3)) @ md.tensor(np.ones(3)) is not None


def test_mismatched_dtypes_and_shapes_name_the_op():
    a = md.tensor(np.ones((2, 3), np.float32))
    b = md.tensor(np.ones((2, 3), np.float64))
    with pytest.raises(md.DTypeError, match=r"add: dtypes differ.*\(2, 3\).*float32.*float64"):
        a + b
    with pytest.raises(md.ShapeError, match=r"matmul: inner dimensions differ \(3 vs 2\)"):
        a @ md.tensor(np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(2, 3\)"):
        a.reshape(4, 2)


def test_matmul_error_names_the_shapes_passed_not_the_promoted_ones():
    v = md.tensor(np.ones(4, np.float32))
    w = md.tensor(np.ones((3, 2), np.float32))
    with pytest.raises(
        md.ShapeError,
        match=r"matmul: inner dimensions differ \(4 vs 3\) "
        r"\(input shapes \[\(4,\), \(3, 2\)\]",
    ):
        v @ w
    with pytest.raises(md.ShapeError, match=r"\(2 vs 4\) \(input shapes \[\(3, 2\), \(4,\)\]"):
        w @ v
    np.testing.assert_array_equal((v @ md.tensor(np.ones((4, 2), np.float32))).numpy(), [4, 4])
    with pytest.raises(md.DTypeError, match=r"dtypes differ.*\(input shapes \[\(4,\), \(4,\)\]"):
        v @ md.tensor(np.ones(4, np.float64))
    with pytest.raises(md.DTypeError, match=r"floating-point.*\(input shapes \[\(2,\), \(2, 1\)\]"):
        md.tensor([1, 2]) @ md.tensor([[1], [2]])


def test_matmul_batches_broadcast_or_fail_by_name():
    """Equal batch shapes skip ``np.broadcast_shapes``; different ones broadcast, or fail
    naming the op and the shapes."""
    a = md.tensor(np.ones((2, 3, 4), np.float32), requires_grad=True)
    b = md.tensor(np.ones((1, 4, 5), np.float32), requires_grad=True)
    assert (a @ b).shape == (2, 3, 5)
    (a @ b).sum().backward()
    assert a.grad.shape == (2, 3, 4) and b.grad.shape == (1, 4, 5)
    with pytest.raises(
        md.ShapeError,
        match=r"matmul: batch dimensions cannot be broadcast "
        r"\(input shapes \[\(2, 3, 4\), \(5, 4, 2\)\]",
    ):
        a @ md.tensor(np.ones((5, 4, 2), np.float32))


def test_gradient_of_a_tensor_used_twice_accumulates():
    x = md.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = (x * x + x).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * np.array([1.0, 2.0, 3.0]) + 1)


def test_grads_accumulate_across_backward_calls():
    x = md.tensor(np.array([1.0, 2.0]), requires_grad=True)
    (x * 3).sum().backward()
    (x * 4).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [7.0, 7.0])


def test_broadcasting_reduces_gradients_to_each_input_shape():
    a = md.tensor(np.ones((2, 3)), requires_grad=True)
    b = md.tensor(np.ones(3), requires_grad=True)
    c = md.tensor(np.ones((2, 1)), requires_grad=True)
    ((a * b + c) * 2).sum().backward()
    assert a.grad.shape == (2, 3) and b.grad.shape == (3,) and c.grad.shape == (2, 1)
    np.testing.assert_array_equal(b.grad.numpy(), [4.0, 4.0, 4.0])
    np.testing.assert_array_equal(c.grad.numpy(), [[6.0], [6.0]])


def test_backward_with_an_explicit_output_gradient():
    x = md.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * x
    y.backward(md.tensor(np.array([10.0, 100.0])))
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 400.0])
    with pytest.raises(RuntimeError, match="single-element"):
        (x * x).backward()
    with pytest.raises(ValueError, match="grad has shape"):
        (x * x).backward(md.tensor(np.ones(3)))


def test_a_ten_thousand_op_chain_backpropagates_without_recursion():
    x = md.tensor(np.array([0.5]), requires_grad=True)
    h = x
    for _ in range(10_000):
        h = h * 1.0001
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001**10_000], rtol=1e-9)


def test_backward_order_is_deterministic():
    def grads():
        md.manual_seed(0)
        w = md.tensor(np.linspace(-1, 1, 12).reshape(3, 4), requires_grad=True)
        x = md.tensor(np.linspace(0, 1, 8).reshape(2, 4))
        h = md.tanh(x @ w.T)
        loss = (h * h).sum() + md.dropout(h, 0.5).sum() + h.max()
        loss.backward()
        return w.grad.numpy()

    assert grads().tobytes() == grads().tobytes()


def test_nodes_run_in_decreasing_creation_order(monkeypatch):
    """Every node that gets a gradient runs once, the latest first: a diamond with branches
    of different lengths, a value used three times, an op with two outputs and a leaf
    reached by several paths (the engine's shortcut past the heap must not reorder it)."""
    from minidtr import autograd

    ran: list[int] = []
    checked = autograd.check_gradients
    monkeypatch.setattr(
        autograd,
        "check_gradients",
        lambda node, result: (ran.append(node.seq), checked(node, result)),
    )
    x = md.tensor(np.linspace(0.1, 0.9, 6).reshape(2, 3), requires_grad=True)
    a = md.tanh(x)
    b = md.exp(md.tanh(md.sigmoid(a)))
    c = a * a + a
    top, bottom = md.split(c + b, 2, axis=0)
    early, late = md.tanh(x), md.tanh(x)  # two nodes ready at once: the later leads to late
    loss = (top * bottom).sum() + md.tanh(x).sum() + bottom.sum()
    loss = loss + (md.sigmoid(early) + md.exp(late)).sum()
    reachable = set()
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node.seq not in reachable:
            reachable.add(node.seq)
            for edge in node.edges:
                if isinstance(edge, autograd.Node):
                    stack.append(edge)
                elif isinstance(edge, tuple):
                    stack.append(edge[0])
    loss.backward()
    assert ran == sorted(reachable, reverse=True)


class _Copy(md.ops.op.Op):
    """A copy, for test ops that differ in their backward only."""

    def infer(self, x):
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return x.copy()


class _TwoGradients(_Copy):
    name = "two_gradients"

    def backward(self, ctx, g):
        return g, g


def test_a_backward_returning_the_wrong_number_of_gradients_names_the_op():
    x = md.tensor(np.ones(3), requires_grad=True)
    y = md.ops.op.apply(_TwoGradients(), x)
    with pytest.raises(ValueError, match="two_gradients's backward returned 2 gradients for 1"):
        y.sum().backward()


def test_graph_is_freed_after_backward_unless_retained():
    x = md.tensor(np.array([2.0]), requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [8.0])
    with pytest.raises(RuntimeError, match="already used and freed"):
        y.backward()


def test_no_grad_and_detach_record_nothing():
    x = md.tensor(np.ones(2), requires_grad=True)
    with md.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    z = x.detach()
    assert not z.requires_grad and z.storage is x.storage
    with pytest.raises(RuntimeError, match="does not require grad"):
        (z * 2).sum().backward()


def test_one_no_grad_object_entered_inside_itself():
    """Its tokens are a stack: leaving the outer block failed (a token used twice) and
    left gradients off for the rest of the thread."""
    x = md.tensor(np.ones(2), requires_grad=True)
    off = md.no_grad()
    with off:
        with off:
            assert not (x * 2).requires_grad
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad


def test_no_grad_on_a_generator_function_holds_at_each_resumption():
    """A generator's body runs at each next, not at the call: the mode is set around each
    resumption (a decorator around the call alone recorded every yielded value's graph),
    and the caller's mode in between."""
    x = md.tensor(np.ones(2), requires_grad=True)

    @md.no_grad()
    def batches():
        sent = yield x * 2
        assert not (x * sent).requires_grad
        try:
            yield x * 3
        except ValueError:
            yield x * 4
        return "done"

    made = batches()
    assert not next(made).requires_grad
    assert (x * 2).requires_grad  # the caller's mode between resumptions
    assert not made.send(2.0).requires_grad
    assert not made.throw(ValueError()).requires_grad
    with pytest.raises(StopIteration) as stop:
        next(made)
    assert stop.value.value == "done" and (x * 2).requires_grad
    with pytest.raises(TypeError, match=r"no_grad\(\) takes no arguments: decorate with"):
        md.no_grad(batches)


def test_a_backward_stopped_part_way_says_so_when_run_again():
    """A BudgetError mid-backward frees what the backward had passed: running it again
    says that a stopped backward freed the graph, not that the first one succeeded."""
    x = md.tensor(np.ones((128, 16), np.float32))
    ws = [md.tensor(np.eye(16, dtype=np.float32), requires_grad=True) for _ in range(10)]
    h = x
    for w in ws:
        h = md.tanh(h @ w)
    loss = (h * h).mean()
    memory = md.current_runtime().stats()["memory"]
    with pytest.raises(md.BudgetError), md.Runtime(budget=int(memory * 0.3), max_slowdown=None):
        loss.backward()
    with pytest.raises(
        RuntimeError,
        match=r"^backward: the graph through mean was freed by a "
        r"backward that stopped part-way \(BudgetError\); run the forward again",
    ):
        loss.backward()


def test_the_grad_of_a_non_leaf_warns_and_retain_grad_fills_it():
    """As PyTorch: reading .grad of a non-leaf warns (naming retain_grad) and gives None;
    retain_grad() has backward fill it, accumulating over calls, for one output of a
    multi-output op and for the root too; md.grad leaves it alone."""
    import warnings

    x = md.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = x * 2.0
    with pytest.warns(
        UserWarning, match=r"not a leaf \(made by mul_scalar\).*retain_grad\(\)"
    ) as got:
        assert y.grad is None
    assert got[0].filename == __file__  # the warning points at the reading line
    a, b = md.split(y, 2)
    for t in (y, b):
        t.retain_grad()
    loss = (a * 3.0).sum() + (b * b).sum()
    loss.retain_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert y.grad is None and y.retains_grad and not a.retains_grad
        loss.backward(retain_graph=True)
        np.testing.assert_array_equal(y.grad.numpy(), [3.0, 3.0, 12.0, 16.0])
        np.testing.assert_array_equal(b.grad.numpy(), [12.0, 16.0])
        assert loss.grad.item() == 1.0 and y.grad.storage.constant
        loss.backward()
        np.testing.assert_array_equal(y.grad.numpy(), [6.0, 6.0, 24.0, 32.0])
        np.testing.assert_array_equal(x.grad.numpy(), [12.0, 12.0, 48.0, 64.0])
    c = x * 3.0
    c.retain_grad()
    md.grad(c.sum(), [x])
    assert c._grad is None
    with pytest.raises(RuntimeError, match="retain_grad: this tensor does not require grad"):
        md.tensor([1.0]).retain_grad()
    with pytest.raises(TypeError, match=".grad must be a Tensor or None"):
        x.grad = np.ones(4)


def test_grad_and_constant_modes_are_context_variables():
    """Each thread and each copied context has its own modes; a block restores what was
    there, also when nested, raised through or used as a decorator (recursively too)."""
    import contextvars
    import threading

    x = md.tensor(np.ones(2), requires_grad=True)
    seen = {}

    def other_thread():
        seen["grad"] = md.autograd.grad_enabled()
        seen["recorded"] = (x * 2).grad_fn is not None
        seen["constant"] = (x * 2).storage.constant

    with md.no_grad(), md.as_constants():
        assert not md.autograd.grad_enabled()
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert (x * 2).storage.constant
    assert seen == {"grad": True, "recorded": True, "constant": False}

    def in_copy():
        with md.no_grad():
            pass
        md.modes.GRAD_ENABLED.set(False)  # a change that stays inside the copy
        return (x * 2).grad_fn

    assert contextvars.copy_context().run(in_copy) is None
    assert (x * 2).grad_fn is not None and md.autograd.grad_enabled()

    with pytest.raises(KeyError), md.no_grad():
        with md.as_constants(), md.no_grad():
            assert not md.autograd.grad_enabled()
        assert not (x * 2).storage.constant
        raise KeyError
    assert md.autograd.grad_enabled()

    @md.no_grad()
    def depth(n):
        return (x * 2).grad_fn if n == 0 else depth(n - 1)

    assert depth(3) is None and (x * 2).grad_fn is not None


def test_leaf_gradients_become_contiguous_constants():
    """A finished .grad has no recipe (it would keep the graph alive) and the parameter's
    layout (the transposed view a matmul gradient produces is copied)."""
    w = md.tensor(np.ones((3, 4)), requires_grad=True)
    x = md.tensor(np.ones((2, 4)))
    (x @ w.T).sum().backward()
    assert w.grad.storage.constant and w.grad.cell.contiguous
    assert not w.grad.cell.is_view


class _ConstantOrder:
    """An allocator observer noting when storages are made and when they become constants."""

    def __init__(self):
        self.events: list[tuple[str, int]] = []

    def on_compute(self, recipe, cells):
        self.events += [("compute", c.storage.id) for c in cells]

    def on_make_constant(self, storage):
        self.events.append(("constant", storage.id))

    def __getattr__(self, name):
        return lambda *args: None


def test_a_leaf_gradient_becomes_a_constant_as_soon_as_it_is_final():
    """The last layer's weight gradient is final before backward reaches the first layer;
    it must not stay evictable (rebuilding it would replay the backward chain)."""
    rng = np.random.default_rng(0)
    x = md.tensor(rng.random((4, 3)))
    w1 = md.tensor(rng.random((3, 5)), requires_grad=True)
    w2 = md.tensor(rng.random((5, 2)), requires_grad=True)
    loss = ((x @ w1).tanh() @ w2).sum()
    allocator = x.storage.allocator
    observer = allocator.observer = _ConstantOrder()
    try:
        loss.backward()
    finally:
        allocator.observer = None
    w2_final = observer.events.index(
        ("constant", w2.grad.storage.id)
        if ("constant", w2.grad.storage.id) in observer.events
        else ("compute", w2.grad.storage.id)
    )
    w1_made = observer.events.index(("compute", w1.grad.storage.id))
    assert w2_final < w1_made
    assert w1.grad.storage.constant and w2.grad.storage.constant


def _recurrent_loss(w, steps=12, seed=0):
    """h = tanh(h @ w + x_t) over ``steps`` steps: ``w`` gets one gradient per step."""
    rng = np.random.default_rng(seed)
    h = md.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    loss = None
    for _ in range(steps):
        h = md.tanh(h @ w + md.tensor(rng.standard_normal((4, 6)).astype(np.float32)))
        term = (h * h).sum()
        loss = term if loss is None else loss + term
    return loss


def _weight(seed=1):
    rng = np.random.default_rng(seed)
    return md.tensor(0.3 * rng.standard_normal((6, 6)).astype(np.float32), requires_grad=True)


def test_a_leaf_used_many_times_sums_its_gradients_in_place():
    """backward adds a leaf's later gradients into a copy of its first, as PyTorch's
    AccumulateGrad does: the bits of md.grad's sums (ops, in the same order), one copy
    instead of eleven adds, and a constant .grad."""
    w = _weight()
    runtime = md.Runtime()
    with runtime:
        _recurrent_loss(w).backward()
        in_place = runtime.stats()["ops"]
    v = _weight()
    runtime = md.Runtime()
    with runtime:
        (by_ops,) = md.grad(_recurrent_loss(v), [v])
        summed = runtime.stats()["ops"]
    assert w.grad.numpy().tobytes() == by_ops.numpy().tobytes()
    assert summed - in_place == 11 - 1  # eleven adds against one copy
    assert w.grad.storage.constant and not w.grad.cell.is_view


def test_summing_in_place_leaves_a_gradient_sent_elsewhere_too_alone():
    """y = a + s's backward sends one tensor to both inputs: to the leaf (its first
    gradient) and to exp's node, which runs only after w = a * 4 has sent the leaf its
    second. Summed into that tensor itself, exp would read the sum: the sum is a copy."""

    def loss_of(a):
        s = md.exp(a * 1.5)
        w = a * 4.0
        z = (a + s) + w
        return (z * z).sum()

    a = md.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    loss_of(a).backward()
    b = md.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    (by_ops,) = md.grad(loss_of(b), [b])
    x = np.array([0.5, -1.0, 2.0])
    g = 2 * (5 * x + np.exp(1.5 * x))
    np.testing.assert_allclose(a.grad.numpy(), g * (5 + 1.5 * np.exp(1.5 * x)))
    assert a.grad.numpy().tobytes() == by_ops.numpy().tobytes()


def test_sums_in_place_are_bit_identical_under_a_tight_budget():
    w = _weight()
    _recurrent_loss(w, steps=30).backward()
    unbounded = w.grad.numpy().tobytes()
    v = _weight()
    runtime = md.Runtime(budget=6_000)
    with runtime:
        _recurrent_loss(v, steps=30).backward()
        stats = runtime.stats()
    assert stats["remats"] > 0 and stats["peak_memory"] <= 6_000
    assert v.grad.numpy().tobytes() == unbounded


class _BroadcastGradient(_Copy):
    """A copy whose backward sends a (1,) gradient for its (3,) input (sum_to's job, left
    undone): the leaf's sum can then only be an op, which broadcasts it."""

    name = "broadcast_gradient"

    def backward(self, ctx, g):
        return g.sum().reshape((1,))


def test_a_gradient_of_another_shape_is_summed_as_an_op(monkeypatch):
    from minidtr.runtime import allocator

    monkeypatch.setattr(allocator, "CHECK_OPS", False)  # (which reports the op's bug,
    monkeypatch.setattr(_BroadcastGradient, "check_results", False)  # as for an op of one's own)
    x = md.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    doubled = x * 2.0
    y = md.ops.op.apply(_BroadcastGradient(), x)  # made later, so its backward runs first:
    ((y * 5.0).sum() + doubled.sum()).backward()  # the (1,) gradient is the leaf's first
    np.testing.assert_array_equal(x.grad.numpy(), [17.0, 17.0, 17.0])
    assert x.grad.storage.constant


def test_md_grad_returns_recomputable_gradients_without_touching_dot_grad():
    x = md.tensor(np.array([1.0, 2.0]), requires_grad=True)
    unused = md.tensor(np.array([1.0]), requires_grad=True)
    y = (md.exp(x) * 3).sum()
    gx, gu = md.grad(y, [x, unused])
    assert x.grad is None and gu is None
    assert gx.storage.evictable
    np.testing.assert_allclose(gx.numpy(), 3 * np.exp([1.0, 2.0]))
    from minidtr.testing import recompute

    assert recompute(gx).tobytes() == gx.numpy().tobytes()
    with pytest.raises(ValueError, match="leaf"):
        md.grad((x * 2).sum(), [x * 2])


def test_indexing_basic_and_integer_arrays():
    x = md.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    assert x[1].shape == (4,) and x[:, 1:3].shape == (3, 2) and x[None, ..., 0].shape == (1, 3)
    assert x[1].storage is x.storage, "basic indexing is a view"
    picked = x[[0, 2, 2]]
    assert picked.storage is not x.storage
    picked.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[:, 0], [1.0, 0.0, 2.0])
    mask = x.detach() > 5
    np.testing.assert_array_equal(x[mask].numpy(), np.arange(6.0, 12.0))
    with pytest.raises(IndexError, match="getitem"):
        x[3]


def test_item_bool_len_and_repr():
    x = md.tensor([[1.5, 2.0]])
    assert x[0, 0].item() == 1.5 and len(x) == 1 and x.ndim == 2 and x.size == 2
    with pytest.raises(ValueError, match="single-element"):
        x.item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    assert "tensor(" in repr(x)
    y = md.tanh(x)
    y.storage.allocator.evict(y.storage)
    assert "evicted" in repr(y)


class _Blocked(_Copy):
    """A copy whose backward sends no gradient back (returns None for its input), as a
    custom op may (a straight stop, or a gradient known to be zero)."""

    name = "blocked"

    def backward(self, ctx, g):
        return None


class _Halves(md.ops.op.Op):
    """Two outputs, x * 0.5 and x * 2, so its node is reached through (node, index) edges."""

    name = "halves"
    n_outputs = 2

    def infer(self, x):
        return [(x.shape, x.dtype), (x.shape, x.dtype)]

    def forward(self, xp, x):
        return x * 0.5, x * 2

    def backward(self, ctx, grads):
        g0, g1 = grads
        if g0 is None:
            return g1 * 2
        return g0 * 0.5 if g1 is None else g0 * 0.5 + g1 * 2


def _blocked(t):
    return md.ops.op.apply(_Blocked(), t)


def _x():
    return md.tensor(np.array([0.3, -1.2, 2.0], np.float32), requires_grad=True)


def _grad_of(program):
    """x.grad after ``program(x).backward()`` on a fresh x."""
    x = _x()
    program(x).backward()
    assert x.grad is not None, "the leaf got no gradient"
    return x.grad.numpy()


@pytest.mark.parametrize(
    "program, reference",
    [
        # a node (tanh) one of whose two consumers sends None: the other's gradient must
        # still reach it, whichever runs first
        (
            lambda x: (_blocked(md.tanh(x)) + md.tanh(x) * 0).sum() + (md.tanh(x) * 2).sum(),
            lambda x: (md.tanh(x) * 0).sum() + (md.tanh(x) * 2).sum(),
        ),
        (
            lambda x: (lambda y: _blocked(y).sum() + (y * 2).sum())(md.tanh(x)),
            lambda x: (md.tanh(x) * 2).sum(),
        ),
        (
            lambda x: (lambda y: (y * 2).sum() + _blocked(y).sum())(md.tanh(x)),
            lambda x: (md.tanh(x) * 2).sum(),
        ),
        # a node reached only through the blocked op does not run, but its input (tanh's
        # output a, used again by the mul) must still become ready
        (
            lambda x: (lambda a: _blocked(md.exp(a)).sum() + (a * 3).sum())(md.tanh(x)),
            lambda x: (md.tanh(x) * 3).sum(),
        ),
        # the same through (node, index) edges of a two-output op
        (
            lambda x: (lambda h: _blocked(h[0]).sum() + (h[1] * 3).sum())(
                md.ops.op.apply(_Halves(), md.tanh(x))
            ),
            lambda x: (md.ops.op.apply(_Halves(), md.tanh(x))[1] * 3).sum(),
        ),
    ],
)
def test_a_gradient_a_backward_leaves_out_does_not_stop_the_others(program, reference):
    """A backward returning None for an input whose producer other nodes also feed (bug:
    that producer waited for ever and the leaf got no gradient)."""
    np.testing.assert_array_equal(_grad_of(program), _grad_of(reference))


def test_a_leaf_whose_last_use_sends_none_still_gets_a_finished_gradient():
    """The blocked op is the leaf's last use (its node runs last): the gradient the mul
    sent is final then and must become a constant, as any other leaf gradient."""
    x, y = _x(), _x()
    (_blocked(x).sum() + (x * 2).sum()).backward()
    (_blocked(md.exp(y)).sum() + (y * 2).sum()).backward()  # through a node that never runs
    for leaf in (x, y):
        np.testing.assert_array_equal(leaf.grad.numpy(), [2.0, 2.0, 2.0])
        assert leaf.grad.storage.constant


def test_md_grad_through_a_gradient_left_out():
    x, y = _x(), _x()
    a = md.tanh(x)
    loss = _blocked(md.exp(a) * y).sum() + (a * 3).sum() + _blocked(y).sum()
    gx, gy = md.grad(loss, [x, y])
    assert gy is None
    z = _x()
    np.testing.assert_array_equal(gx.numpy(), md.grad((md.tanh(z) * 3).sum(), [z])[0].numpy())


def test_a_node_no_gradient_reaches_releases_what_it_saved():
    x = _x()
    a = md.exp(x)  # exp saves its output for backward
    (_blocked(a).sum() + (x * 2).sum()).backward()
    assert a.grad_fn.freed and a.grad_fn.outputs == ()
    with pytest.raises(RuntimeError, match="already used and freed"):
        (a * 2).sum().backward()


def _torch_blocked(torch):
    """PyTorch's counterpart of ``_blocked``: a copy whose backward returns None."""

    class Blocked(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            return None

    return Blocked.apply


def test_a_gradient_left_out_matches_pytorch():
    torch = pytest.importorskip("torch")
    blocked = _torch_blocked(torch)

    data = np.array([0.3, -1.2, 2.0], np.float32)
    tx = torch.tensor(data, requires_grad=True)
    ta = torch.tanh(tx)
    (blocked(torch.exp(ta)).sum() + (ta * 3).sum() + blocked(tx).sum()).backward()
    x = md.tensor(data, requires_grad=True)
    a = md.tanh(x)
    (_blocked(md.exp(a)).sum() + (a * 3).sum() + _blocked(x).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_with_gradients_left_out_match_pytorch(seed):
    """Random graphs over three leaves where some values go through an op whose backward
    returns None (and one through a two-output op, one output possibly unused), against
    PyTorch's engine on the same program: the same leaves get gradients, the same values."""
    torch = pytest.importorskip("torch")
    blocked = _torch_blocked(torch)

    rng = np.random.default_rng(seed)
    data = [rng.uniform(-1, 1, 4) for _ in range(3)]
    xs = [md.tensor(d, requires_grad=True) for d in data]
    ts = [torch.tensor(d, requires_grad=True) for d in data]
    ours, theirs = list(xs), list(ts)
    for _ in range(10):
        i, j = rng.integers(len(ours), size=2)
        kind = rng.choice(["tanh", "sigmoid", "mul", "add", "blocked", "halves"])
        a, b, ta, tb = ours[i], ours[j], theirs[i], theirs[j]
        if kind == "tanh":
            ours.append(md.tanh(a)), theirs.append(torch.tanh(ta))
        elif kind == "sigmoid":
            ours.append(md.sigmoid(a)), theirs.append(torch.sigmoid(ta))
        elif kind == "mul":
            ours.append(a * b), theirs.append(ta * tb)
        elif kind == "add":
            ours.append(a + b), theirs.append(ta + tb)
        elif kind == "blocked":
            ours.append(_blocked(a)), theirs.append(blocked(ta))
        else:
            ours.extend(md.ops.op.apply(_Halves(), a)), theirs.extend([ta * 0.5, ta * 2])
    used = sorted(set(rng.integers(3, len(ours), size=4).tolist()) | {len(ours) - 1})
    loss = ours[used[0]].sum()
    torch_loss = theirs[used[0]].sum()
    for k in used[1:]:
        loss = loss + ours[k].sum()
        torch_loss = torch_loss + theirs[k].sum()
    if not torch_loss.requires_grad:
        return  # every path is blocked: neither engine has a graph to run
    loss.backward()
    torch_loss.backward()
    for x, t in zip(xs, ts, strict=True):
        assert (x.grad is None) == (t.grad is None)
        if x.grad is not None:
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-15)
