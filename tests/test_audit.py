"""The audit (Runtime(audit=True)): an impure op is named at its first recomputation, a
kernel writing into its input or changing its op at once; nothing else changes."""

import re
import sys

import numpy as np
import pytest

import minidtr as md
from minidtr.ops.op import Op, apply, float_dtype
from minidtr.runtime import audit as audit_module
from minidtr.runtime.errors import (
    AuditError,
    InputMutation,
    OpStateChanged,
    RecomputeMismatch,
    RematMismatch,
)
from minidtr.testing import isolated_allocator


class Unary(Op):
    def infer(self, x):
        return [(x.shape, float_dtype(self, x))]


class NoisyTanh(Unary):
    """Draws from NumPy's global generator: a different result at each run."""

    name = "noisy_tanh"

    def forward(self, xp, x):
        return xp.tanh(x) + np.random.standard_normal(x.shape).astype(x.dtype) * 1e-3


class DoubleInPlace(Unary):
    name = "double_in_place"

    def forward(self, xp, x):
        x *= 2
        return x.copy()


class Scale(Unary):
    """Reads its factor from the op object, which the caller changes between calls."""

    name = "scale"

    def __init__(self, factor):
        self.factor = factor

    def forward(self, xp, x):
        return x * self.factor


class Stashing(Unary):
    name = "stashing"

    def forward(self, xp, x):
        self.last_input = x  # state of one application kept on the op
        return x * 2


class SplitNoisy(Op):
    """Two outputs; the second is impure."""

    name = "split_noisy"
    n_outputs = 2

    def infer(self, x):
        return [(x.shape, x.dtype), (x.shape, x.dtype)]

    def forward(self, xp, x):
        return x * 2, x + np.random.standard_normal(x.shape).astype(x.dtype)


def evict_and_read(allocator, t):
    allocator.evict(t.cell.storage)
    return t.numpy()


def test_an_impure_op_is_named_at_its_first_recomputation():
    with isolated_allocator() as allocator, md.Runtime(audit=True):
        x = md.randn((4, 6), seed=0)
        y = apply(NoisyTanh(), x)  # the line the error names
        line = sys._getframe().f_lineno - 1
        with pytest.raises(RecomputeMismatch) as info:
            evict_and_read(allocator, y)
    error = info.value
    message = str(error)
    assert isinstance(error, RematMismatch) and isinstance(error, AuditError)
    assert "\n" not in message
    assert message.startswith("recomputing op 'noisy_tanh' (test_audit.NoisyTanh, applied at "), (
        message
    )
    assert re.search(rf"tests/test_audit.py:{line} in test_an_impure_op", message), message
    assert f"output 0 (storage #{y.cell.storage.id}): shape (4, 6) float32:" in message
    assert "24 of 24 elements differ, the first at index (0, 0): " in message
    assert "the usual cause is an impure user op" in message and "not minidtr" in message
    assert isinstance(error.op, NoisyTanh) and "test_audit.py" in error.site
    assert allocator.memory == x.cell.storage.nbytes  # the failed replay counted nothing


def test_without_the_audit_the_recomputation_goes_unnoticed():
    with isolated_allocator() as allocator, md.Runtime():
        x = md.randn((4, 6), seed=0)
        y = apply(NoisyTanh(), x)
        first = y.numpy()
        assert not (evict_and_read(allocator, y) == first).all()


def test_a_shared_op_changed_between_calls_is_named_with_the_attribute():
    shared = Scale(2.0)
    with isolated_allocator() as allocator, md.Runtime(audit=True):
        x = md.randn((3,), seed=1, dtype=md.float64)
        y = apply(shared, x)
        shared.factor = 3.0  # the caller reuses the op for another call
        z = apply(shared, x)
        with pytest.raises(RecomputeMismatch, match=r"op 'scale' \(test_audit.Scale") as info:
            evict_and_read(allocator, y)
        assert "changed since it was applied: 'factor' (2.0 then, 3.0 now)" in str(info.value)
        del z


def test_the_output_of_a_multi_output_op_is_named_by_index():
    with isolated_allocator() as allocator, md.Runtime(audit=True):
        x = md.randn((5,), seed=2)
        a, b = apply(SplitNoisy(), x)
        allocator.evict(a.cell.storage)
        allocator.evict(b.cell.storage)
        with pytest.raises(RecomputeMismatch, match=r"output 1 \(storage #\d+\): shape \(5,\)"):
            a.numpy()  # the replay refills both outputs: the impure one is checked too


def test_outputs_over_the_copy_limit_are_compared_by_crc(monkeypatch):
    monkeypatch.setattr(audit_module, "COPY_LIMIT", 16)
    with isolated_allocator() as allocator, md.Runtime(audit=True):
        y = apply(NoisyTanh(), md.randn((8, 8), seed=3))
        with pytest.raises(RecomputeMismatch, match=r"the bytes differ \(CRC-32 0x[0-9a-f]{8} vs"):
            evict_and_read(allocator, y)


@pytest.mark.parametrize("copy_limit", [None, 0])
def test_a_0d_output_recomputed_is_not_a_mismatch(monkeypatch, copy_limit):
    """A loss is a 0-d array: compared as one, kept as a copy or by its CRC."""
    if copy_limit is not None:
        monkeypatch.setattr(audit_module, "COPY_LIMIT", copy_limit)
    logits = md.randn((4, 3), seed=1)
    with isolated_allocator() as allocator, md.Runtime(audit=True):
        losses = [
            md.cross_entropy(logits * 1.0, md.tensor(np.array([0, 1, 2, 0]))),
            md.mse_loss(logits * 2.0, md.zeros((4, 3))),
        ]
        first = [loss.numpy() for loss in losses]
        for loss, value in zip(losses, first, strict=True):
            assert evict_and_read(allocator, loss).shape == () and loss.numpy() == value


def test_a_kernel_writing_into_its_input_is_stopped_at_once():
    with isolated_allocator(), md.Runtime(audit=True):
        x = md.randn((4, 4), seed=4)
        before = x.numpy()
        with pytest.raises(InputMutation) as info:
            apply(DoubleInPlace(), x)
        assert (x.numpy() == before).all()  # stopped before it wrote anything
        # the input is writeable again, and the runtime usable
        assert x.cell.storage.buffer.flags.writeable
        assert (md.tanh(x).numpy() == np.tanh(before)).all()
    message = str(info.value)
    assert message.startswith("op 'double_in_place' (test_audit.DoubleInPlace, applied at ")
    assert "wrote into one of its inputs" in message and "y = x * 2, not x *= 2" in message
    with isolated_allocator(), md.Runtime():  # without the audit it writes unnoticed
        x = md.randn((4, 4), seed=4)
        apply(DoubleInPlace(), x)
        assert (x.numpy() == 2 * before).all()


def test_inputs_that_are_views_of_each_other_are_writeable_again():
    with isolated_allocator(), md.Runtime(audit=True):
        x = md.randn((3, 3), seed=5)
        for a, b in ((x, x.T), (x.T, x), (x, x)):
            (a + b).numpy()
            assert x.cell.storage.buffer.flags.writeable


def test_a_kernel_keeping_state_on_its_op_is_stopped():
    with isolated_allocator(), md.Runtime(audit=True):
        x = md.randn((2, 2), seed=6)
        with pytest.raises(OpStateChanged, match=r"op 'stashing' .* attributes 'last_input'"):
            apply(Stashing(), x)


class StashingInADict(Unary):
    name = "stashing_in_a_dict"

    def __init__(self):
        self.axes = [0, (1, [2])]  # static, nested containers: left as they are
        self.saved = {"inputs": []}

    def forward(self, xp, x):
        self.saved["inputs"].append(x)  # the attribute is the same dict: its contents change
        return x * 2


def test_state_kept_inside_a_container_on_the_op_is_stopped():
    with isolated_allocator(), md.Runtime(audit=True):
        x = md.randn((2, 2), seed=6)
        with pytest.raises(OpStateChanged, match=r"op 'stashing_in_a_dict' .* attributes 'saved' "):
            apply(StashingInADict(), x)
        static = StashingInADict()
        static.forward = lambda xp, x: x * 2  # keeps nothing: no false alarm
        assert (apply(static, x).numpy() == 2 * x.numpy()).all()


def test_a_gradient_op_is_placed_in_the_backward_of_its_op():
    class NoisyBackward(Unary):
        name = "noisy_backward"

        def forward(self, xp, x):
            return x * 2

        def backward(self, ctx, grad):
            return (apply(NoisyTanh(), grad),)

    with isolated_allocator() as allocator, md.Runtime(audit=True):
        x = md.randn((3,), seed=7, requires_grad=True)
        (g,) = md.grad(apply(NoisyBackward(), x).sum(), [x])  # a gradient with its recipe
        with pytest.raises(RecomputeMismatch, match=r"test_audit.py:\d+ in backward\)"):
            evict_and_read(allocator, g)


def test_minidtrs_own_ops_are_named_without_a_site(monkeypatch):
    """Where minidtr's own ops were applied is not recorded (the walk of the stack is the
    audit's main cost on small ops); a mismatch of one of them is a bug to report."""
    from minidtr.ops import activation

    def noisy(self, xp, x):
        return xp.tanh(x) + np.random.standard_normal(x.shape).astype(x.dtype)

    with isolated_allocator() as allocator, md.Runtime(audit=True):
        y = md.tanh(md.randn((4,), seed=8))
        monkeypatch.setattr(activation.Tanh, "forward", noisy)
        with pytest.raises(RecomputeMismatch) as info:
            evict_and_read(allocator, y)
        (record,) = [p for p in allocator.audit.prints.values() if p.application.op.name == "tanh"]
        assert record.application.site is None
    message = str(info.value)
    assert "op 'tanh' (minidtr.ops.activation.Tanh, one of minidtr's own ops)" in message
    assert "this is a bug in minidtr; please report it" in message


def test_the_audit_changes_no_decision():
    def run(audit, reference=False):
        md.manual_seed(0)
        with isolated_allocator():
            w = md.randn((32, 32), requires_grad=True)
            x = md.randn((16, 32))
            options = dict(cost="flops", audit=audit, reference=reference)
            with md.Runtime(budget=30_000, **options) as rt:
                h = x
                for _ in range(6):
                    h = md.dropout(md.tanh(h @ w), 0.1)
                loss = (h * h).mean()
                loss.backward()
                stats = rt.stats()
            return loss.item(), w.grad.numpy(), stats["evictions"], stats["remats"]

    plain = run(False)
    for audited in (run(True), run(True, reference=True)):
        assert audited[0] == plain[0] and (audited[1] == plain[1]).all()
        assert audited[2:] == plain[2:] and plain[3] > 0


def test_nested_runtimes_audit_while_one_of_them_does():
    with isolated_allocator() as allocator:
        with md.Runtime(audit=True):
            assert allocator.audit is not None
            with md.Runtime(budget=10**6):
                assert allocator.audit is not None
            assert allocator.audit is not None
        assert allocator.audit is None


def test_audit_is_a_checked_option():
    with pytest.raises(TypeError, match="audit must be True or False, got 'yes'"):
        md.Runtime(audit="yes")
    assert md.Runtime(audit=True).options.audit is True
