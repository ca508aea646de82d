"""Step 1's grader: the student's reading of storages and recipes against the runtime's.

Each program runs on minidtr's reference policy under its budget; after every line
the grader asks the student's functions about every value alive (the program's
values, their views, and every storage their recipes reach) and compares with
what the runtime holds: the values of an unbounded run (recomputed while every
buffer but the constants' holds NaN), the allocator's candidate set, the ledger's
count of resident bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np

from .grading import Check, CheckFailed, needs, property_check
from .isolation import fresh_allocator
from .programs import Program, budget_for, describe, listing, run_program


def alive(env: dict[str, Any], allocator: Any) -> list[Any]:
    """Every cell the program can reach: its values (views included), every storage their
    recipes reach, and every candidate (a dead value the policy keeps resident)."""
    found: dict[int, Any] = {}
    stack = [t.cell for t in env.values()] + list(allocator.eviction.candidates)
    while stack:
        cell = stack.pop()
        if id(cell) in found:
            continue
        found[id(cell)] = cell
        stack.append(cell.storage)
        recipe = cell.recipe
        if recipe is not None:
            stack.extend(recipe.inputs)
    return list(found.values())


def _name(cell: Any, env: dict[str, Any]) -> str:
    names = [n for n, t in env.items() if t.cell is cell]
    storage = cell.storage
    what = f"#{storage.id} {storage.name}" + (" (a view of it)" if cell.is_view else "")
    return f"{names[0]} ({what})" if names else what


def _on_every_line(program: Program, inspect: Callable[[dict, Any], str | None]) -> str | None:
    """Run the program under its budget, calling ``inspect(env, allocator)`` after every
    line; the first message it returns, with the line and the program."""
    budget, _ = budget_for(program)
    found: list[str] = []

    def after_line(number: int, env: dict[str, Any], allocator: Any) -> None:
        if not found:
            message = inspect(env, allocator)
            if message:
                found.append(f"after line {number + 1} ({program.instructions[number]}): {message}")

    run = run_program(program, budget, after_line)
    from ..runtime.errors import BudgetError

    if run.error is not None and not isinstance(run.error, BudgetError):
        raise run.error
    if found:
        return f"{found[0]}\non this program:\n{describe(program, budget)}"
    return None


def recomputes(module: ModuleType, program: Program) -> str | None:
    """``recompute`` of every value gives its value, with the buffers of every storage but
    the constants' filled with NaN during the call (it may read no other buffer)."""
    (recompute,) = needs(module, "recompute")
    values = _final_values(program)

    def inspect(env: dict[str, Any], allocator: Any) -> str | None:
        cells = alive(env, allocator)
        for name, tensor in env.items():
            want = values[name]
            with _poisoned(cells):
                got = recompute(tensor.cell)
            if _differs(name, got, want) is None:
                continue
            message = _differs(name, recompute(tensor.cell), want)
            return message or (
                f"recompute({name}) read a buffer that is not a constant's: with those filled "
                f"with NaN during the call it gave {got!r}; the value is {want!r}"
            )
        return None

    return _on_every_line(program, inspect)


def _differs(name: str, got: Any, want: np.ndarray) -> str | None:
    if not isinstance(got, np.ndarray | np.generic) or np.shape(got) != want.shape:
        return (
            f"recompute({name}) gave {type(got).__name__} of shape {np.shape(got)}, "
            f"expected an array of shape {want.shape}"
        )
    if not np.array_equal(got, want) or np.asarray(got).dtype != want.dtype:
        return f"recompute({name}) gave {got!r}; the value is {want!r}"
    return None


@contextlib.contextmanager
def _poisoned(cells: list[Any]) -> Iterator[None]:
    """The resident buffers of the storages of ``cells`` made by ops filled with NaN (new
    arrays, put back after the block): what a recompute that reads them gets."""
    storages = {id(cell.storage): cell.storage for cell in cells}.values()
    saved = [(s, s.buffer) for s in storages if s.op is not None and s.buffer is not None]
    for storage, buffer in saved:
        storage.buffer = np.full_like(buffer, np.nan)
    try:
        yield
    finally:
        for storage, buffer in saved:
            storage.buffer = buffer


def _final_values(program: Program) -> dict[str, np.ndarray]:
    """Each name's value, from an unbounded run of the program."""
    values: dict[str, np.ndarray] = {}

    def keep(number: int, env: dict[str, Any], allocator: Any) -> None:
        for name, tensor in env.items():
            values.setdefault(name, np.array(tensor.numpy(), copy=True))

    run_program(program, None, keep, record_events=False)
    return values


def candidates(module: ModuleType, program: Program) -> str | None:
    (is_candidate,) = needs(module, "is_candidate")

    def inspect(env: dict[str, Any], allocator: Any) -> str | None:
        listed = allocator.eviction.candidates
        for cell in alive(env, allocator):
            storage = cell.storage
            yours, runtime = bool(is_candidate(storage)), storage in listed
            if yours != runtime:
                state = "resident" if storage.buffer is not None else "evicted"
                kind = "a constant" if storage.op is None else f"made by {storage.name}"
                return (
                    f"is_candidate({_name(cell, env)}) is {yours}, but the runtime "
                    f"{'counts' if runtime else 'does not count'} it as a candidate "
                    f"({state}, {kind}, pinned={storage.pinned})"
                )
        return None

    return _on_every_line(program, inspect)


def counts(module: ModuleType, program: Program) -> str | None:
    (resident_bytes,) = needs(module, "resident_bytes")

    def inspect(env: dict[str, Any], allocator: Any) -> str | None:
        cells = alive(env, allocator)
        yours, ledger = resident_bytes(cells), allocator.ledger.memory
        if yours != ledger:
            return f"resident_bytes(every value alive) is {yours}; the ledger counts {ledger}"
        return None

    return _on_every_line(program, inspect)


def pinned_and_locked(module: ModuleType) -> None:
    """A pinned storage is never a candidate; unpinned, it is one again, and stays one while
    an op holds it locked (the programs are inspected between lines, when nothing is)."""
    import minidtr as md

    (is_candidate,) = needs(module, "is_candidate")
    with fresh_allocator() as allocator:
        x = md.tensor(np.ones(4))
        y = md.tanh(x)
        allocator.pin(y.storage)
        if is_candidate(y.storage):
            raise CheckFailed("is_candidate(y) is True for a pinned y (allocator.pin(y.storage))")
        allocator.unpin(y.storage)
        if not is_candidate(y.storage):
            raise CheckFailed("is_candidate(y) is False for y = tanh(x), resident and unpinned")
        del x, y
    with fresh_allocator() as allocator, md.Runtime(budget=10**6, reference=True):
        y = md.tanh(md.tensor(np.ones(4)))
        locked = allocator.remat.lock([y.storage])  # as an op reading y does while it runs
        try:
            yours = bool(is_candidate(y.storage))
            listed = y.storage in allocator.eviction.candidates
        finally:
            allocator.remat.unlock(locked)
        if yours != listed:
            raise CheckFailed(
                f"is_candidate(y) is {yours} for y = tanh(x) while an op holds it locked; the "
                f"runtime's candidate set {'holds' if listed else 'does not hold'} it (a search "
                "skips a locked candidate)"
            )
        del y


def _check(prop: Any, unit: Callable[[ModuleType], None] | None = None) -> Any:
    def run(module: ModuleType, examples: int) -> None:
        from .strategies import fixed, programs

        if unit is not None:
            unit(module)
        property_check(lambda p: prop(module, p), programs(), examples, fixed(), listing)

    return run


CHECKS = [
    Check(
        "recompute",
        "every value recomputed from the constants up is the value, bit for bit",
        _check(recomputes),
    ),
    Check(
        "candidates",
        "is_candidate says what the runtime's candidate set holds",
        _check(candidates, pinned_and_locked),
    ),
    Check(
        "resident bytes",
        "resident_bytes of every value alive is what the ledger counts",
        _check(counts),
    ),
]
