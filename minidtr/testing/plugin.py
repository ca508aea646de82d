"""The pytest plugin ``minidtr.testing.plugin``, for projects that use minidtr from a source
tree: ``pytest_plugins = ["minidtr.testing.plugin"]`` in their top-level conftest.py.

An installed minidtr registers the same hooks under the same name by its ``pytest11``
entry point, from the top-level module ``minidtr_pytest``, which imports neither minidtr
nor NumPy (importing this module imports minidtr). The hooks, the fixtures and what they
do around each test are described there.
"""

from minidtr_pytest import (
    ModeLeakWarning,
    _minidtr_per_test,
    minidtr_allocator,
    pytest_addoption,
    pytest_configure,
)

__all__ = [
    "ModeLeakWarning",
    "_minidtr_per_test",
    "minidtr_allocator",
    "pytest_addoption",
    "pytest_configure",
]
