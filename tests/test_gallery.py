"""docs/examples/planted_bugs.py: each planted bug is caught within the first 10 examples of
its property test, by the error docs/testing.md shows, naming the op and where it was
applied; without the planted bug the same property test passes."""

import importlib.util
import pathlib
import re
import sys

import pytest
from hypothesis import Phase, settings

from minidtr.testing import (
    GradientMismatch,
    InputMutation,
    NondeterminismError,
    OpStateChanged,
    RecomputeMismatch,
)

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.fixture
def gallery(monkeypatch):
    """The module, with its checks counting the examples they run, and hypothesis told not
    to shrink a failing example (its settings are made from the profile loaded then)."""
    spec = importlib.util.spec_from_file_location("planted_bugs", EXAMPLES / "planted_bugs.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "planted_bugs", module)
    settings.register_profile("no-shrinking", phases=[Phase.explicit, Phase.generate])
    previous = settings._current_profile
    settings.load_profile("no-shrinking")
    try:
        spec.loader.exec_module(module)
    finally:
        settings.load_profile(previous)
    module.examples = []
    for name in ("assert_remat_equivalent", "check_gradients"):
        checker = getattr(module, name)

        def counting(*args, _checker=checker, **kwargs):
            module.examples.append(1)
            return _checker(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
    return module


CAUGHT = {
    "check_global_rng": (
        RecomputeMismatch,
        r"recomputing op 'noisy_tanh' \(planted_bugs\.NoisyTanh, applied at \S*planted_bugs\.py:"
        r"\d+ in <lambda>\) gave other bits than its first computation: output 0 \(storage #\d+\)"
        r": shape \(64, 32\) float32: \d+ of 2048 elements differ, the first at index",
    ),
    "check_state_on_a_shared_op": (
        OpStateChanged,
        r"op 'square' \(planted_bugs\.Square, applied at \S*planted_bugs\.py:\d+ in <lambda>\) "
        r"changed the op object's own attributes 'x' while its kernel ran",
    ),
    "check_in_place": (
        InputMutation,
        r"op 'centered' \(planted_bugs\.Centered, applied at \S*planted_bugs\.py:\d+ in "
        r"<lambda>\) wrote into one of its inputs",
    ),
    "check_wrong_backward": (
        GradientMismatch,
        r"the backward of op 'swish' \(planted_bugs\.Swish, applied at \S*planted_bugs\.py:\d+ "
        r"in model\) disagrees with central differences: for input 0 \(shape \(4, 5\)\)",
    ),
    "check_cached_intermediate": (
        NondeterminismError,
        r"two unbounded runs of it gave the same values but differ in peak memory \([\d,]+ vs "
        r"[\d,]+\) and storages made \(\d+ vs \d+\) and ops run \(\d+ vs \d+\)",
    ),
}


def first_failure(check, module) -> tuple[int, AssertionError]:
    """How many examples ran until ``check`` first raised, and what it raised."""
    failed: list = []
    inner = check.hypothesis.inner_test

    def noting(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except AssertionError as error:
            failed.append((len(module.examples), error))
            raise

    check.hypothesis.inner_test = noting
    try:
        with pytest.raises(AssertionError):
            check()
    finally:
        check.hypothesis.inner_test = inner
    return failed[0]


@pytest.mark.parametrize("name", list(CAUGHT))
def test_each_planted_bug_is_caught_within_ten_examples_with_the_op_named(gallery, name):
    kind, message = CAUGHT[name]
    examples, error = first_failure(getattr(gallery, name), gallery)
    assert examples <= 10
    assert isinstance(error, kind), error
    assert re.search(message, str(error)), str(error)
    assert "\n" not in str(error)


def test_without_the_bugs_the_same_checks_pass(gallery):
    md = gallery.md
    gallery.check(lambda: md.tanh)()  # the property test of the others, with tanh
    correct = gallery.Swish.backward

    def right(self, ctx, grad):
        (x,) = ctx.inputs
        s = md.sigmoid(x)
        return (grad * (s + x * s * (1 - s)),)

    gallery.Swish.backward = right
    try:
        gallery.check_wrong_backward()
    finally:
        gallery.Swish.backward = correct
