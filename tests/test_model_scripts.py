"""The training scripts in models/: each runs a tiny training under a budget, answers
--help, and builds its model from minidtr.models (no second definition of any model)."""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

MODELS_DIR = pathlib.Path(__file__).resolve().parents[1] / "models"
SCRIPTS = ("densenet", "lstm", "mlp", "resnet", "transformer", "treelstm", "unet")
# small batches keep the runs fast; at a small batch parameters and optimizer state (constants,
# never evicted) are most of the peak, so the MLP keeps a larger batch and ResNet a roomier ratio;
# the Tree-LSTM levels 8 trees together, so a batch of 8 is one group, whose every tree is
# different from step to step: 16, at a ratio that forces evictions on either batch
TINY = {
    "mlp": ["--batch", "256", "--ratio", "0.8"],
    "resnet": ["--batch", "16", "--ratio", "0.8"],
    "treelstm": ["--batch", "16", "--ratio", "0.8"],
}


def load(name: str, monkeypatch):
    monkeypatch.syspath_prepend(str(MODELS_DIR))  # the scripts import models/common.py
    spec = importlib.util.spec_from_file_location(f"models_{name}", MODELS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_script_per_model_family():
    found = sorted(p.stem for p in MODELS_DIR.glob("*.py") if p.stem != "common")
    assert tuple(found) == SCRIPTS
    from minidtr.models import MODELS

    assert set(SCRIPTS) == set(MODELS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_trains_under_its_budget(name, monkeypatch, capsys):
    args = TINY.get(name, ["--batch", "8", "--ratio", "0.9"])
    stats = load(name, monkeypatch).main(["--steps", "2", *args])
    out = capsys.readouterr().out
    assert "steps under a budget of" in out and "slowdown" in out
    assert len(stats["losses"]) == 2 and all(math.isfinite(x) for x in stats["losses"])
    assert stats["peak_memory"] <= stats["budget"] < stats["unbounded_peak"]
    assert stats["evictions"] > stats["dead_evictions"]  # the budget forced evictions


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_trains_the_small_preset(name, monkeypatch, capsys):
    """The model and default batch of each script are `minidtr train NAME`'s (the small
    preset of minidtr.models), so the scripts train what the docs' figures measure."""
    from minidtr.models import make_task

    task = make_task(name)
    module = load(name, monkeypatch)
    with pytest.raises(SystemExit):
        module.main(["--help"])
    assert f"batch size (default {task.batch_size})" in capsys.readouterr().out
    stats = module.main(["--steps", "1", *TINY.get(name, ["--batch", "8", "--ratio", "0.9"])])
    assert stats["parameters"] == sum(p.size for p in task.model.parameters())


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_uses_the_zoo_definition(name):
    source = (MODELS_DIR / f"{name}.py").read_text()
    assert "from minidtr.models import" in source
    assert not re.search(r"^class ", source, re.M) and "nn.Module" not in source
    assert re.search(r"md\.Runtime\(\s*budget=budget", source)


def test_help_and_bad_arguments(monkeypatch, capsys):
    resnet = load("resnet", monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        resnet.main(["--help"])
    assert exit_info.value.code == 0
    assert "--ratio" in capsys.readouterr().out
    for bad in (["--steps", "0"], ["--heuristic", "nope"], ["--ratio", "0.5", "--budget", "9"]):
        with pytest.raises(SystemExit) as exit_info:
            resnet.main(bad)
        assert exit_info.value.code == 2


@pytest.mark.parametrize(
    "bad, error",
    [
        (["--batch", "5000"], "argument --batch: must be at most the 1,600 training examples"),
        (["--seed", "-1"], "argument --seed: must be at least 0, got -1"),
        (["--ratio", "nan"], "argument --ratio: must be a number in (0, 1], got 'nan'"),
        (["--ratio", "inf"], "argument --ratio: must be a number in (0, 1], got 'inf'"),
        (["--ratio", "1.5"], "argument --ratio: must be a number in (0, 1], got '1.5'"),
        (["--budget", "-5"], "argument --budget: a budget cannot be negative"),
        (["--max-slowdown", "nan"], "argument --max-slowdown: must be > 1"),
    ],
)
def test_a_bad_value_is_a_usage_error_before_any_step(bad, error, monkeypatch, capsys):
    """Read as `minidtr train` reads them: one usage error (exit 2), no step run."""
    lstm = load("lstm", monkeypatch)
    monkeypatch.setattr(lstm.md, "Runtime", None)  # a step would fail on it
    with pytest.raises(SystemExit) as exit_info:
        lstm.main([*bad, "--steps", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f": error: {error}" in err
    assert "Traceback" not in err


def test_runs_standalone_and_reports_a_budget_too_small():
    script = str(MODELS_DIR / "lstm.py")
    tiny = ["--steps", "1", "--batch", "8", "--ratio", "0.9"]
    ok = subprocess.run([sys.executable, script, *tiny], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "LSTM: 1 steps under a budget" in ok.stdout
    small = subprocess.run(
        [sys.executable, script, *tiny, "--ratio", "0.05"],
        capture_output=True,
        text=True,
    )
    assert small.returncode == 1
    assert small.stderr.startswith("error: ") and "Traceback" not in small.stderr
    grinding = subprocess.run(
        [sys.executable, script, *tiny, "--ratio", "0.6", "--max-slowdown", "1.5"],
        capture_output=True,
        text=True,
    )
    assert grinding.returncode == 1 and "max_slowdown=1.5" in grinding.stderr


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    import minidtr as md

    common = load("common", monkeypatch)

    def main():
        x = md.tensor([1.0])
        with md.Runtime():
            os.kill(os.getpid(), signal.SIGINT)  # deferred: the allocator stops at its next op
            for _ in range(10_000):
                x = x + 1
        raise AssertionError("not interrupted")

    monkeypatch.setattr(sys, "argv", ["models/resnet.py"])
    assert common.run(main) == 130
    assert capsys.readouterr().err == "resnet.py: interrupted\n"
