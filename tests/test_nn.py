"""minidtr.nn: module bookkeeping, default initialization, and every layer against PyTorch
with the same weights (forward and gradients, float64)."""

import importlib.util
import math
import re

import numpy as np
import pytest

import minidtr as md
from minidtr import nn
from minidtr.testing import recompute

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
F64 = md.float64


def needs_op(name: str):
    return pytest.mark.skipif(not hasattr(md, name), reason=f"md.{name} is not available yet")


# ---- bookkeeping ----------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = md.ones((3,), requires_grad=True)
        self.inner = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))
        self.register_buffer("count", md.zeros(()))
        self.note = "not registered"
        self.cache = md.zeros((2,))  # a tensor without requires_grad is a plain attribute

    def forward(self, x):
        return self.inner(x * self.scale)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block()
        self.head = nn.Linear(2, 1)
        self.second = Block()
        self.tied = self.head  # the same module twice: its parameters count once

    def forward(self, x):
        return self.head(self.second(self.first(x)[:, :1] * md.ones((1, 3))))


def test_parameters_are_registered_in_order():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == [
        "first.scale", "first.inner.0.weight", "first.inner.0.bias", "first.inner.2.weight",
        "head.weight", "head.bias",
        "second.scale", "second.inner.0.weight", "second.inner.0.bias", "second.inner.2.weight",
    ]  # fmt: skip
    assert [p.shape for p in net.parameters()][:4] == [(3,), (4, 3), (4,), (2, 4)]
    assert net.num_parameters() == 2 * (3 + 12 + 4 + 8) + 2 + 1
    assert [n for n, _ in net.named_buffers()] == ["first.count", "second.count"]
    assert all(not b.requires_grad for b in net.buffers())
    assert [n for n, _ in net.named_modules()][:4] == ["", "first", "first.inner", "first.inner.0"]
    assert len(net.modules()) == 1 + 2 * 5 + 1
    assert [n for n, _ in net.named_children()] == ["first", "head", "second"]  # not "tied"


def scaled(torch_nn, weight, bias, linear):
    """A module of PyTorch's kind, its own weights made with ``torch_nn.Parameter``: of
    minidtr's (``torch_nn`` minidtr.nn) or of PyTorch's."""

    class Scaled(torch_nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch_nn.Parameter(weight)
            self.inner = linear
            self.bias = torch_nn.Parameter(bias)

        def forward(self, x):
            return (self.inner(x @ self.weight) + self.bias).tanh()

    return Scaled()


def test_nn_parameter_registers_a_parameter_as_pytorchs():
    weight, bias = normal(4, 3), normal(2, seed=1)
    module = scaled(nn, md.tensor(weight), md.tensor(bias), nn.Linear(3, 2))
    names = ["weight", "bias", "inner.weight", "inner.bias"]  # own ones first, as PyTorch's
    assert [n for n, _ in module.named_parameters()] == names == list(module.state_dict())
    assert module.weight.requires_grad and module.weight.is_leaf
    data = md.tensor(weight)
    shared = nn.Parameter(data)  # over data's value, as torch's: no copy
    assert shared.storage is data.storage and not data.requires_grad
    assert nn.Parameter((data * 2.0).requires_grad_(False)).is_leaf
    assert nn.Parameter().shape == (0,) and nn.Parameter().dtype == md.float32
    with pytest.raises(TypeError, match="Parameter: data must be a Tensor, got ndarray"):
        nn.Parameter(weight)
    with pytest.raises(ValueError, match=r"Parameter\(requires_grad=False\).*register_buffer"):
        nn.Parameter(data, requires_grad=False)
    with pytest.raises(TypeError, match="only floating-point tensors can require grad"):
        nn.Parameter(md.tensor([1, 2]))


@needs_torch
def test_a_module_with_nn_parameters_matches_torchs():
    import torch

    weight, bias = normal(4, 3), normal(2, seed=1)
    linear = nn.Linear(3, 2, dtype=F64)
    module = scaled(nn, md.tensor(weight, dtype=F64), md.tensor(bias, dtype=F64), linear)
    twin = scaled(torch.nn, torch.tensor(weight), torch.tensor(bias), torch.nn.Linear(3, 2))
    assert [n for n, _ in module.named_parameters()] == [n for n, _ in twin.named_parameters()]
    check_against_torch(module, twin, [normal(5, 4, seed=2)])


def test_reassignment_and_deletion_update_the_registry():
    block = Block()
    block.inner[0].bias = None
    assert "inner.0.bias" not in dict(block.named_parameters())
    y = block.scale * 2.0
    block.derived = y  # a non-leaf is not a parameter
    assert "derived" not in dict(block.named_parameters())
    del block.scale
    assert "scale" not in dict(block.named_parameters())
    block.scale = md.ones((3,), requires_grad=True)
    assert block.named_parameters()[0][0] == "scale"
    block.count = md.ones(())  # a registered buffer stays a buffer when reassigned
    assert dict(block.named_buffers())["count"].item() == 1.0


def test_module_without_super_init_fails_clearly():
    class Broken(nn.Module):
        def __init__(self):
            self.w = md.ones((2,), requires_grad=True)

    with pytest.raises(AttributeError, match="super"):
        Broken()


def test_train_and_eval_propagate():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.first.train()
    assert net.first.inner[1].training and not net.training and not net.second.training
    net.train()
    assert all(m.training for m in net.modules())


def test_zero_grad_and_forward_through_nested_modules():
    net = Net()
    x = md.tensor(np.random.default_rng(0).standard_normal((5, 3)), dtype=md.float32)
    net(x).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_state_dict_round_trip():
    md.manual_seed(1)
    a = Net()
    md.manual_seed(2)
    b = Net()
    x = md.tensor(np.random.default_rng(0).standard_normal((4, 3)), dtype=md.float32)
    assert not np.array_equal(a(x).numpy(), b(x).numpy())
    state = a.state_dict()
    assert list(state) == [
        "first.scale", "first.count", "first.inner.0.weight", "first.inner.0.bias",
        "first.inner.2.weight", "head.weight", "head.bias", "second.scale", "second.count",
        "second.inner.0.weight", "second.inner.0.bias", "second.inner.2.weight",
        "tied.weight", "tied.bias",  # the head again, under its other name (as PyTorch)
    ]  # fmt: skip
    assert all(isinstance(v, np.ndarray) for v in state.values())
    before = b(x)
    missing, unexpected = b.load_state_dict(state)
    assert missing == [] and unexpected == []
    assert np.array_equal(a(x).numpy(), b(x).numpy())
    assert all(p.requires_grad and p.storage.constant for p in b.parameters())
    state["head.bias"][:] = 123.0  # the state dict is a copy, not a view of the model
    assert b.head.bias.item() != 123.0
    # copy-on-write: a value computed before the load still recomputes to its old value
    old = before.numpy()
    assert np.array_equal(recompute(before), old)


def test_load_state_dict_checks_keys_and_shapes_before_changing_anything():
    net, other = nn.Linear(3, 2), nn.Linear(3, 2)
    weight = net.weight.numpy()
    with pytest.raises(KeyError, match=r"missing keys \['bias'\].*unexpected keys \['extra'\]"):
        net.load_state_dict({"weight": other.weight.numpy(), "extra": np.zeros(1)})
    missing, unexpected = net.load_state_dict({"weight": other.weight.numpy(), "extra": 0},
                                              strict=False)  # fmt: skip
    assert (missing, unexpected) == (["bias"], ["extra"])
    assert np.array_equal(net.weight.numpy(), other.weight.numpy())
    net.load_state_dict({"weight": weight, "bias": net.bias.numpy()})
    with pytest.raises(ValueError, match=r"'bias' has shape \(3,\).*\(2,\)"):
        net.load_state_dict({"weight": other.weight.numpy(), "bias": np.zeros(3)})
    assert np.array_equal(net.weight.numpy(), weight)
    for bad in (np.array(["a", "b"]), np.array([None, None]), np.array([1j, 2j])):
        with pytest.raises(TypeError, match="'bias' holds .* values, not real numbers"):
            net.load_state_dict({"weight": other.weight.numpy(), "bias": bad})
        assert np.array_equal(net.weight.numpy(), weight)  # (the weight was loaded first)


def test_state_dict_keys_are_pytorchs_for_a_reused_module_and_a_slice():
    """A module registered twice is saved under both names, and a Sequential's slice
    keeps its names, as in PyTorch: its twin's state dict loads, key for key."""
    shared = nn.Linear(2, 2)
    model = nn.Sequential(nn.ReLU(), shared, nn.Tanh(), shared)
    assert list(model.state_dict()) == ["1.weight", "1.bias", "3.weight", "3.bias"]
    assert [name for name, _ in model.named_parameters()] == ["1.weight", "1.bias"]
    assert list(model[1:3].state_dict()) == ["1.weight", "1.bias"]
    part = model[1:3].append(nn.ReLU())
    assert [name for name, _ in part.named_children()] == ["1", "2", "3"]
    try:
        import torch
    except ImportError:
        return
    twin = torch.nn.Linear(2, 2)
    reference = torch.nn.Sequential(torch.nn.ReLU(), twin, torch.nn.Tanh(), twin)
    assert list(reference.state_dict()) == list(model.state_dict())
    assert list(reference[1:3].state_dict()) == list(model[1:3].state_dict())
    model.load_state_dict({k: v.numpy() for k, v in reference.state_dict().items()})
    assert np.array_equal(shared.weight.numpy(), twin.weight.detach().numpy())


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda: nn.Conv2d(3, 4, 3.0), "Conv2d: kernel_size must be an int or a pair of ints"),
        (lambda: nn.Conv2d(3, 4, (3, 3, 3)), "Conv2d: kernel_size must be an int or a pair"),
        (lambda: nn.Conv2d(3, 4, -1), "Conv2d: kernel_size must be >= 1, got -1"),
        (lambda: nn.Conv2d(3, 4, 3, stride=0), "Conv2d: stride must be >= 1, got 0"),
        (lambda: nn.Conv2d(3, 4, 3, padding=-1), "Conv2d: padding must be >= 0, got -1"),
        (lambda: nn.MaxPool2d(0), "MaxPool2d: kernel_size must be >= 1, got 0"),
        (lambda: nn.AvgPool2d(2, stride=(1, 0)), r"AvgPool2d: stride must be >= 1, got \(1, 0\)"),
    ],
)
def test_a_window_is_checked_when_the_layer_is_made(make, says):
    """Not by NumPy at the first forward ('float' object is not iterable)."""
    with pytest.raises(ValueError, match=says):
        make()
    assert not isinstance(nn.AvgPool2d(2), nn.MaxPool2d)  # (it was a subclass)


@pytest.mark.parametrize(
    "make, error, says",
    [
        (
            lambda: nn.BatchNorm2d(3, eps="a"),
            TypeError,
            "BatchNorm2d: eps must be a number, got str",
        ),
        (lambda: nn.BatchNorm2d(3, momentum="a"), TypeError, "BatchNorm2d: momentum must be a"),
        (lambda: nn.BatchNorm2d(3, momentum=None), ValueError, "BatchNorm2d: momentum=None"),
        (lambda: nn.LayerNorm(4, eps="a"), TypeError, "LayerNorm: eps must be a number, got str"),
        (
            lambda: nn.CrossEntropyLoss(reduction="sum"),
            ValueError,
            "CrossEntropyLoss: reduction must be 'mean' .*, got 'sum'",
        ),
        (lambda: nn.MSELoss(reduction="none"), ValueError, "MSELoss: reduction must be 'mean'"),
    ],
)
def test_a_norm_or_loss_argument_is_checked_when_the_layer_is_made(make, error, says):
    """Not at the first forward by the op (or by Module.__init__ for an unknown keyword)."""
    with pytest.raises(error, match=says):
        make()


def test_pytorchs_constructor_arguments_that_change_nothing_here_are_taken():
    """ReLU(inplace=True) computes out of place (no op writes into its input here), and a
    loss's reduction="mean" is the default."""
    x = md.tensor([-1.0, 2.0])
    relu = nn.ReLU(inplace=True)
    assert relu(x).numpy().tolist() == [0.0, 2.0] and x.numpy().tolist() == [-1.0, 2.0]
    assert repr(relu) == "ReLU(inplace=True)" and repr(nn.ReLU()) == "ReLU()"
    logits, targets = md.tensor([[1.0, 2.0]]), md.tensor([1])
    loss = nn.CrossEntropyLoss(reduction="mean")(logits, targets)
    assert loss.item() == md.cross_entropy(logits, targets).item()
    assert nn.MSELoss(reduction="mean")(x, md.zeros(2)).item() == 2.5


def test_repr_is_readable():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8, 2), nn.Dropout(0.1))  # fmt: skip
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Conv2d(3, 8, kernel_size=(3, 3), stride=1, padding=1, bias=True)\n"
        "  (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
        "  (2): ReLU()\n"
        "  (3): Flatten(start_axis=1)\n"
        "  (4): Linear(in_features=8, out_features=2, bias=True)\n"
        "  (5): Dropout(p=0.1)\n"
        ")"
    )
    assert "(inner): Sequential(\n    (0): Linear" in repr(Block())
    assert len(model) == 6 and isinstance(model[1:3], nn.Sequential) and len(model[1:3]) == 2


# ---- initialization -----------------------------------------------------------------------


def test_manual_seed_makes_models_reproducible():
    md.manual_seed(7)
    a = nn.Sequential(nn.Linear(5, 4), nn.LSTMCell(4, 3), nn.Embedding(6, 2))
    md.manual_seed(7)
    b = nn.Sequential(nn.Linear(5, 4), nn.LSTMCell(4, 3), nn.Embedding(6, 2))
    c = nn.Sequential(nn.Linear(5, 4), nn.LSTMCell(4, 3), nn.Embedding(6, 2))
    for (name, x), y, z in zip(a.state_dict().items(), b.state_dict().values(),
                               c.state_dict().values(), strict=True):  # fmt: skip
        assert np.array_equal(x, y), name
        assert not np.array_equal(x, z), name
    explicit = [nn.Linear(5, 4, rng=3).weight.numpy() for _ in range(2)]
    assert np.array_equal(*explicit)
    assert nn.Linear(5, 4, dtype=F64).weight.dtype == F64
    assert nn.Linear(5, 4).weight.dtype == md.float32


def test_default_initialization_follows_pytorch():
    linear = nn.Linear(400, 300)
    bound = 1.0 / math.sqrt(400)
    w, b = linear.weight.numpy(), linear.bias.numpy()
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3.0)) < 0.02 * bound  # uniform(-bound, bound)
    conv = nn.Conv2d(16, 32, 3)
    conv_bound = 1.0 / math.sqrt(16 * 9)
    assert conv.weight.shape == (32, 16, 3, 3)
    assert np.abs(conv.weight.numpy()).max() <= conv_bound
    assert abs(conv.weight.numpy().std() - conv_bound / math.sqrt(3.0)) < 0.05 * conv_bound
    lstm = nn.LSTMCell(10, 50)
    for p in lstm.parameters():
        assert np.abs(p.numpy()).max() <= 1.0 / math.sqrt(50)
    emb = nn.Embedding(1000, 50).weight.numpy()
    assert abs(emb.mean()) < 0.02 and abs(emb.std() - 1.0) < 0.02
    bn, ln = nn.BatchNorm2d(4), nn.LayerNorm(4)
    for m in (bn, ln):
        assert np.array_equal(m.weight.numpy(), np.ones(4)) and not m.bias.numpy().any()
    assert np.array_equal(bn.running_var.numpy(), np.ones(4))
    assert not bn.running_mean.numpy().any()


@pytest.mark.parametrize(
    "call, error, says",
    [
        (
            lambda: nn.init.normal((3,), -1.0),
            ValueError,
            "normal: std must be a finite number >= 0",
        ),
        (lambda: nn.init.uniform((3,), -1.0), ValueError, "uniform: bound must be a finite num"),
        (lambda: nn.init.uniform((3,), math.inf), ValueError, "uniform: bound .*, got inf"),
        (lambda: nn.init.bias_uniform((3,), -4), ValueError, "bias_uniform: n_in .*, got -4"),
        (lambda: nn.init.kaiming_uniform((3, 2), "a"), TypeError, "kaiming_uniform: a must be"),
        (lambda: nn.init.normal((-3,)), ValueError, r"normal: shape must be non-negative ints"),
    ],
)
def test_init_helpers_name_themselves_and_the_argument(call, error, says):
    """Not NumPy's "scale < 0" or "high - low < 0", or math's "math domain error"."""
    with pytest.raises(error, match=says):
        call()


# ---- layers against PyTorch ---------------------------------------------------------------


def torch_copy(module: nn.Module, torch_module):
    """Load ``module``'s weights into a float64 copy of ``torch_module``."""
    import torch

    torch_module = torch_module.double()
    state = {k: torch.from_numpy(v.astype(np.float64)) for k, v in module.state_dict().items()}
    torch_module.load_state_dict(state)  # (it has a count of batches that ours lacks)
    return torch_module


def compare_grads(module: nn.Module, torch_module, rtol: float = 1e-10) -> None:
    theirs = dict(torch_module.named_parameters())
    for name, p in module.named_parameters():
        assert p.grad is not None, name
        np.testing.assert_allclose(p.grad.numpy(), theirs[name].grad.numpy(), rtol=rtol,
                                   atol=1e-12, err_msg=name)  # fmt: skip


def check_against_torch(module, torch_module, inputs, rtol=1e-10, input_grad=True):
    """Forward and gradients (parameters and float input) against PyTorch, float64."""
    import torch

    torch_module = torch_copy(module, torch_module)
    xs = [md.tensor(a, requires_grad=input_grad and a.dtype.kind == "f") for a in inputs]
    txs = [torch.tensor(a, requires_grad=input_grad and a.dtype.kind == "f") for a in inputs]
    out, tout = module(*xs), torch_module(*txs)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=1e-12)
    weights = np.random.default_rng(5).standard_normal(out.shape)
    (out * md.tensor(weights)).sum().backward()
    (tout * torch.tensor(weights)).sum().backward()
    compare_grads(module, torch_module, rtol)
    for x, tx in zip(xs, txs, strict=True):
        if x.requires_grad:
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=1e-12)
    return torch_module


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@needs_torch
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 4), (4,)])
def test_linear_matches_torch(bias, shape):
    import torch

    check_against_torch(nn.Linear(4, 3, bias=bias, dtype=F64), torch.nn.Linear(4, 3, bias=bias),
                        [normal(*shape)])  # fmt: skip


@needs_torch
@needs_op("conv2d")
@pytest.mark.parametrize("stride, padding, bias", [(1, 0, True), (2, 1, False), (1, 2, True)])
def test_conv2d_matches_torch(stride, padding, bias):
    import torch

    conv = nn.Conv2d(3, 4, 3, stride=stride, padding=padding, bias=bias, dtype=F64)
    ref = torch.nn.Conv2d(3, 4, 3, stride=stride, padding=padding, bias=bias)
    check_against_torch(conv, ref, [normal(2, 3, 7, 6)], rtol=1e-9)


@needs_torch
@needs_op("batch_norm")
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm2d_matches_torch_in_training_and_eval(affine):
    import torch

    bn = nn.BatchNorm2d(3, momentum=0.2, eps=1e-4, affine=affine, dtype=F64)
    ref = torch_copy(bn, torch.nn.BatchNorm2d(3, momentum=0.2, eps=1e-4, affine=affine))
    for step in range(3):  # running statistics after a few training steps
        x = normal(4, 3, 5, 5, seed=step) * (step + 1) + step
        bn.zero_grad()
        ref.zero_grad()
        check_against_torch(bn, ref, [x], rtol=1e-9)
        ref = torch_copy(bn, ref)
        np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-12)
        np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(), rtol=1e-12)
        assert bn.running_mean.storage.constant and bn.running_var.storage.constant
    bn.eval()
    ref.eval()
    running = bn.running_mean.numpy()
    if affine:
        bn.zero_grad()
        ref.zero_grad()
    check_against_torch(bn, ref, [normal(2, 3, 4, 4, seed=9)], rtol=1e-9)
    assert np.array_equal(bn.running_mean.numpy(), running)  # eval does not update


def test_a_pytorch_batch_norm_state_dict_loads_strictly_both_ways():
    """PyTorch's num_batches_tracked is taken and ignored (a BatchNorm2d here keeps no
    count), neither unexpected nor missing; PyTorch loads ours without it."""
    torch = pytest.importorskip("torch")
    twin = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    twin.train()(torch.randn(2, 3, 5, 5))  # running statistics moved, one batch counted
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    assert model.load_state_dict(twin.state_dict()) == ([], [])
    mean = twin[1].running_mean.numpy()
    np.testing.assert_array_equal(model[1].running_mean.numpy(), mean)
    with pytest.raises(KeyError, match=r"unexpected keys \['1.num_batches_trackd'\]"):
        model.load_state_dict({**model.state_dict(), "1.num_batches_trackd": 1})
    assert "1.num_batches_tracked" not in model.state_dict()
    twin.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})


@needs_op("batch_norm")
def test_batch_norm_running_stats_are_copy_on_write():
    bn = nn.BatchNorm2d(2, dtype=F64)
    y = bn(md.tensor(normal(3, 2, 4, 4)))
    z = y * 2.0  # a value computed from the first step's output
    old_mean, old_z = bn.running_mean.numpy(), z.numpy()
    bn(md.tensor(normal(3, 2, 4, 4, seed=1) + 3.0))
    assert not np.array_equal(bn.running_mean.numpy(), old_mean)
    assert np.array_equal(recompute(y), y.numpy()) and np.array_equal(recompute(z), old_z)


@needs_torch
@needs_op("layer_norm")
@pytest.mark.parametrize("shape, normalized", [((4, 6), 6), ((2, 3, 6), (6,)), ((2, 3, 4), (3, 4))])
def test_layer_norm_matches_torch(shape, normalized):
    import torch

    ln = nn.LayerNorm(normalized, eps=1e-6, dtype=F64)
    ln.load_state_dict({"weight": normal(*ln.weight.shape, seed=3),
                        "bias": normal(*ln.bias.shape, seed=4)})  # fmt: skip
    check_against_torch(ln, torch.nn.LayerNorm(normalized, eps=1e-6), [normal(*shape)], rtol=1e-9)


@needs_torch
@needs_op("embedding")
def test_embedding_matches_torch():
    import torch

    indices = np.array([[1, 4, 4], [0, 2, 1]])
    check_against_torch(nn.Embedding(5, 3, dtype=F64), torch.nn.Embedding(5, 3), [indices])


@needs_torch
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_unrolled_matches_torch(bias):
    import torch

    cell = nn.LSTMCell(3, 5, bias=bias, dtype=F64)
    ref = torch_copy(cell, torch.nn.LSTMCell(3, 5, bias=bias))
    xs = normal(4, 2, 3)
    x, tx = md.tensor(xs, requires_grad=True), torch.tensor(xs, requires_grad=True)
    state = tstate = None
    loss, tloss = 0.0, 0.0
    for t in range(xs.shape[0]):  # a loss that reads every step's h and c
        state, tstate = cell(x[t], state), ref(tx[t], tstate)
        w = normal(2, 2, 5, seed=10 + t)
        loss = loss + (state[0] * md.tensor(w[0])).sum() + (state[1] * md.tensor(w[1])).sum()
        tloss = tloss + (tstate[0] * torch.tensor(w[0])).sum()
        tloss = tloss + (tstate[1] * torch.tensor(w[1])).sum()
        np.testing.assert_allclose(state[0].numpy(), tstate[0].detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(state[1].numpy(), tstate[1].detach().numpy(), rtol=1e-12)
    loss.backward()
    tloss.backward()
    compare_grads(cell, ref)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


@needs_torch
def test_lstm_cell_with_given_state_and_unbatched_input():
    import torch

    cell = nn.LSTMCell(3, 4, dtype=F64)
    ref = torch_copy(cell, torch.nn.LSTMCell(3, 4))
    h0, c0, x = normal(2, 4, seed=1), normal(2, 4, seed=2), normal(2, 3, seed=3)
    h, c = cell(md.tensor(x), (md.tensor(h0), md.tensor(c0)))
    th, tc = ref(torch.tensor(x), (torch.tensor(h0), torch.tensor(c0)))
    np.testing.assert_allclose(h.numpy(), th.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(c.numpy(), tc.detach().numpy(), rtol=1e-12)
    h1, c1 = cell(md.tensor(x[0]), (md.tensor(h0[0]), md.tensor(c0[0])))
    assert h1.shape == c1.shape == (4,)
    np.testing.assert_allclose(h1.numpy(), h.numpy()[0], rtol=1e-12)


@pytest.mark.parametrize(
    "x_shape, state, error, given",
    [
        ((4,), lambda: (md.zeros((4,)), md.zeros((4,))), md.ShapeError, r"h \(4,\) and c \(4,\)"),
        (
            (4,),
            lambda: (md.zeros((1, 3)), md.zeros((1, 3))),
            md.ShapeError,
            r"h \(1, 3\) and c \(1, 3\)",
        ),
        ((2, 4), lambda: (md.zeros((2, 3)),), TypeError, r"a tuple of 1: \(2, 3\)"),
        ((2, 4), lambda: md.zeros((2, 3)), TypeError, r"one tensor of shape \(2, 3\)"),
        ((2, 4), lambda: [md.zeros((2, 3)), 0], TypeError, r"h \(2, 3\) and c int"),
    ],
)
def test_lstm_cell_names_the_state_it_wants(x_shape, state, error, given):
    """Not reshape's error, a failed unpacking or one about the wrong pair of shapes."""
    want = "(3,)" if len(x_shape) == 1 else "(2, 3)"
    says = r"LSTMCell\(4, 3, bias=True\): the state must be \(h, c\), two tensors of shape "
    says += rf"{re.escape(want)} for an input of shape {re.escape(str(x_shape))}, got {given}$"
    with pytest.raises(error, match=says):
        nn.LSTMCell(4, 3)(md.zeros(x_shape), state())


@needs_op("dropout")
def test_dropout_eval_is_identity_and_training_masks_replay():
    x = md.tensor(np.ones((50, 40)))
    drop = nn.Dropout(0.25)
    drop.eval()
    assert drop(x) is x
    drop.train()
    md.manual_seed(3)
    first, second = drop(x), drop(x)
    a = first.numpy()
    assert set(np.unique(a)) <= {0.0, 1.0 / 0.75}
    assert 0.15 < (a == 0).mean() < 0.35
    assert not np.array_equal(a, second.numpy())  # a fresh seed per call
    assert np.array_equal(recompute(first), a)  # the seed lives in the recipe
    md.manual_seed(3)
    assert np.array_equal(drop(x).numpy(), a)  # reproducible from the default generator
    own = [nn.Dropout(0.5, rng=11)(x).numpy() for _ in range(2)]
    assert np.array_equal(*own)
    for p in (1.5, -0.5):  # refused when made, not at the first forward
        with pytest.raises(ValueError, match=r"Dropout: p must be in \[0, 1\], got"):
            nn.Dropout(p)
    assert not nn.Dropout(1.0)(x).numpy().any()


@needs_torch
@pytest.mark.parametrize("module, ref", [("ReLU", "ReLU"), ("Tanh", "Tanh"),
                                         ("Sigmoid", "Sigmoid"), ("GELU", "GELU")])  # fmt: skip
def test_activations_match_torch(module, ref):
    import torch

    check_against_torch(getattr(nn, module)(), getattr(torch.nn, ref)(), [normal(3, 4)])


@needs_torch
@needs_op("max_pool2d")
def test_pool_and_flatten_modules_match_torch():
    import torch

    check_against_torch(nn.Sequential(nn.MaxPool2d(2), nn.Flatten()),
                        torch.nn.Sequential(torch.nn.MaxPool2d(2), torch.nn.Flatten()),
                        [normal(2, 3, 4, 6)])  # fmt: skip
    check_against_torch(
        nn.AvgPool2d(3, stride=2, padding=1),
        torch.nn.AvgPool2d(3, stride=2, padding=1),
        [normal(2, 3, 5, 5)],
    )


@needs_torch
@needs_op("cross_entropy")
def test_loss_modules_match_torch():
    import torch

    logits, targets = normal(5, 4), np.array([0, 3, 1, 1, 2])
    ours = nn.CrossEntropyLoss()(md.tensor(logits), md.tensor(targets))
    theirs = torch.nn.CrossEntropyLoss()(torch.tensor(logits), torch.tensor(targets))
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)
    a, b = normal(3, 4, seed=1), normal(3, 4, seed=2)
    ours = nn.MSELoss()(md.tensor(a), md.tensor(b))
    np.testing.assert_allclose(ours.item(), np.mean((a - b) ** 2), rtol=1e-12)


def test_module_list_registers_its_modules_and_identity_passes_through():
    blocks = nn.ModuleList([nn.Linear(2, 2), nn.Identity()])
    blocks.append(nn.Linear(2, 1, bias=False))
    assert len(blocks) == 3 and isinstance(blocks[1], nn.Identity)
    assert [n for n, _ in blocks.named_parameters()] == ["0.weight", "0.bias", "2.weight"]
    x = md.ones((1, 2))
    assert blocks[1](x) is x
    with pytest.raises(NotImplementedError, match="ModuleList does not define forward"):
        blocks(x)


# ---- bad inputs -----------------------------------------------------------------------------


def test_wrong_input_shapes_raise_clear_errors():
    with pytest.raises(md.ShapeError, match=r"Linear\(in_features=4.*4 features.*\(2, 5\)"):
        nn.Linear(4, 3)(md.zeros((2, 5)))
    with pytest.raises(md.ShapeError, match=r"Conv2d\(3, 8.*4-d input with 3 chan.*\(2, 3, 5\)"):
        nn.Conv2d(3, 8, 3)(md.zeros((2, 3, 5)))
    with pytest.raises(md.ShapeError, match=r"Conv2d\(3, 8.*\(2, 4, 5, 5\)"):
        nn.Conv2d(3, 8, 3)(md.zeros((2, 4, 5, 5)))
    with pytest.raises(md.ShapeError, match=r"BatchNorm2d\(3.*3 channels.*\(2, 2, 4, 4\)"):
        nn.BatchNorm2d(3)(md.zeros((2, 2, 4, 4)))
    with pytest.raises(md.ShapeError, match=r"LayerNorm\(\(4,\).*\(4,\).*\(2, 5\)"):
        nn.LayerNorm(4)(md.zeros((2, 5)))
    with pytest.raises(md.ShapeError, match=r"LSTMCell\(3, 4.*\(2, 4\).*\(2, 5\)"):
        nn.LSTMCell(3, 4)(md.zeros((2, 3)), (md.zeros((2, 5)), md.zeros((2, 4))))
    with pytest.raises(md.ShapeError, match=r"LSTMCell\(3, 4.*1 or 2-d input"):
        nn.LSTMCell(3, 4)(md.zeros((2, 2, 3)))
    with pytest.raises(TypeError, match="Embedding.*integer indices.*float32"):
        nn.Embedding(5, 2)(md.zeros((3,)))
    with pytest.raises(TypeError, match="expected a Tensor, got ndarray"):
        nn.Linear(4, 3)(np.zeros((2, 4)))
    with pytest.raises(TypeError, match="Sequential: expected a Module"):
        nn.Sequential(nn.ReLU(), lambda x: x)


def test_requires_grad_freezes_a_module_and_apply_visits_every_submodule():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 2)))
    visited = []
    assert model.apply(lambda m: visited.append(type(m).__name__)) is model
    assert visited == ["Linear", "ReLU", "Linear", "Sequential", "Sequential"]  # children first

    def zero_weights(module):
        if isinstance(module, nn.Linear):
            module.weight.assign(md.zeros_like(module.weight))

    model.apply(zero_weights)
    assert all(not p.numpy().any() for n, p in model.named_parameters() if "weight" in n)

    first = model[0]
    assert first.requires_grad_(False) is first
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    before = [p.numpy().copy() for p in first.parameters()]
    optimizer = md.optim.SGD(model.parameters(), lr=0.1)
    model(md.ones((3, 4))).sum().backward()
    assert all(p.grad is None for p in first.parameters())
    optimizer.step()
    after = [p.numpy() for p in first.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    model.requires_grad_()
    assert all(p.requires_grad for p in model.parameters())


def test_a_module_registered_twice_is_one_child_but_runs_twice():
    """apply, children and named_children visit a module given twice once (as PyTorch's:
    an initialization that scales a weight scales it once); the Sequential still runs it
    at each of its places, and its length, indexing and printing count every place."""
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    weight = shared.weight.numpy().copy()

    def halve(module):
        if isinstance(module, nn.Linear):
            module.weight.assign(module.weight * 0.5)

    model.apply(halve)
    np.testing.assert_array_equal(shared.weight.numpy(), weight * 0.5)
    assert [name for name, _ in model.named_children()] == ["0", "1"]
    assert model.children() == [shared, model[1]]
    assert len(model) == 3 and model[2] is shared and list(model)[2] is shared
    assert "(2): Linear" in repr(model)
    x = md.ones((1, 2))
    np.testing.assert_array_equal(model(x).numpy(), shared(md.relu(shared(x))).numpy())


def test_a_sequential_of_named_modules():
    """Sequential(OrderedDict(...)), PyTorch's named form: the names key the state dict."""
    from collections import OrderedDict

    model = nn.Sequential(OrderedDict(fc=nn.Linear(2, 3), act=nn.ReLU(), out=nn.Linear(3, 1)))
    assert [name for name, _ in model.named_children()] == ["fc", "act", "out"]
    assert list(model.state_dict()) == ["fc.weight", "fc.bias", "out.weight", "out.bias"]
    assert model(md.ones((4, 2))).shape == (4, 1) and model[2] is model.out
    with pytest.raises(ValueError, match="a module's name must be a Python name or a number"):
        nn.Sequential({"a.b": nn.ReLU()})
    with pytest.raises(ValueError, match="not already an attribute, got 'forward'"):
        nn.Sequential({"forward": nn.ReLU()})
    with pytest.raises(TypeError, match="Sequential: 'x' is a int, not a Module"):
        nn.Sequential({"x": 3})


def test_clip_grad_norm_scales_the_gradients_as_pytorch():
    """The norm before clipping, and the gradients after, against torch.nn.utils; one
    without a gradient passed over; nothing changed below the limit."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4,), (5, 2)]]
    ours = [md.tensor(np.zeros(g.shape, np.float32), requires_grad=True) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, q, g in zip(ours, theirs, grads, strict=True):
        p.grad, q.grad = md.tensor(g), torch.tensor(g)
    frozen = md.tensor(np.ones(2, np.float32), requires_grad=True)  # no gradient
    for limit in (100.0, 1.0):
        norm = nn.utils.clip_grad_norm_([*ours, frozen], limit)
        assert norm.item() == torch.nn.utils.clip_grad_norm_(theirs, limit).item()
        for p, q in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)
    assert frozen.grad is None and nn.utils.clip_grad_norm_([frozen], 1.0).item() == 0.0
    with pytest.raises(ValueError, match="clip_grad_norm_: max_norm must be >= 0 and finite"):
        nn.utils.clip_grad_norm_(ours, float("nan"))


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")  # inf * 0
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_clip_grad_norm_scales_by_a_norm_that_is_not_finite_as_pytorch(bad):
    """NaN makes every gradient NaN, inf makes them zeros (NaN where infinite), as torch's
    (they were left as they were); error_if_nonfinite raises and changes nothing."""
    torch = pytest.importorskip("torch")
    grads = [np.array([1.0, bad, 3.0], np.float32), np.array([2.0, -1.0], np.float32)]
    ours = [md.tensor(np.zeros(g.shape, np.float32), requires_grad=True) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, q, g in zip(ours, theirs, grads, strict=True):
        p.grad, q.grad = md.tensor(g), torch.tensor(g)
    with pytest.raises(RuntimeError, match=f"clip_grad_norm_: the gradients' total norm is {bad}"):
        nn.utils.clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(ours[0].grad.numpy(), grads[0])
    norm = nn.utils.clip_grad_norm_(ours, 1.0)
    np.testing.assert_array_equal(norm.numpy(), torch.nn.utils.clip_grad_norm_(theirs, 1.0))
    for p, q in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
