"""The benchmark scripts' command lines: a bad option value is argparse's one-line usage
error (``NAME.py: error: argument --ratios: ...``, exit status 2) before any work, not a
traceback minutes into a run; and a script that pins OpenBLAS to one thread does so
before NumPy is imported (NumPy reads the setting once, as it loads)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if "__main__" in p.read_text())


def _sets_thread_count(node: ast.stmt) -> bool:
    return "OPENBLAS_NUM_THREADS" in ast.unparse(node) and "setdefault" in ast.unparse(node)


def _imports_numpy(node: ast.stmt) -> bool:
    """An import of NumPy or of minidtr (which imports NumPy)."""
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
        modules = [node.module or ""]
    else:
        return False
    return any(m.split(".")[0] in ("numpy", "minidtr") for m in modules)


PINNED = [p for p in SCRIPTS if any(map(_sets_thread_count, ast.parse(p.read_text()).body))]


@pytest.mark.parametrize("script", PINNED, ids=lambda p: p.name)
def test_the_thread_count_is_set_before_numpy_is_imported(script):
    body = ast.parse(script.read_text()).body
    setting = next(i for i, node in enumerate(body) if _sets_thread_count(node))
    early = [ast.unparse(node) for node in body[:setting] if _imports_numpy(node)]
    assert early == [], f"{script.name}: imported before OPENBLAS_NUM_THREADS is set"
