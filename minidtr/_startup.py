"""What the ``minidtr`` command sets up before NumPy loads: Ctrl-C while it is still
importing (one line and exit 130), and one BLAS thread unless the environment says.

The command's entry point (``minidtr.cli:main``, or ``python -m minidtr``) imports the
package first, NumPy with it, which takes a good part of a second; an interrupt then
would end in Python's traceback of whatever module was loading. So when this process
is the command, the package's ``__init__`` calls ``guard_command_imports`` before
anything heavy, and ``cli.main`` hands SIGINT back to Python (``release_import_guard``)
once it takes charge of interrupts itself. Imported as a library, nothing changes.
"""

from __future__ import annotations

import os
import signal
import sys

EXIT_INTERRUPTED = 130


def _interrupted(signum, frame) -> None:
    """Exit at once, not by an exception: one raised inside a module's import can be
    turned into another error (NumPy's C extensions report a failed import instead).
    Nothing is lost: no output is written and no work begun before ``cli.main`` runs."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    sys.stderr.write("minidtr: interrupted\n")
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


def invoked_as_command() -> bool:
    """Whether this process is the ``minidtr`` command (the console script, or ``python -m
    minidtr``, ``-m minidtr.sim`` or ``-m minidtr.course`` while runpy imports the
    package: then ``sys.argv[0]`` is still ``-m``)."""
    if not sys.argv:
        return False
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return False  # a worker the command started: spawned, it is given the command's argv
    if os.path.basename(sys.argv[0]).removesuffix(".exe") == "minidtr":
        return True
    if sys.argv[0] != "-m":
        return False
    argv = sys.orig_argv
    first = argv.index("-m") if "-m" in argv else len(argv)
    module = argv[first + 1] if first + 1 < len(argv) else ""
    return module == "minidtr" or module.startswith("minidtr.")


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_blas_threads() -> None:
    """One BLAS thread for the command, unless one of ``BLAS_THREAD_VARIABLES`` is set.

    The models the command trains are small: their matrix products gain nothing from
    more threads, and OpenBLAS's threads spin while they wait, so on a machine where
    anything else runs they fight over the cores (``minidtr demo`` took 50 s instead
    of 6 on two cores at a load of 2.5). Set before NumPy loads OpenBLAS; worker
    processes the command starts inherit it."""
    if not any(name in os.environ for name in BLAS_THREAD_VARIABLES):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        os.environ["MKL_NUM_THREADS"] = "1"


def guard_command_imports() -> None:
    """Exit quietly on SIGINT from now until ``release_import_guard``, if this process is
    the command and Python's own handler is in place (a SIGINT ignored stays ignored)."""
    if invoked_as_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        try:
            signal.signal(signal.SIGINT, _interrupted)
        except ValueError:  # not the main thread: no handler can be set from here
            pass


def release_import_guard() -> None:
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)
