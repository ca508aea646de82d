"""The command line's modules: no import circle (``minidtr sim``'s command line does not
import the front door), each module under 600 lines, each function under 60."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "minidtr"
CLI_MODULES = sorted([*PACKAGE.glob("cli*.py"), *PACKAGE.joinpath("sim").glob("*cli.py")])
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60


def test_the_simulators_command_line_does_not_import_the_front_door():
    code = "import sys, minidtr.sim.cli; print('minidtr.cli' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_cli_modules_are_short_and_so_are_their_functions(path):
    source = path.read_text()
    assert len(source.splitlines()) < MAX_FILE_LINES
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long
