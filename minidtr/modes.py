"""Grad mode and constant mode: the two settings every op reads, as context variables.

- Grad mode (on by default): an op with an input that requires grad records a backward
  node. ``no_grad()`` turns it off: backward runs each node's gradient under it, and
  gradients are values without a graph.
- Constant mode (off by default): ``as_constants()`` makes every op's outputs constants,
  values with no recipe that are never evicted and keep no graph alive. Optimizer
  updates and batch norm's running statistics run under it, so a step's new parameters
  do not chain back to the previous step's.

They are ``contextvars.ContextVar``s, the way Chainer's ``using_config`` keeps its
settings per thread: each thread starts with the defaults, and an asyncio task or a
``contextvars.copy_context().run`` changes them for itself only. A ``with`` block (or a
function decorated with ``@no_grad()``) sets one and restores it on the way out.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

import numpy as np

GRAD_ENABLED: ContextVar[bool] = ContextVar("minidtr_grad_enabled", default=True)
CONSTANTS: ContextVar[bool] = ContextVar("minidtr_constants", default=False)

# Set here, to their defaults, so that reads find them: CPython caches a variable's value
# only when it is set in the context, and once any variable is set it walks the context's
# map for an unset one on every read. NumPy reads its error settings, a context variable
# too, on every ufunc call: ``seterr`` sets them to what they are.
GRAD_ENABLED.set(True)
CONSTANTS.set(False)
np.seterr(**np.geterr())

# The bound ``get``s, for ``apply``: CPython 3.11 does not specialize the method call
# ``CONSTANTS.get()``, which would make a bound method object on every op.
constant_mode = CONSTANTS.get
grad_mode = GRAD_ENABLED.get


class Using(contextlib.ContextDecorator):
    """Sets ``var`` to ``value`` for a ``with`` block or a decorated function's calls.

    A class rather than a generator-based context manager: one is entered for every
    batch-norm layer's running statistics and every optimizer step. One object may be
    entered again inside its own block (``with ng: with ng: ...``): its tokens are a
    stack (a single token was overwritten, and leaving the outer block failed)."""

    def __init__(self, var: ContextVar[bool], value: bool):
        self.var = var
        self.value = value
        self.tokens: list[Token[bool]] = []

    def __enter__(self) -> None:
        self.tokens.append(self.var.set(self.value))

    def __exit__(self, *exc_info) -> None:
        self.var.reset(self.tokens.pop())

    def _recreate_cm(self) -> Using:  # each call of a decorated function gets its own token
        return Using(self.var, self.value)

    def __call__(self, function: Callable) -> Callable:
        if not callable(function):
            raise TypeError(f"a mode decorates a function, not {type(function).__name__}")
        if inspect.isgeneratorfunction(function):
            return self._generator(function)
        return super().__call__(function)

    def _generator(self, function: Callable) -> Callable:
        """A generator runs its body at each ``next``, not at the call: the mode is set
        around each resumption (and around ``throw`` and ``close``), not around the call
        that only makes the generator."""

        @functools.wraps(function)
        def generator(*args, **kwargs):
            inner = function(*args, **kwargs)
            resume, value = inner.send, None
            while True:
                try:
                    with self._recreate_cm():
                        item = resume(value)
                except StopIteration as stop:
                    return stop.value
                try:
                    value = yield item
                    resume = inner.send
                except GeneratorExit:
                    with self._recreate_cm():
                        inner.close()
                    raise
                except BaseException as error:
                    resume, value = inner.throw, error

        return generator


def no_grad(*function: Any) -> Using:
    """Ops inside record no backward graph (``with md.no_grad():``, or ``@md.no_grad()``
    on a function or a generator function)."""
    if function:
        raise TypeError("no_grad() takes no arguments: decorate with @md.no_grad()")
    return Using(GRAD_ENABLED, False)


def grad_enabled() -> bool:
    return grad_mode()


def as_constants() -> Using:
    """Ops inside produce constants: values with no recipe that are never evicted and
    keep no graph alive. Optimizers and running statistics update through this, so
    every step's new parameters do not chain back to the previous step."""
    return Using(CONSTANTS, True)
