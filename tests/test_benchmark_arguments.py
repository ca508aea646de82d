"""The benchmark scripts' command lines: a bad option value is argparse's one-line usage
error (``NAME.py: error: argument --ratios: ...``, exit status 2) before any work, not a
traceback minutes into a run; and a script that pins OpenBLAS to one thread does so
before NumPy is imported (NumPy reads the setting once, as it loads)."""

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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


MISSING = "/nonexistent/minidtr-missing"  # a path that does not exist
A_FILE = str(ROOT / "README.md")  # a file where a folder is wanted
# (script, arguments, what the one error line names): one bad value each, that the script
# took before (a traceback, a run of nothing, a run past the range its figures mean)
CASES = [
    ("attention_memory.py", ["--dim", "0"], "--dim"),
    ("batch_memory.py", ["--ratios", "abc"], "--ratios"),
    ("budget_sweep.py", ["--models", "nope"], "--models"),
    ("budget_sweep.py", ["--heuristic", "nope"], "--heuristic"),
    ("dealloc_rules.py", ["--ratios", "0"], "--ratios"),
    ("dealloc_rules.py", [f"{MISSING}.log"], "LOG"),
    ("explorer_load.py", ["--log", f"{MISSING}.jsonl"], "--log"),
    ("fragmentation.py", ["--ratios", "abc"], "--ratios"),
    ("fragmentation.py", ["--placement", "nope"], "--placement"),
    ("frontier.py", ["--ratios", "0"], "--ratios"),
    ("frontier.py", ["--csv", f"{MISSING}/rows.csv"], "--csv"),
    ("gc_share.py", ["--steps", "0"], "--steps"),
    ("learned_live.py", ["--heuristics", "nope"], "--heuristics"),
    ("learned_weight.py", ["--weights", "abc"], "--weights"),
    ("lru_rules.py", ["--cells", "resnet:x"], "--cells"),
    ("malloc_faults.py", ["--ratio", "0"], "--ratio"),
    ("models_budget.py", ["--csv", f"{MISSING}/rows.csv"], "--csv"),
    ("overhead_mlp.py", ["--widths", "5"], "--widths"),
    ("property_speed.py", ["--examples", "0"], "--examples"),
    ("real_memory.py", ["--ratios", "0"], "--ratios"),
    ("reference_speed.py", ["--heuristics", "nope"], "--heuristics"),
    ("remat_attribution.py", ["mlp", "--ratio", "2"], "--ratio"),
    ("sim_bound.py", ["--time-limit", "0"], "--time-limit"),
    ("sim_clairvoyant.py", ["--max-nodes", "-1"], "--max-nodes"),
    ("sim_cluster.py", ["--workers", "0"], "--workers"),
    ("sim_optimal.py", ["--fractions", "2"], "--fractions"),
    ("sim_reference_logs.py", [MISSING], "DIR"),
    ("sim_replay_speed.py", ["--logs", MISSING], "--logs"),
    ("sim_vs_prototype.py", ["--ratios", "0"], "--ratios"),
    ("soak.py", ["--every", "0"], "--every"),
    ("step_profile.py", ["--instructions", "--ratio", "2"], "--ratio"),
    ("thrash_guard.py", ["--steps", "0"], "--steps"),
    ("untrusted_files.py", ["--gib", "0"], "--gib"),
    ("vs_torch.py", ["--segments", "0"], "--segments"),
    ("wall_vs_cost.py", ["--ratios", "0"], "--ratios"),
    ("window_decision.py", ["--blocks", "1"], "--blocks"),
    ("worst_cases.py", ["--heuristics", "nope"], "--heuristics"),
    ("sim_optimal.py", ["--keep", A_FILE], "--keep"),
    ("sim_clairvoyant.py", ["--keep", f"{A_FILE}/traces"], "--keep"),
    ("untrusted_files.py", ["--keep", A_FILE], "--keep"),
    ("ctrl_c.py", ["--runs", "0"], "--runs"),
]
# (script, arguments, module hidden from it, what the one line asks to install)
WITHOUT = [
    ("property_speed.py", ["--torch"], "torch", "pip install torch"),
    ("fit_normal_tail.py", [], "scipy", "pip install scipy"),
    ("sim_bound.py", [], "scipy", "pip install 'minidtr[scipy]'"),
    ("sim_vs_prototype.py", ["--bound"], "scipy", "pip install 'minidtr[scipy]'"),
]
HIDE = """
import importlib.machinery, runpy, sys
hidden = sys.argv[1]
find = importlib.machinery.PathFinder.find_spec.__func__
def find_spec(cls, name, path=None, target=None):
    return None if name.split(".")[0] == hidden else find(cls, name, path, target)
importlib.machinery.PathFinder.find_spec = classmethod(find_spec)
sys.argv = sys.argv[2:]
sys.path[0] = str(__import__("pathlib").Path(sys.argv[0]).parent)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(argv: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple, subprocess.CompletedProcess]:
    """Every case's process, run side by side (each only parses its arguments)."""
    commands = {(script, *args): [str(BENCHMARKS / script), *args] for script, args, _ in CASES}
    for script, args, module, _ in WITHOUT:
        commands[(script, *args, module)] = ["-c", HIDE, module, str(BENCHMARKS / script), *args]
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        return dict(zip(commands, pool.map(run, commands.values()), strict=True))


@pytest.mark.parametrize(("script", "args", "option"), CASES, ids=lambda v: " ".join(v))
def test_a_bad_value_is_one_usage_line_before_any_work(outcomes, script, args, option):
    done = outcomes[(script, *args)]
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(f"{script}: error: "), done.stderr
    assert option in errors[0]
    assert done.returncode == 2
    assert done.stdout == ""


@pytest.mark.parametrize(("script", "args", "module", "install"), WITHOUT, ids=lambda v: v)
def test_a_missing_optional_module_is_one_line_naming_it(outcomes, script, args, module, install):
    done = outcomes[(script, *args, module)]
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if install in line]
    assert len(lines) == 1 and lines[0].startswith(script.removesuffix(".py")), done.stderr
    assert done.returncode in (1, 2)
    assert done.stdout == ""
