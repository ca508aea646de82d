"""A pytest plugin: every test runs on fresh minidtr allocators, so a suite does not depend
on the order of its tests.

Installed minidtr registers it with pytest (the ``pytest11`` entry point
``minidtr.testing.plugin``); a project that uses minidtr from a source tree adds
``pytest_plugins = ["minidtr.testing.plugin"]`` to its top-level conftest.py.

Around each test, every device's allocator is replaced by a new one (created on
first use) and the process's allocators are put back after it
(``isolated_allocators``). What a finished test leaves alive (a tensor kept by
the exception ``pytest.raises`` stored, a module-level cache, a failed
example's traceback) is then not counted against the next test's budgets.
Tensors made outside tests (at import, in wider-scoped fixtures) stay in the
process's allocators: usable inside a test, but not counted against its budgets.

- fixture ``minidtr_allocator``: the test's own CPU allocator (``memory``,
  ``constant_bytes``, ... for assertions).
- ini option ``minidtr_isolate = false`` turns the isolation off (as does
  ``-p no:minidtr.testing.plugin``); the fixture still works then, isolating
  the tests that request it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..runtime.allocator import Allocator
from ..runtime.registry import allocator_for
from .isolation import isolated_allocators


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "minidtr_isolate",
        "give each test fresh minidtr allocators (default true)",
        type="bool",
        default=True,
    )


@pytest.fixture(autouse=True)
def _minidtr_isolated_allocators(request: pytest.FixtureRequest) -> Iterator[None]:
    if not request.config.getini("minidtr_isolate"):
        yield
        return
    with isolated_allocators():
        yield


@pytest.fixture
def minidtr_allocator(request: pytest.FixtureRequest) -> Iterator[Allocator]:
    """This test's own CPU allocator (a fresh one, dropped after the test)."""
    if request.config.getini("minidtr_isolate"):
        yield allocator_for("cpu")
        return
    with isolated_allocators():
        yield allocator_for("cpu")
