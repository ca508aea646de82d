"""Ctrl-C that never leaves an op half done.

An op's bookkeeping is a few statements that must run together (room made, buffer
counted, storage recorded; a death queued and settled). Python's own SIGINT handler
raises ``KeyboardInterrupt`` between any two bytecodes, so a Ctrl-C landing inside them
could leave a byte counted for no storage, or an allocator busy for good.

The handler here looks at where the signal landed. Outside minidtr's bookkeeping (the
user's own code, a sleep, PyTorch, a plot) it raises at once, as Python's own does.
Inside it (a frame of the runtime, the ops, the optimizers, ``Tensor`` or autograd on the
stack, ``Tensor.__del__`` included, where Python would swallow the exception) it asks
every allocator for a ``KeyboardInterrupt`` at its next *consistent point*: the start of
an op, of a rematerialization or of a search for room (``answer``). Should none come (the
program ran its last op and went on to other work), a timer looks again a moment later
and raises once the program is out of the bookkeeping. A second Ctrl-C while one waits
raises at once, wherever it lands.

Every ``with md.Runtime(...)`` entered in the main thread uses this handler
while it is active, in place of Python's default one (a handler of the host's own is
left alone); ``deferred_interrupts()`` puts it in place around any other stretch of code
(the ``minidtr`` command wraps each subcommand in it).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# Seconds a deferred Ctrl-C waits for a consistent point before the timer looks again.
FALLBACK_AFTER = 0.25

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where allocator state changes: a frame from one of these on the stack means "defer".
BOOKKEEPING = tuple(
    os.path.join(_PACKAGE, name)
    for name in ("runtime" + os.sep, "ops" + os.sep, "optim" + os.sep, "tensor.py", "autograd.py")
)


class _Waiting:
    """The state of a deferred Ctrl-C: its fallback timer, and whether the SIGINT being
    handled is the timer's own (not the user's second one)."""

    timer: threading.Timer | None = None
    from_timer = False


def in_bookkeeping(frame: FrameType | None) -> bool:
    """Whether the stack that ``frame`` tops runs minidtr's bookkeeping."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(BOOKKEEPING):
            return True
        frame = frame.f_back
    return False


def _allocators() -> list:
    from .allocator import EVERY  # (allocator.py imports this module)

    return list(EVERY)


def pending() -> bool:
    """Whether a deferred Ctrl-C waits for a consistent point."""
    return any(allocator.interrupt_requested for allocator in _allocators())


def _forget() -> None:
    for allocator in _allocators():
        allocator.interrupt_requested = False
    timer, _Waiting.timer = _Waiting.timer, None
    if timer is not None:
        timer.cancel()


def answer() -> None:
    """Called by an allocator at a consistent point while an interrupt is requested:
    raise it there, once (every allocator's request is answered by it). In a thread other
    than the main one, nothing: the main thread's next consistent point answers it."""
    if threading.current_thread() is threading.main_thread():
        _forget()
        raise KeyboardInterrupt


def _arm_timer() -> None:
    timer = threading.Timer(FALLBACK_AFTER, _look_again)
    timer.daemon = True
    _Waiting.timer = timer
    timer.start()


def _look_again() -> None:
    """The timer: a Ctrl-C still waits, so signal the main thread, whose handler raises
    once the program is out of the bookkeeping (and looks again later if not)."""
    if not pending():  # (answered, or the handler taken away, which forgets it)
        return
    _Waiting.from_timer = True
    if hasattr(signal, "pthread_kill"):  # a real signal: it also ends a sleep
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    else:
        import _thread

        _thread.interrupt_main()


def handle_sigint(signum: int, frame: FrameType | None) -> None:
    """The SIGINT handler: raise now outside the bookkeeping, else ask the allocators."""
    from_timer, _Waiting.from_timer = _Waiting.from_timer, False
    if from_timer:
        if not pending():
            return  # answered meanwhile
        if in_bookkeeping(frame):
            _arm_timer()
            return
        _forget()
        raise KeyboardInterrupt
    if pending() or not in_bookkeeping(frame):
        _forget()  # a second Ctrl-C, or none of minidtr's work under way
        raise KeyboardInterrupt
    for allocator in _allocators():
        allocator.interrupt_requested = True
    _arm_timer()


def install() -> object | None:
    """Put ``handle_sigint`` in place of Python's default SIGINT handler (what a runtime
    does on entry); a token for ``uninstall``, or None where nothing was changed: not the
    main thread, already in place, or a handler of the host's own."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None
    signal.signal(signal.SIGINT, handle_sigint)
    return signal.default_int_handler


def uninstall(token: object | None) -> bool:
    """Undo ``install`` (given its token); True when a Ctrl-C was still waiting for a
    consistent point, which the caller raises unless an exception is on its way."""
    if token is None or threading.current_thread() is not threading.main_thread():
        return False
    waiting = pending()
    _forget()
    if signal.getsignal(signal.SIGINT) is handle_sigint:  # (unless the host changed it)
        signal.signal(signal.SIGINT, token)
    return waiting


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Use ``handle_sigint`` inside the ``with``, whatever handler was in place (the
    ``minidtr`` command wraps each subcommand in it; a budgeted runtime does it by
    itself). A Ctrl-C still waiting for a consistent point at the end of the ``with``
    is raised there, not lost. Only in the main thread (elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handle_sigint)
    waiting = False
    try:
        yield
    finally:
        waiting = pending()
        _forget()
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if waiting:
        raise KeyboardInterrupt
