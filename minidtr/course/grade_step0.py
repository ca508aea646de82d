"""Step 0's grader: the student's micro-DTR against minidtr on the same scalar programs.

minidtr runs each program on 0-d float64 tensors (8 bytes each) with the reference
policy, every op costing 1 (``cost=unit_cost``) and dead values left to the
heuristic (``dealloc="ignore"``: the programs never drop a value anyway); the
micro-DTR runs it on Python floats. Every allocation, eviction and
rematerialization must be the same, and so must the values read and where a budget
too small stops the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .compare import first_difference
from .grading import Check, CheckFailed, needs, property_check
from .programs import (
    SCALAR_KINDS,
    Program,
    Run,
    budget_for,
    describe,
    leaf_values,
    parse,
    run_program,
)

SETTINGS: dict[str, Any] = {"dealloc": "ignore"}
# every read rebuilds its value first: a subtraction, a sigmoid, a neg, and x5 * x5 (an op
# reading one value twice), so that a rebuild with the wrong op or the wrong inputs shows
REBUILT_READS = parse(
    """
    x1 = leaf()
    x2 = leaf()
    x3 = x1 - x2
    x4 = sigmoid(x3)
    x5 = neg(x4)
    x6 = x5 * x5
    x7 = tanh(x6)
    x8 = x7 + x1
    read x3
    read x4
    read x5
    read x6
    """,
    0.0,
)


def unit_cost(op: Any, in_metas: Any, out_metas: Any) -> float:
    """Every op costs 1: the micro-DTR's clock."""
    return 1.0


def run_minidtr(program: Program, budget: int | None) -> Run:
    return run_program(program, budget, cost=unit_cost, **SETTINGS)


def run_micro(module: ModuleType, program: Program, budget: int | None) -> tuple[Run, Any]:
    """Run ``program`` on the student's ``MicroRuntime``; (what happened, the runtime). The
    scores it computes are kept, by clock, in ``runtime.scores_seen``."""
    runtime = module.MicroRuntime(budget)
    seen: dict[float, dict[int, float]] = {}
    score = runtime.score

    def spy(v: Any) -> float:
        value = score(v)
        seen.setdefault(runtime.clock, {})[v.id] = value
        return value

    runtime.score = spy
    runtime.scores_seen = seen
    run = Run(events=runtime.events, lines=[str(i) for i in program.instructions])
    env: dict[str, Any] = {}
    try:
        for number, ins in enumerate(program.instructions):
            run.failed_at = number
            _execute(runtime, ins, env, run, number)
            run.marks.append(len(runtime.events))
        run.failed_at = None
    except Exception as error:  # noqa: BLE001 (what stopped the run is the result)
        run.error = error
        run.marks.append(len(runtime.events))
    run.peak = getattr(runtime, "peak", 0)
    return run, runtime


def _execute(runtime: Any, ins: Any, env: dict[str, Any], run: Run, number: int) -> None:
    if ins.kind == "leaf":
        v = env[ins.out[0]] = runtime.leaf(float(leaf_values(0, number)))
    elif ins.kind == "read":
        run.values[f"{ins.args[0]} at line {number + 1}"] = runtime.read(env[ins.args[0]])
        return
    else:
        v = env[ins.out[0]] = runtime.apply(ins.op, *(env[a] for a in ins.args))
    run.names[v.id] = ins.out[0]


def _budget_error(run: Run) -> bool:
    return run.error is not None and type(run.error).__name__ == "BudgetError"


def budget_of(program: Program) -> int:
    """The program's budget for the decisions and values checks."""
    return budget_for(program, cost=unit_cost, **SETTINGS)[0]


def error_budget(program: Program) -> int:
    """The budget errors check's: 8 bytes a line (so many runs cannot be met)."""
    return 8 * max(1, round(program.ratio * 10))


def same_decisions(module: ModuleType, program: Program) -> str | None:
    budget = budget_of(program)
    reference = run_minidtr(program, budget)
    yours, runtime = run_micro(module, program, budget)
    if yours.error is not None and not _budget_error(yours):
        raise yours.error
    if _budget_error(reference) and _budget_error(yours):
        yours.error = reference.error  # the same error, each runtime's own class
    message = first_difference(program, budget, reference, yours, ("event", "id"))
    if message is None:
        return None
    return message + _scores_at_difference(reference, yours, runtime.scores_seen)


def _scores_at_difference(reference: Run, yours: Run, seen: dict) -> str:
    """minidtr's recorded scores of the lowest candidates at the first differing eviction,
    next to the student's scores of the same values at that clock."""
    for mine, theirs in zip(yours.events, reference.events, strict=False):
        if (mine.get("event"), mine.get("id")) == (theirs["event"], theirs["id"]):
            continue
        event = theirs if theirs["event"] == "evict" else mine
        shortlist = theirs.get("candidates") if theirs["event"] == "evict" else None
        if not shortlist:
            return ""
        scored = seen.get(event.get("clock"), {})
        rows = [
            f"    {reference.names.get(c['id'], '#' + str(c['id']))}: minidtr "
            f"{c['score']:.6g} (cost {c['cost']:g}, e* {c['neighbourhood']:g}, "
            f"{c['nbytes']} bytes, staleness {c['staleness']:g}), yours "
            + (f"{scored[c['id']]:.6g}" if c["id"] in scored else "not scored")
            for c in shortlist
        ]
        return "\nthe lowest scores at that eviction (lowest goes first):\n" + "\n".join(rows)
    return ""


def same_values(module: ModuleType, program: Program) -> str | None:
    budget = budget_of(program)
    free, _ = run_micro(module, program, None)
    tight, _ = run_micro(module, program, budget)
    reference = run_minidtr(program, None)
    for run in (free, tight):
        if run.error is not None:
            raise run.error
    if tight.peak > budget:
        return f"your runtime held {tight.peak} bytes, over its budget of {budget}:\n" + describe(
            program, budget
        )
    shown = f"on this program:\n{describe(program, budget)}"
    for key, value in tight.values.items():
        if value != free.values[key]:
            return (
                f"{key} read {value!r} under the budget but {free.values[key]!r} without one"
                f"{_rebuilt_for(tight, key)}: a rematerialized value must be the same, bit for "
                f"bit (its op applied to its inputs, in order)\n{shown}"
            )
        if not math.isclose(value, float(reference.values[key]), rel_tol=1e-12, abs_tol=1e-300):
            return f"{key} read {value!r}, minidtr {float(reference.values[key])!r}\n{shown}"
    return None


def _rebuilt_for(run: Run, key: str) -> str:
    """``", after your rematerialize rebuilt x2, x4 for it"``: the values rematerialized
    during the read ``key`` (``"x4 at line 9"``), if any."""
    line = int(key.rsplit(" ", 1)[1])
    start = run.marks[line - 2] if line > 1 else 0
    rebuilt = [
        run.names.get(e["id"], f"#{e['id']}")
        for e in run.events[start : run.marks[line - 1]]
        if e["event"] == "remat"
    ]
    return f", after your rematerialize rebuilt {', '.join(rebuilt)} for it" if rebuilt else ""


def fails_where_minidtr_does(module: ModuleType, program: Program) -> str | None:
    """Under ``error_budget``, the micro-DTR must stop with its BudgetError at the same
    line as minidtr, or run to the end as it does."""
    budget = error_budget(program)
    reference = run_minidtr(program, budget)
    yours, _ = run_micro(module, program, budget)
    if yours.error is not None and not _budget_error(yours):
        raise yours.error
    if _budget_error(reference) == _budget_error(yours) and reference.failed_at == yours.failed_at:
        return None
    return first_difference(program, budget, reference, yours, ("event", "id")) or (
        "the runs stop at different lines"
    )


def _check(prop: Any, names: tuple[str, ...], budget: Callable[[Program], int]) -> Any:
    def run(module: ModuleType, examples: int) -> None:
        from .strategies import fixed, programs

        needs(module, "MicroRuntime")
        for name in names:
            if not callable(getattr(module.MicroRuntime, name, None)):
                raise CheckFailed(f"MicroRuntime has no method {name}()")
        property_check(
            lambda p: prop(module, p),
            programs(SCALAR_KINDS, scalar=True),
            examples,
            [*fixed(SCALAR_KINDS, scalar=True), REBUILT_READS],
            lambda p: describe(p, budget(p)),
        )

    return run


METHODS = ("score", "make_room", "rematerialize")
CHECKS = [
    Check(
        "decisions",
        "every allocation, eviction and rematerialization is minidtr's",
        _check(same_decisions, METHODS, budget_of),
    ),
    Check(
        "values",
        "under a budget the values read are those of an unbounded run, and memory stays "
        "within the budget",
        _check(same_values, METHODS, budget_of),
    ),
    Check(
        "budget errors",
        "when nothing more can be evicted, BudgetError, at the line where minidtr raises it",
        _check(fails_where_minidtr_does, METHODS, error_budget),
    ),
]
