"""The code stays readable: short files, short functions where the spine runs.

No module of the package is over 600 lines unless a comment at its top says why it must
stay whole; no function of the runtime, the autograd engine, the Tensor or the op protocol
(``ops/op.py``) is over 60 lines. (tests/test_cli_layout.py holds the command line to the
same.)"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "minidtr"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
SPINE = sorted(
    [
        *PACKAGE.joinpath("runtime").rglob("*.py"),
        PACKAGE / "autograd.py",
        PACKAGE / "tensor.py",
        PACKAGE / "ops" / "op.py",
    ]
)
WHOLE = "must stay whole"  # what a module over the limit says at its top, and why


def name(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=name)
def test_modules_are_short(path):
    lines = path.read_text().splitlines()
    if len(lines) > MAX_FILE_LINES:
        top = "\n".join(lines[:20])
        assert WHOLE in top, f"{name(path)}: {len(lines)} lines, and its top does not say why"


@pytest.mark.parametrize("path", SPINE, ids=name)
def test_spine_functions_are_short(path):
    tree = ast.parse(path.read_text())
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{name(path)}: {long}"
