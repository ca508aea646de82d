"""minidtr.optim: SGD and Adam against torch.optim, and copy-on-write updates that leave
every recipe still alive able to recompute its old value."""

import importlib.util
import pickle

import numpy as np
import pytest

import minidtr as md
from minidtr import nn, optim
from minidtr.testing import assert_remat_equivalent, recompute

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def make_model(seed: int = 0, dtype=md.float64, hidden: int = 6) -> nn.Module:
    md.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(4, hidden, dtype=dtype), nn.Tanh(), nn.Linear(hidden, 3, dtype=dtype)
    )


def batch(step: int, dtype=np.float64, size: int = 8):
    rng = np.random.default_rng(100 + step)
    x, y = rng.standard_normal((size, 4)), rng.standard_normal((size, 3))
    return x.astype(dtype), y.astype(dtype)


def loss_of(model, x, y):
    diff = model(md.tensor(x)) - md.tensor(y)
    return (diff * diff).mean()


def torch_twin(model):
    import torch

    twin = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    twin = twin.double()
    twin.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})
    return twin


OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.1)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6)),
    ("Adam", dict(lr=0.02, weight_decay=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.1, nesterov=True)),
    ("AdamW", dict()),
    ("AdamW", dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.1)),
    ("Adam", dict(lr=0.02, weight_decay=0.05, decoupled_weight_decay=True)),
]


@needs_torch
@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_steps_match_torch_optim(name, options):
    import torch

    model = make_model()
    twin = torch_twin(model)
    opt = getattr(optim, name)(model.parameters(), **options)
    ref = getattr(torch.optim, name)(twin.parameters(), **options)
    for step in range(6):
        x, y = batch(step)
        opt.zero_grad()
        ref.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        tloss = ((twin(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        tloss.backward()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-6)
        opt.step()
        ref.step()
        for (pname, p), tp in zip(model.named_parameters(), twin.parameters(), strict=True):
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-14,
                                       err_msg=f"{name} step {step} {pname}")  # fmt: skip


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_each_update_matches_torch_optim(name, options, dtype):
    """Update by update on one tensor: both start every step from the same parameter and get
    the same gradient (their states evolve on their own). float64 agrees to ~1e-15 of the
    parameter's scale (PyTorch's CPU kernels fuse some multiply-adds, NumPy does not)."""
    import torch

    rng = np.random.default_rng(7)
    p = md.tensor(rng.standard_normal((64, 33)).astype(dtype), requires_grad=True)
    twin = torch.nn.Parameter(torch.from_numpy(p.numpy()))
    opt = getattr(optim, name)([p], **options)
    ref = getattr(torch.optim, name)([twin], **options)
    tol = 1e-13 if dtype == np.float64 else 1e-6
    for step in range(8):
        g = rng.standard_normal(p.shape).astype(dtype)
        with torch.no_grad():
            twin.copy_(torch.from_numpy(p.numpy()))
        p.grad, twin.grad = md.tensor(g), torch.from_numpy(g.copy())
        opt.step()
        ref.step()
        ours, theirs = p.numpy(), twin.detach().numpy()
        assert ours.dtype == dtype
        scale = np.abs(theirs).max()
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=tol * scale,
                                   err_msg=f"{name} {options} step {step}")  # fmt: skip


# every branch of the updates (Adam's lerp changes its form at betas[0] = 0.5) on shapes
# whose NumPy arithmetic differs: 0-d arrays give scalars, empty ones nothing to update
EDGE_OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, betas=(0.9, 0.99))),
    ("Adam", dict(lr=0.01, betas=(0.5, 0.99), weight_decay=0.1)),
    ("Adam", dict(lr=0.01, betas=(0.3, 0.9))),
    ("Adam", dict(lr=0.01, betas=(0.0, 0.0))),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True)),
    ("AdamW", dict(lr=0.01, betas=(0.5, 0.99), weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, betas=(0.3, 0.9), weight_decay=0.5)),
]


@needs_torch
@pytest.mark.parametrize("shape", [(), (1,), (2, 1, 3), (0,), (2, 0), (131, 127)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, options", EDGE_OPTIMIZERS)
def test_every_shape_and_beta_matches_torch_optim(name, options, dtype, shape):
    import torch

    rng = np.random.default_rng(3)
    p = md.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)
    twin = torch.nn.Parameter(torch.from_numpy(p.numpy()))
    opt = getattr(optim, name)([p], **options)
    ref = getattr(torch.optim, name)([twin], **options)
    tol = 1e-13 if dtype == np.float64 else 1e-6
    for step in range(3):
        g = rng.standard_normal(shape).astype(dtype)
        p.grad, twin.grad = md.tensor(g), torch.from_numpy(g.copy())
        opt.step()
        ref.step()
        ours, theirs = p.numpy(), twin.detach().numpy()
        assert ours.shape == shape and ours.dtype == dtype
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol,
                                   err_msg=f"{name} {options} step {step}")  # fmt: skip


def old_sgd(p, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    """SGD as the separate minidtr ops it was before the fused op (run under updating()),
    and Nesterov's step as separate ops too."""
    if weight_decay:
        grad = grad + p * weight_decay
    if momentum:
        buf = md.ops.copy(grad) if buf is None else buf * momentum + grad
        grad = grad + buf * momentum if nesterov else buf
    return p - grad * lr, buf


@pytest.mark.parametrize("dtype", [md.float64, md.float32])
@pytest.mark.parametrize("options", [o for n, o in OPTIMIZERS if n == "SGD"])
def test_fused_sgd_is_bit_identical_to_the_separate_ops(options, dtype):
    rng = np.random.default_rng(1)
    p = md.tensor(rng.standard_normal((5, 7)), dtype=dtype, requires_grad=True)
    opt = optim.SGD([p], **options)
    expected, buf = p.detach(), None
    for step in range(4):
        p.grad = md.tensor(rng.standard_normal((5, 7)), dtype=dtype)
        with optim.optimizer.updating():
            expected, buf = old_sgd(expected, p.grad, buf, **options)
        opt.step()
        assert p.numpy().tobytes() == expected.numpy().tobytes(), f"step {step}"
        if buf is not None:
            assert opt.momentum_buffers[0].numpy().tobytes() == buf.numpy().tobytes()


def test_one_update_op_per_group_and_step():
    model = make_model(dtype=md.float32)
    params = model.parameters()
    for opt in (optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.1),
                optim.Adam(params, weight_decay=0.1)):  # fmt: skip
        assert sorted(i for group in opt.groups for i in group) == list(range(len(params)))
        assert len(opt.groups) < len(params)
        largest = max(p.nbytes for p in params)
        assert all(sum(params[i].nbytes for i in group) <= largest for group in opt.groups)
        for step in range(2):
            opt.zero_grad()
            loss_of(model, *batch(step, np.float32)).backward()
            with md.Runtime() as runtime:
                opt.step()
            assert runtime.stats()["ops"] == len(opt.groups), (opt, step)


def one_op_per_parameter(opt):
    """``opt`` with its groups cut into single parameters (one op each, as before groups)."""
    opt.groups = [[i] for group in opt.groups for i in group]
    return opt


@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_grouped_updates_are_bit_identical_to_one_op_per_parameter(name, options):
    """Also when a group's parameters are in different states: a parameter with no gradient
    in the first step starts its state a step later (a separate op of the same group)."""
    models = [make_model(dtype=md.float32, hidden=7) for _ in range(2)]
    opts = [getattr(optim, name)(m.parameters(), **options) for m in models]
    one_op_per_parameter(opts[1])
    assert len(opts[0].groups) < len(opts[1].groups)
    for step in range(4):
        for model, opt in zip(models, opts, strict=True):
            opt.zero_grad()
            loss_of(model, *batch(step, np.float32)).backward()
            if step == 0:
                model.parameters()[1].grad = None  # the first layer's bias skips a step
            opt.step()
        for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
            assert p.numpy().tobytes() == q.numpy().tobytes(), (name, step)


def test_a_bad_gradient_names_the_update_op_and_leaves_the_runtime_usable():
    p = md.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for opt, name in ((optim.SGD([p], lr=0.1, momentum=0.9), "sgd_update"),
                      (optim.Adam([p]), "adam_update")):  # fmt: skip
        wrong_shape, wrong_dtype = md.tensor([1.0, 2.0]), md.tensor([1.0, 2, 3], dtype=md.float64)
        for wrong in (wrong_shape, wrong_dtype):  # refused when assigned
            with pytest.raises(ValueError, match=r"\.grad must match its tensor"):
                p.grad = wrong
        p._grad = wrong_shape  # (the slot behind .grad: as a faulty backward could leave it)
        with pytest.raises(ValueError, match=rf"{name}: .*\(3,\), \(2,\)"):
            opt.step()
        p._grad = wrong_dtype
        with pytest.raises(TypeError, match=rf"{name}: .*float32, float64"):
            opt.step()
        p.grad = md.tensor([1.0, 1.0, 1.0])
        opt.step()
        assert np.all(p.numpy() < [1.0, 2.0, 3.0])


def test_steps_replace_old_parameters_and_state_in_the_memory_count():
    """In steady state a step leaves the allocator's count where it was: each new parameter
    and state constant replaces an old one, which is released."""
    model = make_model(dtype=md.float32, hidden=32)
    params = model.parameters()
    nbytes = sum(p.nbytes for p in params)
    for opt, copies in ((optim.SGD(params, lr=0.1, momentum=0.9), 2), (optim.Adam(params), 3)):
        allocator = params[0].storage.allocator
        counts = []
        for step in range(3):
            opt.zero_grad()
            loss_of(model, *batch(step, np.float32)).backward()
            opt.step()
            opt.zero_grad()
            counts.append(allocator.memory)
        assert counts[1] == counts[2]
        state = opt.momentum_buffers if copies == 2 else [*opt.exp_avg, *opt.exp_avg_sq]
        assert sum(t.nbytes for t in state) == (copies - 1) * nbytes
        assert all(t.storage.constant for t in [*params, *state])


def test_parameters_without_grad_are_skipped():
    used = md.tensor([1.0, 2.0], requires_grad=True)
    unused = md.tensor([3.0, 4.0], requires_grad=True)
    for opt in (optim.SGD([used, unused], lr=0.1, momentum=0.9), optim.Adam([used, unused])):
        storage = unused.storage
        (used * used).sum().backward()
        opt.step()
        assert unused.storage is storage and unused.grad is None
        assert np.array_equal(unused.numpy(), [3.0, 4.0])
        opt.zero_grad()
        assert used.grad is None
    assert opt.exp_avg[1] is None


def test_updates_are_constants_and_do_not_chain():
    model = make_model(dtype=md.float32)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    adam = optim.Adam(model.parameters(), lr=0.01)
    for step in range(3):
        for o in (opt, adam):
            o.zero_grad()
            loss_of(model, *batch(step, np.float32)).backward()
            o.step()
    for p in model.parameters():
        assert p.storage.constant and p.storage.producer is None and p.cell.recipe is None
        assert p.grad_fn is None and p.requires_grad and p.dtype == md.float32
    state = [*opt.momentum_buffers, *adam.exp_avg, *adam.exp_avg_sq]
    assert all(t.storage.constant for t in state)


def test_parameter_updates_do_not_break_recipes_of_live_tensors():
    """Values computed from the old parameters recompute to the old values after a step."""
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    x, y = batch(0)
    hidden = model[1](model[0](md.tensor(x)))
    out = model[2](hidden)
    loss = ((out - md.tensor(y)) * (out - md.tensor(y))).mean()
    old_hidden, old_out, old_loss = hidden.numpy(), out.numpy(), loss.numpy()
    old_weight = model[0].weight.numpy()
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss_of(model, x, y).backward()
    opt.step()  # two steps: momentum state is in play too
    assert not np.array_equal(model[0].weight.numpy(), old_weight)
    assert np.array_equal(recompute(out), old_out)
    allocator = hidden.storage.allocator
    for t in (hidden, out):  # evict the whole chain, then read its end
        allocator.evict(t.storage, reason="test")
    assert not hidden.is_resident
    assert np.array_equal(out.numpy(), old_out)
    # the loss's graph was used up by backward: it kept its value, not its recipe
    assert loss.storage.constant and loss.numpy().tobytes() == old_loss.tobytes()
    allocator.evict(hidden.storage, reason="test")
    assert hidden.numpy().tobytes() == old_hidden.tobytes()
    assert np.array_equal(model(md.tensor(x)).numpy(), model(md.tensor(x)).numpy())
    assert not np.array_equal(model(md.tensor(x)).numpy(), old_out)


@pytest.mark.parametrize("name", ["SGD", "Adam", "SGD nesterov", "AdamW"])
def test_training_under_a_budget_is_bit_identical(name):
    """Optimizer steps with activations evicted and recomputed under a tight budget give
    exactly the unbounded run's losses and parameters."""

    def train():
        md.manual_seed(3)
        layers = [nn.Linear(4, 32)]
        for _ in range(3):
            layers += [nn.Tanh(), nn.Linear(32, 32)]
        model = nn.Sequential(*layers, nn.Tanh(), nn.Linear(32, 3))
        if name.startswith("SGD"):
            opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01,
                            nesterov=name.endswith("nesterov"))  # fmt: skip
        else:
            opt = getattr(optim, name)(model.parameters(), lr=0.01, weight_decay=0.01)
        losses = []
        for step in range(2):
            opt.zero_grad()
            loss = loss_of(model, *batch(step, np.float32, size=512))
            loss.backward()
            opt.step()
            losses.append(loss.numpy())
        return losses, model.parameters()

    reports = assert_remat_equivalent(train, budgets=[0.8], heuristics=["dtr", "lru"])
    assert all(r["remats"] > 0 for r in reports)


def test_bad_arguments_raise_clear_errors():
    p = md.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="SGD: got an empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="single Tensor"):
        optim.SGD(p, lr=0.1)
    with pytest.raises(ValueError, match=r"params\[1\] \(shape \(1,\), float32\) must be a leaf"):
        optim.Adam([p, p * 2.0])
    with pytest.raises(ValueError, match=r"params\[0\] \(shape \(1,\), int64\).*floating-point"):
        optim.Adam([md.tensor([1])])
    with pytest.raises(ValueError, match="lr must be >= 0"):
        optim.SGD([p], lr=-1.0)
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD([p], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([p], betas=(0.9, 1.0))
    # the optimizer and the argument named, not Python's comparison or unpacking
    with pytest.raises(TypeError, match="SGD: lr must be a number, got str"):
        optim.SGD([p], lr="0.1")
    with pytest.raises(ValueError, match="SGD: lr must be >= 0 and finite, got nan"):
        optim.SGD([p], lr=float("nan"))
    with pytest.raises(TypeError, match="SGD: momentum must be a number"):
        optim.SGD([p], lr=0.1, momentum=None)
    with pytest.raises(TypeError, match="Adam: betas must be a pair of numbers, got 0.9"):
        optim.Adam([p], betas=0.9)
    with pytest.raises(TypeError, match=r"Adam: betas\[1\] must be a number"):
        optim.Adam([p], betas=(0.9, "x"))
    with pytest.raises(ValueError, match="Adam: eps must be >= 0 and finite, got inf"):
        optim.Adam([p], eps=float("inf"))
    assert len(optim.SGD([p, p], lr=0.1).params) == 1


@pytest.mark.parametrize("make", [lambda p: optim.SGD(p, lr=0.1, momentum=0.9), optim.Adam])
def test_a_frozen_parameter_is_taken_and_left_as_it_is(make):
    """Fine-tuning freezes layers with ``requires_grad = False`` and hands the optimizer
    every parameter, as in PyTorch: the frozen ones get no gradient and stay."""
    model = make_model(dtype=md.float32, hidden=8)
    frozen = model.parameters()[:2]
    for p in frozen:
        p.requires_grad = False
    before = [p.numpy() for p in model.parameters()]
    opt = make(model.parameters())
    x = md.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    model(x).sum().backward()
    opt.step()
    after = [p.numpy() for p in model.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(after[:2], before[:2], strict=True))
    assert not any(np.array_equal(a, b) for a, b in zip(after[2:], before[2:], strict=True))


def test_a_parameter_frozen_between_forward_and_backward_gets_no_gradient():
    """As PyTorch's AccumulateGrad: whether a leaf takes a gradient is read when backward
    runs, so freezing it after the forward (fine-tuning mid-step) leaves it alone."""
    model = make_model(dtype=md.float32, hidden=8)
    opt = optim.SGD(model.parameters(), lr=0.1)
    before = [p.numpy() for p in model.parameters()]
    x = md.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    loss = model(x).sum()
    frozen = model.parameters()[:2]
    for p in frozen:
        p.requires_grad_(False)
    loss.backward()
    opt.step()
    assert all(p.grad is None for p in frozen)
    after = [p.numpy() for p in model.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(after[:2], before[:2], strict=True))
    assert all(p.grad is not None for p in model.parameters()[2:])


@pytest.mark.parametrize("make", [lambda p: optim.SGD(p, lr=0.1, momentum=0.9), optim.Adam])
def test_a_step_stopped_part_way_finishes_when_run_again_without_updating_twice(make):
    """A BudgetError (or Ctrl-C) between two groups leaves the first groups updated;
    step() again on the same gradients updates the rest only, and the parameters are
    those of one whole step."""
    x, y = batch(0)
    reference = make_model()
    opt = make(reference.parameters())
    loss_of(reference, x, y).backward()
    opt.step()

    model = make_model()
    opt = make(model.parameters())
    assert len(opt.groups) > 1
    loss_of(model, x, y).backward()
    calls = []
    update_group = opt.update_group

    def stopping(indices):
        calls.append(indices)
        if len(calls) == 2:
            raise md.BudgetError("sgd_update", 1, 1, 1, 0, 0, 0)
        return update_group(indices)

    opt.update_group = stopping
    with pytest.raises(md.BudgetError):
        opt.step()
    updated = set(opt.stopped_step)
    assert updated == set(calls[0])
    opt.step()
    assert not opt.stopped_step and all(set(c).isdisjoint(updated) for c in calls[2:])
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        assert np.array_equal(got.numpy(), want.numpy())


def test_hyperparameters_are_checked_whenever_they_are_set():
    """A schedule sets opt.lr mid-training: NaN turned every weight NaN, a string failed
    inside the update op."""
    model = make_model()
    sgd, adam = optim.SGD(model.parameters(), lr=0.1), optim.Adam(model.parameters())
    with pytest.raises(ValueError, match="SGD: lr must be >= 0 and finite, got nan"):
        sgd.lr = float("nan")
    with pytest.raises(TypeError, match="SGD: momentum must be a number, got str"):
        sgd.momentum = "0.9"
    with pytest.raises(ValueError, match=r"Adam: betas\[1\] must be in \[0, 1\), got 1.0"):
        adam.betas = (0.9, 1.0)
    with pytest.raises(ValueError, match="Adam: weight_decay must be >= 0"):
        adam.weight_decay = -1
    sgd.lr, adam.betas = 0.05, [0.8, 0.9]
    assert sgd.lr == 0.05 and adam.betas == (0.8, 0.9)
    assert pickle.loads(pickle.dumps(adam)).betas == (0.8, 0.9)
