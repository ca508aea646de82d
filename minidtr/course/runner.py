"""Grading a file: load the student's module, run the step's checks, report each.

``grade(step, path)`` returns one ``Result`` per check (passed, or the message of
its failure). A file that cannot be imported fails every check with the reason (an
error, a ``sys.exit``, or an import running past ``grading.TIME_LIMIT``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from . import grading
from .grading import EXAMPLES, Check, CheckFailed
from .steps import Step


class CannotLoad(Exception):
    """The student's file cannot be imported; the message says why, in one line."""


@dataclass(frozen=True)
class Result:
    check: str
    asks: str
    passed: bool
    message: str = ""
    seconds: float = 0.0


class GradingInterrupted(KeyboardInterrupt):
    """Ctrl-C while grading: ``results`` are those of the checks that had finished."""

    def __init__(self, results: list[Result]):
        super().__init__(f"interrupted after {len(results)} checks")
        self.results = results


def load(path: Path, step: Step) -> ModuleType:
    """Import the file at ``path`` as a fresh module (a new one on every call)."""
    if not path.is_file():
        raise CannotLoad(f"{path}: no such file")
    name = f"minidtr_course_{step.name}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CannotLoad(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        with grading.time_limit(grading.TIME_LIMIT):
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:  # noqa: BLE001 (the student's, all of them)
        sys.modules.pop(name, None)
        raise CannotLoad(f"{path}: cannot import it: {_import_error(error, path)}") from None
    grading.STUDENT_FILES.add(str(path.resolve()))
    grading.STUDENT_FILES.add(str(path))
    return module


def _import_error(error: BaseException, path: Path) -> str:
    """What stopped the import of the file at ``path``, and on which of its lines."""
    if isinstance(error, SyntaxError):
        return f"{type(error).__name__}: {error}"  # its message names the line
    if isinstance(error, grading.TookTooLong):
        what = f"it ran for more than {grading.TIME_LIMIT:g} s (an endless loop at its top level?)"
    elif isinstance(error, SystemExit):
        what = "your file calls sys.exit at import"
    else:
        what = f"{type(error).__name__}: {error}"
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(error.__traceback__)
        if Path(frame.filename).resolve() == path.resolve()
    ]
    return f"{what} (line {lines[-1]})" if lines else what


def grade(step: Step, path: Path, examples: int = EXAMPLES) -> list[Result]:
    """Run every check of ``step`` on the file at ``path``. Ctrl-C raises
    ``GradingInterrupted`` with the results of the checks finished before it."""
    checks = importlib.import_module(step.grader).CHECKS
    results: list[Result] = []
    try:
        with grading.interrupts_kept():
            try:
                module = load(path, step)
            except CannotLoad as error:
                return [Result(c.name, c.asks, False, str(error)) for c in checks]
            with quiet_numpy():
                for check in checks:
                    grading.raise_if_interrupted()
                    results.append(_run_check(check, module, examples))
    except KeyboardInterrupt:
        raise GradingInterrupted(results) from None
    return results


def _run_check(check: Check, module: ModuleType, examples: int) -> Result:
    started = time.perf_counter()
    try:
        check.run(module, examples)
    except CheckFailed as failure:
        message = str(failure)
    except NotImplementedError as error:
        message = grading.unwritten(error)
    except (Exception, SystemExit) as error:  # noqa: BLE001 (a sys.exit in it too)
        message = grading.raised(error)
    else:
        return Result(check.name, check.asks, True, "", _since(started))
    return Result(check.name, check.asks, False, message, _since(started))


def _since(started: float) -> float:
    return time.perf_counter() - started


@contextlib.contextmanager
def quiet_numpy() -> Iterator[None]:
    """No floating-point warnings from the programs' values (an overflow in a tanh chain is
    the program's business, not the grader's)."""
    import numpy as np

    with np.errstate(all="ignore"):
        yield


def report(step: Step, path: Path, results: list[Result], interrupted: bool = False) -> str:
    """The results as text: one line per check, the failures' messages indented;
    ``interrupted``: the checks after these were not run."""
    lines = [f"step {step.number}: {step.title} ({path})"]
    for r in results:
        mark = "PASS" if r.passed else "FAIL"
        lines.append(f"  {mark}  {r.check}: {r.asks}")
        if not r.passed:
            lines.extend("        " + line for line in r.message.splitlines())
    passed = sum(r.passed for r in results)
    if interrupted:
        left = len(importlib.import_module(step.grader).CHECKS) - len(results)
        lines.append(f"{passed} of {len(results)} checks pass; {left} not run (interrupted)")
        return "\n".join(lines)
    lines.append(f"{passed} of {len(results)} checks pass")
    if passed == len(results):
        lines.append(f"step {step.number} is done. Next: {_next(step)}")
    return "\n".join(lines)


def _next(step: Step) -> str:
    from .steps import STEPS

    later = [s for s in STEPS if s.number > step.number]
    if not later:
        return "the course is done; the teacher's page lists what to read next"
    return f"docs/course/{later[0].name}.md"
