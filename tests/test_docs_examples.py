"""The commands and Python examples of the docs run as written (so they cannot go stale).

Every shell block, ``$`` line and command in the text of README.md, models/README.md and
docs/*.md (``tests/doc_commands.py`` finds them) is run from a copy of the repository's
top level, with ``minidtr`` and ``python`` on the PATH, and must exit as the docs say;
every ``python`` block runs, a page's blocks in order in one process. What is not run by
default is listed below, each with its reason: ``SLOW`` runs under ``-m slow``,
``NOT_RUN`` never (downloads, a cluster, minutes of benchmark). A command with a
placeholder (``MODEL``, ``LOG``, ``[--top N]``) is a synopsis: its options are checked
against its ``--help``, like every other command's.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from doc_commands import ROOT, Unit, options, placeholders, program, python_blocks, units

DOCS = ROOT / "docs"

# Commands that run, but too long for the default run (processor seconds, one thread).
SLOW = {
    "minidtr sim --bundled": "18 s: every heuristic at five ratios on the seven traces",
    "python models/resnet.py --ratio 0.4 --steps 20": "models/README.md's block: 5 s",
    "minidtr train treelstm --ratio 0.3": "19 s: 50 steps",
    "minidtr train resnet --ratio 0.3 --steps 40 --cost flops": "4 s, as the figure 'train'",
    "python benchmarks/dealloc_rules.py": "8 s",
    "minidtr sim --bundled --keep-dead-remats --ratios 0.5,0.4,0.3,0.2 --heuristics dtr": "4 s",
    "minidtr sim sqrt-n": "22 s: N up to 1,600",
    "minidtr sim adversary": "42 s: N up to 1,600",
    "python models/treelstm.py --ratio 0.7": "5 s: 20 steps",
    "python benchmarks/ctrl_c.py": "70 s: 100 interrupted processes (tests/test_sigint.py runs "
    "four)",
    "minidtr train resnet --ratio 0.3 --heuristic eq+size+nostale": "3 s: 50 steps",
    "minidtr train resnet": "3 s: 50 steps",
    "minidtr sim traces/resnet.log.gz --ratios 0.7,0.5,0.3": "simulator.md's quick start: 13 s",
    "minidtr sim traces/resnet.log.gz traces/densenet.log.gz traces/transformer.log.gz "
    "traces/unet.log.gz --ratios 0.9,0.8,0.7,0.6,0.5,0.4,0.3,0.2 --plot "
    "docs/figures/simulator_figure2.png": "4 s (the figure 'figure2' checks its replays)",
    "python benchmarks/sim_clairvoyant.py": "33 s: records three steps of the seven models",
    "python benchmarks/learned_live.py": "100 s: 28 live runs, each in a process of its own",
    "python benchmarks/sim_clairvoyant.py --heuristics dtr,learned,learned+estar+size+ops": "30 s",
    "python benchmarks/learned_weight.py": "90 s: 672 replays of seven three-step traces",
    "minidtr train unet --ratio 0.2 --steps 20 --heuristic learned": "5 s: 20 steps",
    "python benchmarks/learned_weight.py --steps 5 --weights 0.3 --ratios 0.3,0.2": "13 s: "
    "records five steps of the seven models",
    "H=dtr,belady,belady+estar+size+time,belady+none+nosize+ops": "the next line records "
    "three steps of the seven models (33 s)",
    "python benchmarks/sim_optimal.py --models mlp --keep optimal-traces": "HiGHS, 5 s",
    "minidtr train resnet --ratio 0.5 --steps 5 --events ev.jsonl --plot timeline.png": "3 s",
    "python benchmarks/thrash_guard.py --only trainable --steps 3": "seven models, guards off",
    "python benchmarks/sim_reference_logs.py": "every heuristic, nine ratios, seven traces",
    "python benchmarks/sim_vs_prototype.py": "seven traces x 4 heuristics x 8 ratios, 3 modes",
    "python benchmarks/sim_vs_prototype.py traces/mlp.log.gz --heuristics dtr --ratios 0.5,0.3 "
    "--bound": "22 s: two LP bounds",
    "python docs/make_figures.py --only figure2": "a sweep and a plot",
    "python benchmarks/step_profile.py": "a wall-time profile of training steps",
    "python docs/make_figures.py": "25 s: draws docs/figures again (in the copy)",
    "minidtr animate logs/chain_plain.jsonl logs/chain_checkpointed.jsonl logs/chain_dtr.jsonl "
    'chain.gif --titles "no budget,sqrt(N) checkpoints,DTR"': "15 s: 91 frames in three panels "
    "(tests/test_animate.py animates a shorter chain)",
    "python benchmarks/sim_cluster.py traces/resnet.log.gz traces/mlp.log.gz": (
        "14 s: the grid in a pool and on a Dask LocalCluster"
    ),
    "python benchmarks/worst_cases.py": "16 s: 100 programs for each of the seven heuristics",
    "python benchmarks/fragmentation.py": "30 s: frontiers of the seven traces, three runs each",
    "python benchmarks/fragmentation.py --placement best": "30 s, as the line above",
    "python benchmarks/gc_share.py": "7 s: a timed benchmark",
    "python benchmarks/window_decision.py": "6 s: a timed benchmark",
    "minidtr sim bound traces/treelstm.log.gz": "28 s: the LP on the Tree-LSTM's 2,000 nodes "
    "(tests/test_sim_bound.py runs smaller traces)",
    "python benchmarks/untrusted_files.py": "24 s: tests/test_untrusted_files.py checks each "
    "crafted file's one-line error",
    "minidtr animate ev.jsonl ev.gif --limit 120": "11 s: 120 frames (tests/test_animate.py "
    "animates shorter logs)",
}

DOWNLOAD = "downloads from PyPI"
PROTOTYPE = "needs the prototype's logs.zip, downloaded from GitHub as dtr.md shows"
SIMULATOR = "needs the prototype's repository (its simulator, simrd), cloned from GitHub"
WALL = "a wall-time benchmark of minutes; its figures are the machine's, not compared"
FIGURE = "tests/test_doc_figures.py runs the same command and compares its output"
# Commands never run by the tests, and why. A unit stops at its first command listed here.
NOT_RUN = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[demo]' && minidtr demo": (
        "a new virtual environment, " + DOWNLOAD
    ),
    "curl -LO https://github.com/uwsampl/dtr-prototype/raw/master/simrd/logs.zip": (
        "downloads the prototype's logs from GitHub"
    ),
    "python benchmarks/dealloc_rules.py logs/resnet32-56-*.log logs/unet-6-*.log": PROTOTYPE,
    "python benchmarks/sim_clairvoyant.py logs/resnet32-56-*.log logs/unet-6-*.log --ratios "
    "0.6,0.5,0.4,0.3,0.2 --heuristics $H --max-nodes 0": PROTOTYPE,
    "python benchmarks/sim_reference_logs.py logs/": PROTOTYPE,
    "git clone https://github.com/uwsampl/dtr-prototype": SIMULATOR,
    "python benchmarks/simrd_expected.py --simrd dtr-prototype/simrd": SIMULATOR,
    "python benchmarks/simrd_expected.py --simrd dtr-prototype/simrd resnet.log.gz --write": (
        SIMULATOR
    ),
    "python benchmarks/fragmentation.py logs/resnet32-56-*.log logs/unet-6-*.log": PROTOTYPE,
    "dask scheduler --port 8786": "a Dask cluster on other machines (HEAD)",
    "dask scheduler --protocol tls --port 8786 --tls-ca-file ca.pem --tls-cert head.pem "
    "--tls-key head.key": "a Dask cluster on other machines (HEAD), with certificates; "
    "tests/test_sim_cluster.py runs a sweep on a TLS LocalCluster",
    "dask worker tcp://HEAD:8786 --nworkers 4 --nthreads 1": "a Dask cluster on other machines",
    "python -m pytest -q -n 2": "the test suite itself",
    "MINIDTR_CHECK_DECISIONS=1 python -m pytest": "the test suite itself, with every decision "
    "checked twice",
    "MINIDTR_AUDIT=1 python -m pytest": "the test suite itself, audited",
    "python -m pytest -m slow tests/test_reference.py": "slow tests of the suite itself "
    "(the seven models trained live both ways: minutes)",
    "cd docs/examples && python -m pytest -q test_my_model.py --hypothesis-show-statistics": (
        "tests/test_testing.py runs docs/examples/test_my_model.py (its 100 examples under -m slow)"
    ),
    "cd docs/examples && python shrink_budget.py": "tests/test_testing.py runs it",
    "cd docs/examples && python planted_bugs.py": "a minute of hypothesis shrinking five failures: "
    "tests/test_gallery.py runs the same checks (without shrinking) and checks what they raise",
    "python benchmarks/property_speed.py": "a minute and a half of processor time; its figures "
    "are the machine's",
    "python benchmarks/property_speed.py --torch": "a minute and a half of processor time; its "
    "figures are the machine's",
    "minidtr sim --bundled --heuristics dtr,dtr_down": "dtr_down exists only once written into "
    "runtime/heuristics.py, as design.md says",
    "minidtr train resnet --ratio 0.3 --steps 40": FIGURE + " ('train')",
    "minidtr train resnet --find-budget": FIGURE + " ('find-budget')",
    "minidtr train transformer --steps 3 --trace transformer.log --no-progress": FIGURE
    + " ('sim-info')",
    "minidtr sim frontier transformer.log --max-slowdown 1.5": FIGURE + " ('sim-frontier')",
    "python benchmarks/explorer_load.py": FIGURE + " ('explorer-load', under -m slow)",
    "python benchmarks/sim_optimal.py": FIGURE + " ('optimal', under -m slow): 6 minutes",
    "python benchmarks/sim_optimal.py --markdown": FIGURE + " ('optimal', under -m slow)",
    "python benchmarks/sim_bound.py": FIGURE + " ('bound', under -m slow): 3 minutes",
    "python benchmarks/frontier.py": FIGURE + " ('frontier', under -m slow): 8 minutes",
    "python benchmarks/frontier.py --csv frontier.csv": "8 minutes, as the figure 'frontier'",
    "python docs/make_figures.py --sweep frontier.csv": "needs the CSV of the line after it in "
    "models.md (8 minutes)",
    "python docs/make_screenshots.py": "rewrites docs/figures in headless Chromium",
    "python benchmarks/performance.py": WALL,
    "OPENBLAS_NUM_THREADS=1 python benchmarks/performance.py": WALL,
    "python benchmarks/performance.py --decisions": WALL + " (about 10)",
    "OPENBLAS_NUM_THREADS=1 python benchmarks/performance.py --decisions": WALL + " (about 10)",
    "python benchmarks/performance.py --quick": WALL,
    "OPENBLAS_NUM_THREADS=1 python benchmarks/performance.py --quick": WALL,
    "python benchmarks/window_kernels.py": WALL,
    "python benchmarks/window_kernels.py --models": WALL,
    "python benchmarks/vs_torch_checkpoint.py": WALL,
    "python benchmarks/malloc_faults.py --ratio 1": WALL,
    "python benchmarks/vs_torch.py --steps 15": WALL + " (about 6 on two cores)",
    "python benchmarks/vs_torch.py --quick": WALL + " (a rough pass)",
    "python benchmarks/vs_torch.py --models lstm,treelstm --steps 15": WALL,
    "python benchmarks/real_memory.py": FIGURE + " ('real-memory', under -m slow): 3 minutes",
    "python benchmarks/overhead_mlp.py": WALL,
    "python benchmarks/step_profile.py --by-op": WALL,
    "python benchmarks/step_profile.py --model resnet --steps 16": WALL,
    "python benchmarks/step_profile.py --instructions --batch 2": WALL,
    "python benchmarks/step_profile.py --model treelstm --instructions --ratio 0.3": WALL
    + " (callgrind: 2.5 minutes)",
    "OPENBLAS_NUM_THREADS=1 python benchmarks/step_profile.py --steps 16 --by-op": WALL,
    "python benchmarks/soak.py": "12,000 training steps: minutes",
    "python benchmarks/batch_memory.py --model treelstm --steps 5000": "5,000 steps: 8 "
    "minutes (models.md's ten tiny steps run)",
    "minidtr train treelstm --ratio 0.3 --steps 5000": "a minute to step 353; "
    "tests/test_cli.py checks the same message on the tiny preset's step 7",
    "minidtr train treelstm --ratio 0.3 --steps 5000 --measure-steps 5000": "5,000 steps "
    "measured and 5,000 trained: 20 minutes; tests/test_cli.py runs the tiny preset so",
    "python benchmarks/models_budget.py": "every model at many ratios: minutes",
    "python benchmarks/sim_replay_speed.py": WALL,
    "python benchmarks/reference_speed.py": WALL,
}
# Commands never run, by how they start, and why.
NOT_RUN_PREFIXES = {
    "pip install ": DOWNLOAD,
    "python docs/refresh_figures.py": "rewrites the docs; tests/test_doc_figures.py measures "
    "the same figures and compares",
    "python benchmarks/op_instructions.py": "runs under valgrind's callgrind: minutes",
    "PYTHONPATH=$PWD python benchmarks/op_instructions.py": "runs under valgrind: minutes",
    "OPENBLAS_NUM_THREADS=1 python benchmarks/op_instructions.py": "runs under valgrind: minutes",
    "python benchmarks/wall_vs_cost.py": WALL,
}


def not_run(command: str) -> str | None:
    """Why ``command`` is not run, or None."""
    if command in NOT_RUN:
        return NOT_RUN[command]
    return next((why for start, why in NOT_RUN_PREFIXES.items() if command.startswith(start)), None)


# The course's checks of the skeletons, as written: they fail (exit 1) until the student
# fills them in (tests/test_course.py checks the reference solutions and the messages).
SKELETON_CHECKS = {f"python -m minidtr.course check {n}": 1 for n in range(8)}

# Commands that end with another exit status, as the docs say they do.
EXIT_STATUS = {
    **SKELETON_CHECKS,
    "minidtr train lstm --ratio 0.2": 1,  # cli.md: the thrash guard's one-line BudgetError
    # cli.md: usage errors, one line each
    "minidtr train mlp --heuristic lru": 2,
    "minidtr plot ev.jsonl ev.jsonl": 2,
    "minidtr explain ev.jsonl --html ev.jsonl": 2,
    "minidtr sim t.log --csv t.log": 2,
}


def _run(unit: Unit) -> tuple[str, ...]:
    """The commands of ``unit`` that the tests run: those before the first that is not
    run (the later ones may need what it would have made, such as a download)."""
    commands = []
    for command in unit.commands:
        if not_run(command) or placeholders(command):
            break
        commands.append(command)
    return tuple(commands)


def _status(unit: Unit) -> str:
    """``run``, ``slow``, or ``not run`` (a first command not run, or a synopsis)."""
    commands = _run(unit)
    if not commands:
        return "not run"
    return "slow" if any(c in SLOW for c in commands) else "run"


UNITS = units()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A copy of the repository's top level, with an event log and a trace made by the
    docs' own commands (cli.md's and simulator.md's) for the commands that read them."""
    from doc_commands import workspace as make

    directory = tmp_path_factory.mktemp("docs")
    env = make(directory)
    for command in (
        "minidtr train lstm --ratio 0.5 --steps 5 --events ev.jsonl --no-progress",
        "minidtr train transformer --steps 3 --trace transformer.log --no-progress",
    ):
        subprocess.run(command, shell=True, cwd=directory, env=env, check=True, capture_output=True)
    return directory, env


def run_unit(unit: Unit, directory, env, timeout: float) -> None:
    commands = _run(unit)
    expected = EXIT_STATUS.get(commands[-1], 0)
    script = "\n".join(commands) + "\n"
    started = time.perf_counter()
    result = subprocess.run(
        ["bash", "-c", ("set -e\n" if expected == 0 else "") + script],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    took = time.perf_counter() - started
    assert result.returncode == expected, (
        f"{unit.where}: exit {result.returncode} (expected {expected}) after {took:.1f} s\n"
        f"{script}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    )


def _params(status: str):
    marks = [pytest.mark.slow] if status == "slow" else []
    return [pytest.param(u, id=u.where, marks=marks) for u in UNITS if _status(u) == status]


@pytest.mark.parametrize("unit", _params("run"))
def test_doc_command_runs(unit, workspace):
    run_unit(unit, *workspace, timeout=300)


@pytest.mark.parametrize("unit", _params("slow"))
def test_slow_doc_command_runs(unit, workspace):
    run_unit(unit, *workspace, timeout=1800)


def test_the_lists_name_only_commands_of_the_docs():
    written = {c for u in UNITS for c in u.commands}
    for table in (SLOW, NOT_RUN, EXIT_STATUS):
        stale = sorted(set(table) - written)
        assert not stale, f"no longer in the docs: {stale}"
    unused = [p for p in NOT_RUN_PREFIXES if not any(c.startswith(p) for c in written)]
    assert not unused, f"no command of the docs starts so: {unused}"


@functools.cache
def _help(words: tuple[str, ...]) -> str:
    """What ``words --help`` prints (``minidtr`` and ``python`` as the docs mean them)."""
    argv = [sys.executable, *words[1:]]
    if words[0] == "minidtr":
        argv = [sys.executable, "-m", "minidtr", *words[1:]]
    result = subprocess.run(
        [*argv, "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{' '.join(words)} --help: {result.stderr[-2000:]}"
    return result.stdout


def test_every_option_in_the_docs_is_one_the_command_takes():
    """Every ``--option`` a command of the docs passes (synopses and commands not run
    included) is listed by that program's ``--help`` (asked two programs at a time)."""
    checked = []  # (where, program's words, the command's text)
    for unit in UNITS:
        for command in unit.commands:
            text = command.split("&& ")[-1]
            words = program(text)
            if words[:1] not in (["minidtr"], ["python"]) or len(words) < 2:
                continue  # pip, curl, dask, a shell variable, `python` alone
            if words[1] == "-m" and not words[2].startswith("minidtr"):
                continue  # python -m pytest, python -m zipfile
            if placeholders(" ".join(words)) or not options(text):
                continue  # python models/NAME.py; nothing to check
            checked.append((unit.where, tuple(words), text))
    with ThreadPoolExecutor(2) as pool:
        helps = {words: pool.submit(_help, words) for words in {c[1] for c in checked}}
    missing = []
    for where, words, text in checked:
        listed = helps[words].result()
        for option in options(text):
            if option != "--help" and not re.search(rf"{re.escape(option)}\b", listed):
                missing.append(f"{where}: {' '.join(words)} has no {option}")
    assert not missing, "\n".join(missing)


# ---- Python blocks ----------------------------------------------------------------------

# Pages whose python blocks run elsewhere, and where.
PYTHON_NOT_RUN = {
    "docs/design.md": "test_design_examples_run (below) runs them and checks what the page says",
    "docs/tutorial.md": "excerpts of docs/tutorial_example.py, which tests/test_tutorial_page.py "
    "runs; test_tutorial_blocks_are_excerpts_of_its_example (below) checks them",
}
# Single blocks (page, first line of the block) not run here, and why.
PYTHON_BLOCK_NOT_RUN = {
    ("docs/simulator.md", "from distributed import Client"): "needs a Dask scheduler at HEAD",
    (
        "docs/testing.md",
        '"""Property-test my own model: under any budget and heuristic, training'
        ' gives the same bits."""',
    ): "docs/examples/test_my_model.py: tests/test_testing.py runs it",
    (
        "docs/testing.md",
        '"""The smallest budget (in bytes) at which one example of test_my_model.py still fails.',
    ): "docs/examples/shrink_budget.py: tests/test_testing.py",
    (
        "docs/testing.md",
        '"""Five bugs users make in their own ops and models, each caught in the first examples'
        " of a",
    ): "docs/examples/planted_bugs.py: tests/test_gallery.py runs its checks",
    ("docs/course/step0_micro.md", "import sys"): "runs the student's skeleton, which raises "
    "NotImplementedError until it is filled in: tests/test_course.py runs the block on the "
    "reference solution",
}

RUNNER = textwrap.dedent(
    """
    import json, sys
    namespace = {"__name__": "__main__"}
    for where, source in json.load(sys.stdin):
        exec(compile(source, where, "exec"), namespace)
    """
)


def _python_pages() -> list[str]:
    from doc_commands import pages

    return [
        str(p.relative_to(ROOT))
        for p in pages()
        if python_blocks(str(p.relative_to(ROOT)))
        and str(p.relative_to(ROOT)) not in PYTHON_NOT_RUN
    ]


@pytest.mark.parametrize("page", _python_pages())
def test_python_blocks_run(page, workspace):
    directory, env = workspace
    blocks = [
        (f"{page}:{line}", source)
        for line, source in python_blocks(page)
        if (page, source.split("\n")[0]) not in PYTHON_BLOCK_NOT_RUN
    ]
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(blocks),
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{page}:\n{result.stderr[-4000:]}"


def test_tutorial_blocks_are_excerpts_of_its_example():
    """Every line of code in docs/tutorial.md's python blocks is in the example it reads,
    docs/tutorial_example.py (comments aside), so an excerpt cannot go stale."""
    example = (DOCS / "tutorial_example.py").read_text()
    missing = [
        f"docs/tutorial.md:{first + i}: {line.strip()}"
        for first, source in python_blocks("docs/tutorial.md")
        for i, line in enumerate(source.splitlines())
        if line.split("#")[0].strip() not in example
    ]
    assert python_blocks("docs/tutorial.md") and not missing, "\n".join(missing)


def test_design_examples_run(capsys):
    """docs/design.md: RuntimeOptions, the worked op (softplus) and the worked heuristic
    (dtr_down)."""
    from minidtr.runtime import heuristics

    blocks = [source for _, source in python_blocks("docs/design.md")]
    assert len(blocks) == 4
    namespace: dict = {"__name__": "design_example"}
    try:
        for block in blocks:
            exec(compile(block, "docs/design.md", "exec"), namespace)
        out = capsys.readouterr().out.split("\n")
        rows = {tuple(line.split()[:2]): line.split()[2:] for line in out if line.strip()}
        assert len(rows) == 6
        # what the page says: all run; at 0.3 the downward-looking one pays the most
        assert all(status == "ok" for status, _ in rows.values())
        at_03 = {name: float(rows[("0.3", name)][1]) for name in ("dtr", "dtr_down", "msps")}
        assert at_03["dtr_down"] > max(at_03["dtr"], at_03["msps"])
    finally:
        heuristics.COST_TERMS.pop("descendants", None)
        heuristics.NAMED.pop("dtr_down", None)
    with pytest.raises(ValueError, match="unknown heuristic"):
        heuristics.make_heuristic("dtr_down")


def test_the_debugger_walkthrough_stops_where_pdb_does():
    """docs/design.md shows pdb stopping in ``choose_victim``: at its first statement,
    the line pdb reports for a breakpoint on the function."""
    import ast
    import inspect

    from minidtr.runtime import victims

    source = inspect.getsource(victims)
    function = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "choose_victim"
    )
    first = function.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    body = function.body[1:] if docstring else function.body
    page = (DOCS / "design.md").read_text()
    assert f"victims.py({body[0].lineno})choose_victim()" in page
