"""The pieces every step's grader is made of: a check, its failure, property runs.

A step's grader (``grade_stepN.py``) is a list of ``Check``s. Each takes the
student's module and raises ``CheckFailed`` with a message in plain words: what
differed from minidtr's reference policy, on which program (the smallest one
hypothesis found), or which function is not written yet. ``property_check`` runs
a property on examples drawn by hypothesis: first on a few fixed examples (a
function that is not written fails there at once, without shrinking), then on
``examples`` random ones, derandomized so that every run of the grader tries the
same ones.
"""

from __future__ import annotations

import contextlib
import signal
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

EXAMPLES = 60  # random examples per property, by default
TIME_LIMIT = 20.0  # seconds one example may take before the student's code is stopped


class CheckFailed(AssertionError):
    """A check failed; the message says why in plain words."""


class Mismatch(AssertionError):
    """A property found a difference on one example (what hypothesis shrinks)."""


class TookTooLong(Exception):
    """One example ran past ``TIME_LIMIT``: an endless loop in the code under test?"""


class EndlessLoop(BaseException):
    """An example drawn by hypothesis ran past ``TIME_LIMIT``. Not an ``Exception``, so that
    hypothesis stops at once: shrinking would run the loop again, for ``TIME_LIMIT``, on
    every smaller example it tries (minutes of silence)."""


@dataclass(frozen=True)
class Check:
    """One graded property: its ``name``, what it asks (``asks``) and the function that
    runs it on the student's module and the number of random examples."""

    name: str
    asks: str
    run: Callable[[ModuleType, int], None]


def needs(module: ModuleType, *names: str) -> list[Callable[..., Any]]:
    """The functions ``names`` of the student's module, or ``CheckFailed`` naming the
    missing one."""
    found = []
    for name in names:
        function = getattr(module, name, None)
        if not callable(function):
            raise CheckFailed(
                f"{module.__file__} defines no function {name}() (this step asks for it)"
            )
        found.append(function)
    return found


def property_check(
    prop: Callable[[Any], str | None],
    strategy: Any,
    examples: int,
    fixed: Sequence[Any] = (),
    shown: Callable[[Any], str] = str,
) -> None:
    """Run ``prop`` (None: all is well, else a message) on the ``fixed`` examples, then on
    ``examples`` drawn from the hypothesis ``strategy``; raise ``CheckFailed`` with the
    message of the first failure (the smallest failing example hypothesis found)."""
    for example in fixed:
        try:
            _one(prop, example, shown)
        except Mismatch as failure:
            raise CheckFailed(str(failure)) from None
    if examples <= 0:
        return
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings

    # hypothesis seeds a derandomized run from the source of ``holds``, decorators included:
    # an edit there changes the random programs of every grader (and what they catch)
    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
    )
    @given(strategy)
    def holds(example: Any) -> None:
        _one(prop, example, shown, shrinking=True)

    try:
        holds()
    except Mismatch as failure:
        raise CheckFailed(f"{failure}\n(the smallest example hypothesis found)") from None
    except EndlessLoop as loop:
        raise CheckFailed(str(loop)) from None


def _one(prop: Callable[[Any], str | None], example: Any, shown: Callable, shrinking: bool = False):
    raise_if_interrupted()
    try:
        with time_limit(TIME_LIMIT):
            message = prop(example)
    except (CheckFailed, Mismatch):
        raise
    except NotImplementedError as error:
        raise CheckFailed(unwritten(error)) from None
    except TookTooLong:
        message = (
            f"your code took more than {TIME_LIMIT:g} s on this example (an endless loop?):\n"
            f"{shown(example)}"
        )
        raise (EndlessLoop if shrinking else Mismatch)(message) from None
    except (Exception, SystemExit) as error:  # noqa: BLE001 (a sys.exit in it too)
        raise Mismatch(f"{raised(error)}, on this example:\n{shown(example)}") from None
    if message is not None:
        raise Mismatch(message)


def unwritten(error: NotImplementedError) -> str:
    """The message for a function of the skeleton that is still to be written."""
    frame = student_frame(error)
    where = f" ({frame})" if frame else ""
    what = str(error) or "a function of the skeleton"
    return f"not written yet: {what}{where} raises NotImplementedError; fill in its TODO"


def raised(error: BaseException) -> str:
    """``your code raised TypeError: ... (file.py line 12, in score)``."""
    frame = student_frame(error)
    if frame is None:
        last = traceback.extract_tb(error.__traceback__)[-1:]
        where = f" in {last[0].filename}:{last[0].lineno}" if last else ""
        return f"the run raised {type(error).__name__}: {error}{where}, outside your file"
    return f"your code raised {type(error).__name__}: {error} ({frame})"


STUDENT_FILES: set[str] = set()  # the files of the module under test (set by ``load``)


def student_frame(error: BaseException) -> str | None:
    """Where in the student's file ``error`` was raised: its last frame there."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename in STUDENT_FILES]
    if not frames:
        return None
    last = frames[-1]
    return f"{last.filename.rsplit('/', 1)[-1]} line {last.lineno}, in {last.name}"


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``TookTooLong`` in the block after ``seconds`` (where the platform has
    interval timers and this is the main thread; otherwise no limit)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise TookTooLong

    try:
        previous = signal.signal(signal.SIGALRM, stop)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_INTERRUPTED = [False]  # a Ctrl-C came inside ``interrupts_kept``


@contextlib.contextmanager
def interrupts_kept() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` at once, as usual (an endless loop in the code
    under test must stop), and is noted too: one that lands in a weakref callback or a
    ``__del__`` (the runtime's storages have both) is printed and dropped by Python, and
    ``raise_if_interrupted`` raises it again at the next example. Only where Python's own
    handler is in place, in the main thread."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def interrupted(signum: int, frame: Any) -> None:
        _INTERRUPTED[0] = True
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, interrupted)
    except ValueError:  # not the main thread
        yield
        return
    _INTERRUPTED[0] = False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _INTERRUPTED[0] = False


def raise_if_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C came (``interrupts_kept``), even one that
    Python dropped."""
    if _INTERRUPTED[0]:
        raise KeyboardInterrupt
