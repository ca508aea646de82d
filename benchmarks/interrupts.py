"""Ctrl-C in a benchmark: one line on stderr, not a traceback.

Every script in this folder imports this module before NumPy, for its effect: from
then on an uncaught ``KeyboardInterrupt`` prints ``NAME.py: interrupted`` (the name
argparse gives the script), and the process still ends as Python ends an interrupted
one (by SIGINT, status 130 in a shell). Once minidtr is imported, a Ctrl-C to a script goes
through its handler everywhere, not only inside runtimes (``minidtr.runtime.interrupts``): one
landing inside an op or in ``Tensor.__del__`` (where Python would swallow it) waits for
the next consistent point, one landing anywhere else raises at once. Pools of worker processes pass
``initializer=quiet_worker``: Ctrl-C reaches the whole process group, and a worker
would otherwise print its own traceback; it leaves at once instead, and the script's
``with`` block ends the pool.
"""

from __future__ import annotations

import os
import signal
import sys

_previous_hook = sys.excepthook


def _one_line(kind, value, traceback) -> None:
    if issubclass(kind, KeyboardInterrupt):
        if _is_worker():
            return  # the script that started it says it
        script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "benchmark"
        sys.stderr.write(f"{script}: interrupted\n")
        return
    _previous_hook(kind, value, traceback)


def _is_worker() -> bool:
    multiprocessing = sys.modules.get("multiprocessing")
    # the name is set first thing in a spawned worker, before it imports the script again
    return multiprocessing is not None and multiprocessing.current_process().name != "MainProcess"


def quiet_worker() -> None:
    """A pool worker's initializer: SIGINT ends it at once and silently."""
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))


def _sigint(signum, frame) -> None:
    minidtr_interrupts = sys.modules.get("minidtr.runtime.interrupts")
    if minidtr_interrupts is None:
        raise KeyboardInterrupt
    minidtr_interrupts.handle_sigint(signum, frame)


def _run_as_a_script() -> bool:
    """Whether the process is a script of this folder (not a test that imports one)."""
    script = sys.argv[0] if sys.argv and sys.argv[0] else ""
    return os.path.dirname(os.path.abspath(script)) == os.path.dirname(os.path.abspath(__file__))


sys.excepthook = _one_line
if _run_as_a_script():
    signal.signal(signal.SIGINT, _sigint)
