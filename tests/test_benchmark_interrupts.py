"""Ctrl-C in a benchmark script ends it with one line on stderr and no process left: each
script imports ``benchmarks/interrupts.py`` and gives its pools ``quiet_worker``; a real
SIGINT to the process group (what a terminal sends) of scripts with worker pools."""

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if "__main__" in p.read_text())
POOLS = ("ProcessPoolExecutor", "Pool")


def calls(tree: ast.AST, names: tuple[str, ...]) -> list[ast.Call]:
    def name(func: ast.expr) -> str:
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and name(n.func) in names]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_imports_the_handler_and_quiets_its_pools(script):
    tree = ast.parse(script.read_text())
    imported = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    assert "interrupts" in imported
    for pool in calls(tree, POOLS):
        arguments = [*pool.args, *(k.value for k in pool.keywords)]
        assert any(ast.unparse(a) == "interrupts.quiet_worker" for a in arguments), (
            f"{script.name}:{pool.lineno}: a pool without interrupts.quiet_worker"
        )


def group_members(group: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == group:
                members.append(int(entry))
    return members


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize(
    "argv",
    [["fragmentation.py", "--jobs", "2"], ["frontier.py", "--models", "mlp"]],
    ids=["process-pool-executor", "spawned-pool"],
)
def test_ctrl_c_to_the_process_group_is_one_line_and_leaves_nothing(argv, tmp_path):
    script = BENCHMARKS / argv[0]
    process = subprocess.Popen(
        [sys.executable, str(script), *argv[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 60
    while len(group_members(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # until a worker runs
    assert process.poll() is None
    time.sleep(0.5)
    os.killpg(process.pid, signal.SIGINT)
    err = process.communicate(timeout=60)[1]
    assert err == f"{script.name}: interrupted\n"
    assert process.returncode == -signal.SIGINT
    deadline = time.monotonic() + 10
    while group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_members(process.pid) == []
