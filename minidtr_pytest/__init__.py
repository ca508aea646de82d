"""minidtr's pytest plugin, registered with pytest as ``minidtr.testing.plugin`` by an
installed minidtr (the ``pytest11`` entry point): every test that uses minidtr runs on
fresh allocators, from the same random state and in the default modes, so a suite does
not depend on the order of its tests.

It loads into every pytest run of the environment, so it keeps to itself: importing it
imports neither minidtr nor NumPy (a project that does not use minidtr loads neither,
and one whose conftest.py sets ``OPENBLAS_NUM_THREADS`` still decides its BLAS
threads), and it does nothing around a test until minidtr has been imported. Around
each test that runs with minidtr imported (before it, or by it):

- allocators: every device's allocator is replaced by a new one (made on first use)
  and the process's are put back after the test (``minidtr.testing.isolated_allocators``):
  what a finished test left alive (the exception ``pytest.raises`` kept, a cache, a
  failed example's traceback) is not counted against the next test's budgets. Tensors
  made outside tests (at import, in wider-scoped fixtures) stay in the process's
  allocators: usable, but not counted against a test's budgets.
- random state: minidtr's default generator is reset with ``md.manual_seed(0)``, the
  state a new process starts in (ini option ``minidtr_seed``: another seed, or ``none``
  to leave it alone), so a test that draws from it (``md.randn`` without a seed, layer
  initializations) sees the same values in any order.
- modes: a test that leaves grad mode off (a ``no_grad()`` entered and not left) or
  constant mode on (``as_constants()``) gets a warning naming it, and the mode is reset
  for the next test.
- ``MINIDTR_AUDIT=1`` in the environment turns the audit (``Runtime(audit=True)``) on
  under every runtime.

- fixture ``minidtr_allocator``: the test's own CPU allocator (``memory``,
  ``constant_bytes``, ... for assertions).
- ini option ``minidtr_isolate = false`` turns the isolation of allocators off (the
  fixture still isolates the tests that request it; ``-p no:minidtr.testing.plugin``
  turns the whole plugin off).
- a bad value of either ini option is one usage error at startup (``pytest_configure``).

From a source tree (no entry point), a project adds ``pytest_plugins =
["minidtr.testing.plugin"]`` to its top-level conftest.py, which loads the same hooks.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest


class ModeLeakWarning(UserWarning):
    """A test left minidtr's grad mode off or constant mode on."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "minidtr_isolate",
        "give each test fresh minidtr allocators (default true)",
        type="bool",
        default=True,
    )
    parser.addini(
        "minidtr_seed",
        "md.manual_seed(this) before each test that uses minidtr (default 0, the state a "
        "new process starts in; 'none' leaves the generator alone)",
        default="0",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A bad ini value is one usage error at startup, naming the option, rather than an
    error in every test."""
    _isolate(config)
    _seed(config)


def _loaded() -> bool:
    """Whether minidtr has been imported (the plugin does nothing before)."""
    return "minidtr.runtime.registry" in sys.modules


def _isolate(config: pytest.Config) -> bool:
    try:
        return bool(config.getini("minidtr_isolate"))
    except (ValueError, pytest.UsageError):  # pytest's bool ini: "invalid truth value"
        value = config.inicfg.get("minidtr_isolate")
        message = f"ini option minidtr_isolate must be true or false, got {value!r}"
        raise pytest.UsageError(message) from None


def _seed(config: pytest.Config) -> int | None:
    value = str(config.getini("minidtr_seed")).strip().lower()
    if value == "none":
        return None
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**64:  # md.manual_seed's range
        message = (
            f"ini option minidtr_seed must be an integer in [0, 2**64) or 'none', got {value!r}"
        )
        raise pytest.UsageError(message)
    return seed


@pytest.fixture(autouse=True)
def _minidtr_per_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fresh allocators, the default generator reset, leaked modes reported (module doc)."""
    isolate = _isolate(request.config)
    saved = None
    if _loaded():
        from minidtr.runtime import registry

        _prepare(request)
        if isolate:
            saved = registry.installed()
            registry.restore({})
    try:
        yield
    finally:
        if _loaded():
            from minidtr.runtime import registry

            try:
                _reset_modes(request.node.nodeid)
            finally:  # the warning may be an error (-W error::...ModeLeakWarning)
                if isolate:
                    registry.restore(saved or {})


def _prepare(request: pytest.FixtureRequest) -> None:
    """Before a test with minidtr imported: the audit if asked for, modes left by what ran
    outside tests, the default generator."""
    from minidtr.ops.random import manual_seed
    from minidtr.runtime import audit

    if os.environ.get("MINIDTR_AUDIT") == "1":
        audit.EVERYWHERE = True
    _reset_modes(f"something before {request.node.nodeid} (an import, a fixture)")
    seed = _seed(request.config)
    if seed is not None:
        manual_seed(seed)


def _reset_modes(culprit: str) -> None:
    """Reset every mode left on, then warn once naming them all (a warning made an error
    must not leave the next mode on for the next test to be blamed for)."""
    from minidtr.modes import CONSTANTS, GRAD_ENABLED

    modes: list[tuple[Any, bool, str]] = [
        (GRAD_ENABLED, True, "grad mode off (a no_grad() entered and not left)"),
        (CONSTANTS, False, "constant mode on (an as_constants() entered and not left)"),
    ]
    leaked = [what for var, default, what in modes if var.get() is not default]
    for var, default, _ in modes:
        var.set(default)
    if leaked:
        they = "it is" if len(leaked) == 1 else "they are"
        warnings.warn(
            f"{culprit} left minidtr's {' and '.join(leaked)}; {they} reset for the next test",
            ModeLeakWarning,
            stacklevel=2,
        )


@pytest.fixture
def minidtr_allocator(request: pytest.FixtureRequest) -> Iterator[Any]:
    """This test's own CPU allocator (a fresh one, dropped after the test)."""
    from minidtr.runtime.registry import allocator_for
    from minidtr.testing.isolation import isolated_allocators

    if _isolate(request.config):
        yield allocator_for("cpu")
        return
    with isolated_allocators():
        yield allocator_for("cpu")
