"""The stateful machine minidtr offers users (minidtr.testing.RematMachine): ops, reads,
evictions, pins, budget changes, drops, backward and optimizer steps in any order, on a
budgeted runtime and an unbounded shadow; the budget holds, the counts add up, the values
are the shadow's. And it finds a bug planted in the runtime's accounting or in an op."""

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from minidtr.runtime.lifetime import Lifetimes
from minidtr.testing import RematMachine
from minidtr.testing import machine as machine_module

SETTINGS = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestRematMachine = RematMachine.TestCase
TestRematMachine.settings = SETTINGS

# finding a planted bug: the first failing example is enough (no shrinking); the same
# examples in every run, whatever ran before
FIND = settings(SETTINGS, phases=[Phase.generate], report_multiple_bugs=False, derandomize=True)


def test_the_machine_finds_pinned_bytes_left_uncounted(monkeypatch):
    def pin_without_counting(self, storage):
        with self.allocator.holding(storage):
            storage.pinned = True
            self.allocator.eviction.candidates.discard(storage)

    monkeypatch.setattr(Lifetimes, "pin", pin_without_counting)
    with pytest.raises(AssertionError, match="pinned"):
        run_state_machine_as_test(RematMachine, settings=FIND)


def test_the_machine_finds_an_impure_op(monkeypatch):
    real = machine_module.apply_named

    def noisy(name, args, seed):
        out = real(name, args, seed)
        if name == "tanh":  # tanh plus a draw from NumPy's global generator (large enough
            # to change a float32: a draw times 1e-9 would vanish in the rounding)
            out = out + real("tanh", [args[0]], seed) * float(np.random.random() * 1e-3)
        return out

    monkeypatch.setattr(machine_module, "apply_named", noisy)
    with pytest.raises(AssertionError, match="differs from the unbounded shadow's"):
        run_state_machine_as_test(RematMachine, settings=FIND)


def test_a_subclass_draws_from_its_own_ops(monkeypatch):
    real, applied = machine_module.apply_named, set()

    def noting(name, args, seed):
        applied.add(name)
        return real(name, args, seed)

    class TanhAndAdd(RematMachine):
        OPS = ("tanh", "add")

    monkeypatch.setattr(machine_module, "apply_named", noting)
    run_state_machine_as_test(TanhAndAdd, settings=settings(SETTINGS, max_examples=20))
    assert applied == {"tanh", "add"}
