import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

# Each test on fresh allocators (also registered by an installed minidtr's entry point).
pytest_plugins = ["minidtr.testing.plugin"]

# Check every kernel's outputs and every backward's gradients against the shapes and dtypes
# the op declared: bugs in ops fail here, while ordinary runs skip the cost.
from minidtr.runtime import allocator as _allocator_module  # noqa: E402

_allocator_module.CHECK_OPS = True

SHARED_TRACES = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def shared_traces() -> pathlib.Path:
    """The reference logs in ../shared/traces (skips where they are absent)."""
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return SHARED_TRACES


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium for a module's page tests (mark them with
    ``skipif(browser.unavailable() is not None)``)."""
    from minidtr.testing import browser

    with browser.chromium() as b:
        yield b


@pytest.fixture
def fresh_allocator():
    """A new CPU allocator for the test, so that storages left by other tests (and evictions
    of them) cannot influence its decisions."""
    from minidtr.testing import isolated_allocator

    with isolated_allocator() as allocator:
        yield allocator


def pytest_collection_finish(session):
    """Freeze what exists once the tests are collected (modules, PyTorch, hypothesis): the
    runtime runs a full garbage collection before it reports a BudgetError, and the many
    infeasible budgets a property test tries would each rescan that whole heap."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _check_decisions_against_loop():
    """With MINIDTR_CHECK_DECISIONS=1, every eviction decision made from the candidate
    table is repeated by the reference loop and must agree (tests/decision_check.py)."""
    import os

    if os.environ.get("MINIDTR_CHECK_DECISIONS") != "1":
        yield
        return
    from decision_check import checked_decisions

    with checked_decisions():
        yield


@pytest.fixture
def replay_slowdowns(monkeypatch) -> list[float]:
    """A list to which every allocator appends the slowdown so far, (compute + remat) /
    compute, after each rematerialization (``monkeypatch.undo()`` stops it)."""
    from minidtr.runtime.remat import Rematerializer

    seen: list[float] = []
    replay = Rematerializer.replay

    def noting(self, recipe, *args, **kwargs):
        replay(self, recipe, *args, **kwargs)
        seen.append(self.allocator.stats.slowdown)

    monkeypatch.setattr(Rematerializer, "replay", noting)
    return seen
