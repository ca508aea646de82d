"""The course (docs/course, minidtr.course): every reference solution passes its step's
grader, every skeleton fails it with a message saying what is not written yet, and a
plausible mistake in each step is caught and described (which decision differed, on
which program)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from minidtr.course import STEPS, step
from minidtr.course.runner import grade

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = 20  # random programs per property here (fixed ones first); -m slow runs more


def solution(number: int) -> Path:
    return step(number).solution


@pytest.mark.parametrize("number", [s.number for s in STEPS])
def test_the_reference_solution_passes(number):
    results = grade(step(number), solution(number), EXAMPLES)
    failed = [f"{r.check}: {r.message}" for r in results if not r.passed]
    assert results and not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize("number", [s.number for s in STEPS])
def test_the_reference_solution_passes_many_programs(number):
    results = grade(step(number), solution(number), 400)
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


@pytest.mark.parametrize("number", [s.number for s in STEPS])
def test_the_skeleton_fails_saying_what_is_not_written(number):
    results = grade(step(number), step(number).skeleton, EXAMPLES)
    assert results and not any(r.passed for r in results)
    for r in results:
        assert r.message.startswith("not written yet: "), r.message
        assert "raises NotImplementedError; fill in its TODO" in r.message
        assert step(number).skeleton.name in r.message  # where: the file and line


def _names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
    }


@pytest.mark.parametrize("number", [s.number for s in STEPS])
def test_the_skeleton_asks_for_what_the_page_lists(number):
    s = step(number)
    defined = _names(s.skeleton)
    for name in s.writes:
        owner, _, method = name.rpartition(".")
        assert (owner or name) in defined, name
        source = s.skeleton.read_text()
        assert f'raise NotImplementedError("{name}")' in source, name
        assert (owner or name) in _names(s.solution), name
    assert s.page.is_file(), s.page


# ---- mistakes a student may make, and what the grader says ------------------------------

MISTAKES = {
    # "step" or "step-what": (what to replace in the solution, by what, the check that
    # fails, words it says)
    "0": (
        "        top = v.cost + sum(u.cost for u in neighbourhood)",
        "        top = v.cost",
        "decisions",
        "the lowest scores at that eviction",
    ),
    "1": (
        "    storages = {cell.storage for cell in cells}",
        "    storages = [cell.storage for cell in cells]",
        "resident bytes",
        "the ledger counts",
    ),
    "1-reads-resident-buffers": (
        "    if not cell.is_view and cell.op is None:\n",
        "    if not cell.is_view and cell.buffer is not None:\n        return cell.buffer\n"
        "    if not cell.is_view and cell.op is None:\n",
        "recompute",
        "recompute(x2) read a buffer that is not a constant's",
    ),
    "2": (
        "        if best is None or value < best_score:",
        "        if best is None or value <= best_score:",
        "choose_victim alone",
        "differs in victim",
    ),
    "3": (
        "        value /= max(context.clock - storage.last_access, MIN_STALENESS)",
        "        value /= max(context.clock - storage.last_access, 1.0)",
        "h_DTR",
        "the reference (dtr: (c + c(e*)) / (m * s)) gives",
    ),
    "3-eq-as-estar": (
        "        return storage.cost + context.eq(storage)",
        "        return storage.cost + context.estar(storage)",
        "the paper's heuristics",
        "c(eq) = 4.5 (c(e*) = 2.25: a class may hold more)",
    ),
    "3-touches-last-access": (
        "    if staleness:\n",
        "    storage.last_access = context.clock\n    if staleness:\n",
        "h_DTR",
        "s = 9 (clock 27 - last access 18)",
    ),
    "4": (
        "            stack.extend(s for s in step(storage) if is_evicted(s))",
        "            pass",
        "evicted ancestors",
        "evicted_ancestors(x5 (#5 tanh)) returned [x4 (#4 tanh)]; the reference "
        "[x4 (#4 tanh), x2 (#2 tanh)]",
    ),
    "4-one-step-descendants": (
        "            stack.extend(s for s in step(storage) if is_evicted(s))",
        "            pass",
        "evicted descendants",
        "evicted_descendants(x2 (#2 tanh)) returned [x3 (#3 tanh)]; the reference "
        "[x3 (#3 tanh), x4 (#4 tanh)]",
    ),
    "5": (
        "            again = [s for s in resident if s.buffer is None]",
        "            again = []",
        "rematerialize",
        "is evicted when rematerialize() returns",
    ),
    "6": (
        "        and child.orphan_rebuilt_at != child.last_access",
        "",
        "orphans_of",
        "the reference",
    ),
    "7": (
        "        if slowdown is None or slowdown > max_slowdown:\n            break",
        "        if slowdown is None or slowdown > max_slowdown:\n            continue",
        "lowest_ratio",
        "every higher ratio",
    ),
    "0-rebuilt-as-zero": (
        "        v.data = OPS[v.op](*(u.data for u in v.inputs))",
        "        v.data = 0.0",
        "values",
        "after your rematerialize rebuilt x2, x4 for it",
    ),
    "0-rebuilt-inputs-reversed": (
        "        v.data = OPS[v.op](*(u.data for u in v.inputs))",
        "        v.data = OPS[v.op](*reversed([u.data for u in v.inputs]))",
        "values",
        "after your rematerialize rebuilt x3 for it",
    ),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_mistake_is_caught_and_described(case, tmp_path):
    old, new, check, words = MISTAKES[case]
    number = int(case.split("-")[0])
    source = solution(number).read_text()
    assert old in source
    wrong = tmp_path / solution(number).name
    wrong.write_text(source.replace(old, new))
    results = {r.check: r for r in grade(step(number), wrong, EXAMPLES)}
    assert not results[check].passed
    message = results[check].message
    assert words in message, message
    if number not in (2, 7):  # those two compare functions on made-up inputs, not programs
        assert "on this program" in message and "x1 = leaf(" in message, message


def test_a_differing_event_is_shown_both_ways_with_the_lines_running(tmp_path):
    wrong = tmp_path / "step2.py"
    source = solution(2).read_text()
    wrong.write_text(source.replace("value < best_score:", "value <= best_score:"))
    result = next(r for r in grade(step(2), wrong, 0) if r.check == "choose_victim in the runtime")
    assert not result.passed
    lines = result.message.splitlines()
    assert lines[0].startswith("event ") and "differs" in lines[0]
    assert lines[1].startswith("  the reference evicted x") and "running line" in lines[1]
    assert lines[2].startswith("  yours         evicted x") and "running line" in lines[2]
    assert "on this program (heuristic" in result.message


def test_code_that_raises_is_shown_with_the_budget_in_bytes(tmp_path):
    """Not the budget's ratio: the student reruns the example with the budget printed."""
    import re

    source = solution(0).read_text()
    assert "            best.data = None\n" in source
    wrong = tmp_path / solution(0).name
    wrong.write_text(
        source.replace("            best.data = None\n", "            raise OSError\n")
    )
    results = {r.check: r for r in grade(step(0), wrong, 0)}
    for result in results.values():
        assert "your code raised OSError" in result.message, result.message
        assert re.search(r"\n    # budget \d+ bytes\n", result.message), result.message
    assert "# budget 16 bytes" in results["budget errors"].message  # 8 bytes a line, ratio 0.2


SPLIT = """
    x1 = leaf(2)
    x2, x3 = split(x1)
    x4 = tanh(x2)
    x5 = leaf(4)
    x6 = tanh(x5)
    x7 = tanh(x6)
    x8 = tanh(x6)
"""  # after the split, the names (x4) and the storage ids (#2) part


def test_steps_3_to_5_name_storages_as_the_listing_does():
    from types import SimpleNamespace

    from minidtr.course import grade_step3, grade_step4, grade_step5
    from minidtr.course.programs import parse, run_program

    program = parse(SPLIT, 0.3)
    wrong = SimpleNamespace(evicted_ancestors=lambda s: list(s.parents), score=lambda *a: 0.0)
    walked = grade_step4.same_walk(wrong, "evicted_ancestors", (program, "eager"))
    assert walked.startswith("evicted_ancestors(x4 (#2 tanh)) returned [x1 (#1 constant)]")
    scored = grade_step3.same_scores(wrong, (program, "dtr"))
    assert scored.startswith("score(x4 (#2 tanh), context,"), scored
    found: list[str] = []
    names: dict[int, str] = {}

    def lock_x4_on_line_3(number, env, allocator):
        held = env["x4"].storage if number == 2 else None
        if held is not None:
            held.locks += 1
        grade_step5._locks_left(number, env, allocator, found, names)
        if held is not None:
            held.locks -= 1

    run_program(program, None, lock_x4_on_line_3, names=names)
    assert found == ["after line 3, x4 (#2 tanh) is still locked (1)"]


# ---- the command ---------------------------------------------------------------------------


def course(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "minidtr.course", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_check_passes_a_solution_and_exits_0():
    done = course("check", "3", "--path", str(solution(3)), "--examples", "5")
    assert done.returncode == 0, done.stderr
    assert "3 of 3 checks pass" in done.stdout and "step 3 is done" in done.stdout


def test_check_fails_the_skeleton_and_exits_1():
    done = course("check", "4", "--examples", "0")
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "not written yet: evicted_ancestors" in done.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ("check", "9"),
            "there is no step 9: the steps are 0 to 7 (python -m minidtr.course list)",
        ),
        (("check", "two"), "STEP is a step's number (0 to 7), got 'two'"),
        (("check", "1", "--path", "nowhere.py"), "--path nowhere.py is not a file"),
        (("check", "1", "--examples", "-1"), "--examples must be >= 0, got -1"),
        (
            ("chain", str(ROOT / "pyproject.toml")),
            f"chain DIR: cannot write the logs: {ROOT / 'pyproject.toml'}: File exists",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args, says):
    done = course(*args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"python -m minidtr.course: {says}"]


def test_a_file_that_does_not_import_fails_every_check_saying_why(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\ndef score(:\n")
    results = grade(step(3), broken, 0)
    assert all(not r.passed and "cannot import it: SyntaxError" in r.message for r in results)
    assert results[0].message.count("line 2") == 1, results[0].message


def test_a_file_that_exits_or_loops_at_import_fails_every_check_saying_so(tmp_path, monkeypatch):
    from minidtr.course import grading

    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n")
    results = grade(step(3), exits, 0)
    says = "cannot import it: your file calls sys.exit at import (line 2)"
    assert results and all(not r.passed and says in r.message for r in results)
    monkeypatch.setattr(grading, "TIME_LIMIT", 0.2)
    loops = tmp_path / "loops.py"
    loops.write_text("while True:\n    pass\n")
    results = grade(step(3), loops, 0)
    says = "cannot import it: it ran for more than 0.2 s (an endless loop at its top level?)"
    assert results and all(not r.passed and says in r.message for r in results)


def test_a_missing_function_is_named(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    results = grade(step(4), empty, 0)
    assert "defines no function evicted_ancestors()" in results[0].message


def test_list_shows_every_step_with_its_minutes():
    done = course("list")
    assert done.returncode == 0
    for s in STEPS:
        assert f"{s.title}:" in done.stdout and s.name in done.stdout
    assert f"{sum(s.minutes for s in STEPS)}" in done.stdout.splitlines()[-1]


# ---- the pages ----------------------------------------------------------------------------


def test_step0_pages_example_runs_on_the_reference_solution(capsys):
    """docs/course/step0_micro.md's block, on the solution (on the skeleton it stops with
    NotImplementedError, as the page says)."""
    from doc_commands import python_blocks

    (block,) = [source for _, source in python_blocks("docs/course/step0_micro.md")]
    assert 'sys.path.insert(0, "docs/course")' in block
    source = block.replace('"docs/course"', repr(str(solution(0).parent)))
    sys.modules.pop("step0_micro", None)
    try:
        exec(compile(source, "step0_micro.md", "exec"), {"__name__": "page"})
    finally:
        sys.modules.pop("step0_micro", None)
        sys.path.remove(str(solution(0).parent))
    value, peak, evictions = capsys.readouterr().out.split()
    assert float(value) != 0 and int(peak) <= 40 and int(evictions) > 0


def test_outside_a_clone_check_says_where_the_skeletons_are(monkeypatch, tmp_path, capsys):
    from minidtr.course import __main__ as command
    from minidtr.course import steps

    monkeypatch.setattr(steps, "DOCS", tmp_path / "docs" / "course")  # an installed package
    assert command.main(["check", "1"]) == 2
    error = capsys.readouterr().err
    assert "the skeletons are in docs/course of a clone of the repository" in error
    assert "give your file with --path" in error


def test_ctrl_c_prints_the_finished_checks_then_one_line_and_exits_130(monkeypatch, capsys):
    from minidtr.course import __main__ as command
    from minidtr.course import grade_step3
    from minidtr.course.grading import Check

    def interrupted(module, examples):
        raise KeyboardInterrupt

    first, *_ = grade_step3.CHECKS
    never = Check("never", "not reached", lambda module, examples: None)
    monkeypatch.setattr(grade_step3, "CHECKS", [first, Check("ctrl-c", "", interrupted), never])
    assert command.main(["check", "3", "--path", str(solution(3)), "--examples", "0"]) == 130
    out, err = capsys.readouterr()
    assert f"PASS  {first.name}" in out and "never" not in out
    assert out.splitlines()[-1] == "1 of 1 checks pass; 2 not run (interrupted)"
    assert err.splitlines() == ["python -m minidtr.course: interrupted"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_drops_in_a_finalizer_still_stops_the_grading(monkeypatch):
    import signal

    from minidtr.course import grade_step3
    from minidtr.course.grading import Check
    from minidtr.course.runner import GradingInterrupted

    class Finalized:
        def __del__(self):  # where Python prints a KeyboardInterrupt and goes on
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)

    def swallowed(module, examples):
        Finalized()

    never = Check("never", "not reached", lambda module, examples: None)
    monkeypatch.setattr(grade_step3, "CHECKS", [Check("ctrl-c", "", swallowed), never])
    with pytest.raises(GradingInterrupted) as stopped:
        grade(step(3), solution(3), 0)
    assert [r.check for r in stopped.value.results] == ["ctrl-c"]


def test_an_endless_loop_on_a_random_example_stops_the_check_without_shrinking(monkeypatch):
    from hypothesis import strategies as st

    from minidtr.course import grading

    monkeypatch.setattr(grading, "TIME_LIMIT", 0.2)
    loops = []

    def endless_above_ten(n: int) -> None:
        if n > 10:
            loops.append(n)
            while True:
                pass

    with pytest.raises(grading.CheckFailed, match="took more than 0.2 s on this example"):
        grading.property_check(endless_above_ten, st.integers(0, 1000), 50)
    assert len(loops) == 1  # hypothesis tried no smaller example, each another 0.2 s


def test_step5_without_the_most_memory_first_order_fails_on_the_fixed_programs(tmp_path):
    source = solution(5).read_text()
    assert "            evicted.sort(key=rebuild_need)\n" in source
    wrong = tmp_path / solution(5).name
    wrong.write_text(source.replace("            evicted.sort(key=rebuild_need)\n", ""))
    result = next(r for r in grade(step(5), wrong, 0) if r.check == "rematerialize")
    assert not result.passed and "rematerialized x" in result.message, result.message


def test_step1_is_candidate_that_drops_locked_storages_fails(tmp_path):
    source = solution(1).read_text()
    old = (
        "    return storage.buffer is not None and storage.op is not None and not storage.pinned\n"
    )
    assert old in source
    wrong = tmp_path / solution(1).name
    wrong.write_text(source.replace(old, old.replace("\n", " and not storage.locks\n")))
    result = next(r for r in grade(step(1), wrong, 0) if r.check == "candidates")
    assert not result.passed
    assert "is_candidate(y) is False for y = tanh(x) while an op holds it locked" in result.message


def test_a_grader_needing_a_missing_package_is_a_usage_error(monkeypatch, capsys):
    from minidtr.course import __main__ as command

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    assert command.main(["check", "7", "--path", str(solution(7)), "--examples", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m minidtr.course: step 7's grader needs matplotlib: pip install matplotlib "
        "(or '.[course]')"
    ]


def test_a_sys_exit_in_the_students_function_fails_the_checks_saying_so(tmp_path):
    exits = tmp_path / "exits.py"
    exits.write_text(
        "import sys\n\n\ndef score(*args):\n    sys.exit(3)\n\n\nis_candidate = score\n"
    )
    results = grade(step(3), exits, 0)
    assert results and all(not r.passed for r in results)
    message = results[0].message
    assert "your code raised SystemExit: 3 (exits.py line 5, in score), on this example" in message
    candidates = next(r for r in grade(step(1), exits, 0) if r.check == "candidates")
    assert candidates.message == "your code raised SystemExit: 3 (exits.py line 5, in score)"


@pytest.mark.parametrize("scalar", [False, True])
def test_the_fixed_programs_read_values_in_every_table_of_kinds(scalar):
    from minidtr.course.programs import ALL_KINDS, SCALAR_KINDS
    from minidtr.course.strategies import fixed

    chain = fixed(SCALAR_KINDS if scalar else ALL_KINDS, scalar)[0]
    assert [str(i) for i in chain.instructions[-2:]] == ["read x1", "read x4"]
