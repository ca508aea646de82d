"""The pytest plugin's manners, in dummy projects: invisible to a project that does not use
minidtr (no minidtr, no NumPy, its own BLAS threads), and for one that does, every test from
the same random state and modes, whatever ran before it."""

import os
import pathlib
import sys
import tomllib

import pytest

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def installed(pytester, monkeypatch, tmp_path_factory):
    """Run pytester's sessions in subprocesses as with minidtr installed from this tree: a
    dist-info on PYTHONPATH (found before any other installed copy) registers the pytest11
    entry point pyproject.toml declares."""
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    (name, module), *_ = entry_points["pytest11"].items()
    site = tmp_path_factory.mktemp("site")
    info = site / "minidtr-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: minidtr\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{name} = {module}\n")
    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    return module


def test_the_entry_point_names_a_module_that_imports_neither_minidtr_nor_numpy(installed):
    assert installed == "minidtr_pytest"
    code = (
        "import sys, minidtr_pytest; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('minidtr', 'numpy')))"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_project_without_minidtr_loads_neither_and_keeps_its_blas_threads(pytester, installed):
    pytester.makeconftest("import os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\n")
    pytester.makepyfile(
        test_other="""
import sys

def test_nothing_of_minidtr_is_loaded(request):
    assert "minidtr.testing.plugin" in request.config.pluginmanager._name2plugin
    assert not [m for m in sys.modules if m.split(".")[0] in ("minidtr", "numpy")]

def test_blas_threads_are_the_projects():
    import numpy  # first imported here, after the conftest set the variable
    from threadpoolctl import threadpool_info

    assert {pool["num_threads"] for pool in threadpool_info()} == {1}
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


USES_MINIDTR = """
import numpy as np
import minidtr as md

DRAWN = []

def test_a_draws():
    DRAWN.append(md.randn((3,)).numpy())

def test_b_draws():
    DRAWN.append(md.randn((3,)).numpy())

def test_both_drew_the_same():
    assert (DRAWN[0] == DRAWN[1]).all()
"""


def test_each_test_starts_from_the_same_random_state(pytester, installed):
    pytester.makepyfile(test_draws=USES_MINIDTR)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)
    pytester.makeini("[pytest]\nminidtr_seed = none\n")  # left alone: the control
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)


def test_a_leaked_mode_is_reset_with_a_warning_naming_the_test(pytester, installed):
    pytester.makepyfile(
        test_modes="""
import minidtr as md
from minidtr.modes import CONSTANTS, GRAD_ENABLED

def test_leaves_no_grad_on():
    md.no_grad().__enter__()

def test_leaves_constants_on():
    md.as_constants().__enter__()

def test_sees_the_defaults():
    assert GRAD_ENABLED.get() is True and CONSTANTS.get() is False
    x = md.randn((2,), requires_grad=True)
    assert (x * 2).grad_fn is not None
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "default")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*ModeLeakWarning: test_modes.py::test_leaves_no_grad_on left minidtr's grad mode "
            "off (a no_grad() entered and not left); it is reset for the next test",
            "*ModeLeakWarning: test_modes.py::test_leaves_constants_on left minidtr's constant "
            "mode on*",
        ]
    )


def test_modes_leaked_together_under_warnings_as_errors_blame_only_the_leaking_test(
    pytester, installed
):
    """The first mode's warning, raised as an error, left the second mode on (the next test
    errored at setup) and the process's allocators not put back."""
    pytester.makepyfile(
        test_modes="""
import minidtr as md
from minidtr.runtime import registry

PROCESS = registry.allocator_for("cpu")

def test_leaves_both_modes():
    md.no_grad().__enter__()
    md.as_constants().__enter__()

def test_innocent():
    assert md.tensor([1.0], requires_grad=True).requires_grad

def teardown_module():  # after the tests: the process's allocator is back
    assert registry.allocator_for("cpu") is PROCESS
"""
    )
    warnings_as_errors = ("-W", "error::minidtr_pytest.ModeLeakWarning")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *warnings_as_errors)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_both_modes*",
            "*test_leaves_both_modes left minidtr's grad mode off (*) and constant mode on "
            "(*); they are reset for the next test",
        ]
    )


@pytest.mark.parametrize(
    "line, says",
    [
        (
            "minidtr_seed = -1",
            "minidtr_seed must be an integer in [[]0, 2**64) or 'none', got '-1'",
        ),
        (
            "minidtr_seed = abc",
            "minidtr_seed must be an integer in [[]0, 2**64) or 'none', got 'abc'",
        ),
        ("minidtr_isolate = maybe", "minidtr_isolate must be true or false, got 'maybe'"),
    ],
)
def test_a_bad_ini_value_is_one_usage_error_at_startup_naming_the_option(
    pytester, installed, line, says
):
    """It was an error in every test, naming neither the option nor its value."""
    pytester.makeini(f"[pytest]\n{line}\n")
    pytester.makepyfile(
        test_two="import minidtr\n\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: ini option {says}"])
    assert "test_a" not in result.stdout.str()


def test_minidtr_imported_by_a_test_is_isolated_after_it(pytester, installed):
    pytester.makepyfile(
        test_late="""
import sys

def test_imports_minidtr_inside():
    import minidtr as md

    x = md.randn((100,))
    from minidtr.runtime import registry

    assert registry.allocator_for("cpu").memory == x.nbytes == 400

def test_next_starts_empty():
    from minidtr.runtime import registry

    assert registry.installed() == {}
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
