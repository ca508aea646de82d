"""Ctrl-C while the minidtr command is still importing (minidtr/_startup.py): one line on
stderr and exit 130, as everywhere else in the command, not Python's traceback."""

import os
import signal
import subprocess
import sys

import pytest

from minidtr import _startup, cli

# A process that is the command (argv[0] is the console script's name) and gets a SIGINT
# the moment NumPy starts to import, in the middle of the package's imports.
INTERRUPTED_IMPORT = """
import os, signal, sys
sys.argv[0] = "/somewhere/bin/minidtr"

class InterruptNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptNumpy())
from minidtr.cli import main
sys.exit(main())
"""


def run_python(code: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120
    )


def test_ctrl_c_while_the_command_imports_is_one_line_and_exit_130():
    done = run_python(INTERRUPTED_IMPORT, "train", "mlp", "--steps", "1")
    assert done.returncode == 130, done.stderr
    assert done.stderr == "minidtr: interrupted\n"
    assert done.stdout == ""


def test_a_program_that_imports_minidtr_keeps_pythons_handler():
    code = "import signal, minidtr\nprint(signal.getsignal(signal.SIGINT).__name__)"
    done = run_python(code)
    assert done.stdout == "default_int_handler\n", done.stderr


def test_the_command_takes_interrupts_back_once_it_runs(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["minidtr"])
    previous = signal.getsignal(signal.SIGINT)
    try:
        _startup.guard_command_imports()
        assert signal.getsignal(signal.SIGINT) is _startup._interrupted
        with pytest.raises(SystemExit):
            cli.main(["--help"])
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("argv", "orig_argv", "command"),
    [
        (["/venv/bin/minidtr", "train"], ["/venv/bin/python", "/venv/bin/minidtr", "train"], True),
        (["-m", "train"], ["python", "-m", "minidtr", "train"], True),
        (["-m", "check"], ["python", "-m", "minidtr.course", "check", "0"], True),
        (["-m", "x.log"], ["python", "-m", "minidtr.sim", "x.log"], True),
        (["-m", "x"], ["python", "-m", "minidtrx", "x"], False),
        (["-m", "-m", "minidtr"], ["python", "-m", "pytest", "-m", "minidtr"], False),
        (["-c", "x"], ["python", "-c", "import minidtr", "x"], False),
        (["/home/me/train.py"], ["python", "/home/me/train.py"], False),
        ([], ["python"], False),
    ],
)
def test_the_command_is_told_from_a_program(monkeypatch, argv, orig_argv, command):
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    assert _startup.invoked_as_command() is command


def test_a_ctrl_c_no_op_answered_is_raised_at_the_end_of_the_deferral():
    """A command whose work ends before its next op (``minidtr models``, the end of a
    run) must not lose the Ctrl-C: exit 130, not 0."""
    import time

    import minidtr as md
    from minidtr.runtime import deferred_interrupts

    md.tensor([1.0])  # an allocator exists, so the first Ctrl-C is deferred
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs: it only asks the allocators to stop
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _told_in_a_worker() -> bool:
    sys.argv = ["/somewhere/bin/minidtr", "sim"]  # what a spawned worker of the command gets
    return _startup.invoked_as_command()


def test_a_worker_process_of_the_command_is_not_the_command():
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_told_in_a_worker) is False


BLAS_THREADS_SEEN = """
import os, sys
sys.argv[0] = sys.argv[1]
import minidtr
from threadpoolctl import threadpool_info
print(os.environ.get("OPENBLAS_NUM_THREADS"),
      [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])
"""


@pytest.mark.parametrize(
    "argv0, preset, expected",
    [
        ("/somewhere/bin/minidtr", None, "1"),  # the command: one BLAS thread
        ("/somewhere/bin/minidtr", "2", "2"),  # unless the environment says
        ("my_program.py", None, None),  # a program that imports minidtr: untouched
    ],
)
def test_the_command_runs_blas_on_one_thread_unless_told(argv0, preset, expected):
    pytest.importorskip("threadpoolctl")
    env = {k: v for k, v in os.environ.items() if k not in _startup.BLAS_THREAD_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    done = subprocess.run(
        [sys.executable, "-c", BLAS_THREADS_SEEN, argv0],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    variable, threads = done.stdout.split(" ", 1)
    assert variable == str(expected)
    if expected is not None:
        assert threads.strip() in (f"[{expected}]", "[]"), threads  # [] where NumPy has no BLAS
