"""The ``minidtr`` command and ``minidtr explain``: run in-process on tiny models."""

import argparse
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import minidtr as md
from minidtr import cli
from minidtr.budget_search import find_budget
from minidtr.cli_report import frontier_table
from minidtr.explain import (
    explain,
    human_bytes,
    load_events,
    resident_timeline,
    summarize,
    write_event_log,
)
from minidtr.testing import isolated_allocator
from minidtr.training import TrainConfig, measure_unbounded


@pytest.fixture(autouse=True)
def fresh_allocator():
    """Each test on its own allocator (a failed run can leave storages resident)."""
    with isolated_allocator():
        yield


def run(capsys, *argv):
    """``minidtr ARGV`` in-process: (exit status, stdout, stderr); a usage error's
    SystemExit counts as its status."""
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_train_prints_the_summary_and_writes_the_event_log(capsys, tmp_path):
    events = tmp_path / "ev.jsonl"
    code, out, err = run(
        capsys,
        "train",
        "resnet",
        "--size",
        "tiny",
        "--steps",
        "3",
        "--ratio",
        "0.9",
        "--events",
        str(events),
        "--no-progress",
    )
    assert code == 0, err
    for label in (
        "loss",
        "test accuracy",
        "steps/s",
        "peak memory",
        "evictions",
        "remats",
        "slowdown",
        "0.90 x unbounded peak",
        "The clock counts estimated ns",
        "floor: ",
    ):
        assert label in out
    lines = events.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["event"] == "runtime" and header["model"] == "resnet"
    assert header["budget"] > 0 and header["heuristic"] == "dtr"
    kinds = {json.loads(line)["event"] for line in lines[1:]}
    assert {"alloc", "evict", "remat"} <= kinds
    # the events counted as explain and the page count them: the step marks apart
    counted = sum(summarize(load_events(str(events))).counts.values())
    assert f"({counted:,} events and 3 step marks; minidtr explain" in out
    assert counted == len(lines) - 1 - 3


def test_train_budget_in_bytes_with_suffix(capsys):
    code, out, err = run(
        capsys, "train", "mlp", "--size", "tiny", "--steps", "2", "--budget", "10M", "--no-progress"
    )
    assert code == 0, err
    assert "budget: 10.0 MiB" in out


def test_train_with_an_infeasible_budget_fails_cleanly(capsys):
    code, out, err = run(
        capsys, "train", "mlp", "--size", "tiny", "--steps", "2", "--budget", "20K", "--no-progress"
    )
    assert code == 1
    assert "budget is too small" in err and "Raise the budget" in err
    assert "below the model's floor" in err and "no policy can fit it" in err
    # the floor is the measured steps' (a run shorter than them may fit below it)
    assert "of peak, over its first 2 steps): no policy can fit it" in err


def test_thrashing_below_the_floor_gives_the_floor_not_a_higher_limit(capsys):
    """A run stopped for thrashing under a budget below the model's floor is told the
    floor: a higher --max-slowdown could only end in the floor's BudgetError."""
    floor = measure_unbounded(TrainConfig("mlp", size="tiny", steps=1)).floor
    argv = ["train", "mlp", "--size", "tiny", "--steps", "1", "--max-slowdown", "1.01"]
    code, _, err = run(capsys, *argv, "--budget", str(floor * 95 // 100), "--no-progress")
    assert code == 1 and "it was thrashing" in err and "max_slowdown=1.01" in err
    assert f"below the model's floor of {human_bytes(floor)}" in err
    assert f"no policy can fit it; give it {floor:,} bytes or more" in err
    assert "raise the limit" not in err and "--max-slowdown" not in err
    # at the floor, a higher limit may help: the error's advice stands
    code, _, err = run(capsys, *argv, "--budget", str(floor), "--no-progress")
    assert code == 1 and "it was thrashing" in err and "below the model's floor" not in err
    assert "raise the limit" in err and "--max-slowdown" in err


def test_the_machine_running_out_is_one_line(capsys, monkeypatch):
    """A command whose work needs more than the machine has ends with the allocation's
    message on one line and status 1, not a traceback."""

    def too_big(args):
        md.zeros((10**10, 10**10))

    monkeypatch.setitem(cli.HANDLERS, "demo", too_big)
    code, out, err = run(capsys, "demo")
    assert code == 1
    assert err.startswith("minidtr demo: constant: could not allocate (10000000000, 10000000000)")
    assert err.count("\n") == 1


def test_find_budget_prints_the_probes_and_the_lowest_ratio(capsys):
    code, out, err = run(capsys, "train", "mlp", "--size", "tiny", "--steps", "2", "--find-budget")
    assert code == 0, err
    assert "--find-budget --max-slowdown 2" in out and "floor: " in out
    assert "ratio" in out and "0.90" in out and "lowest ratio within 2x: 0." in out
    code, _, err = run(capsys, "train", "mlp", "--find-budget", "--ratio", "0.5")
    assert code == 2 and "--find-budget" in err


def test_find_budget_with_no_slowdown_limit_says_none(capsys):
    argv = ["train", "mlp", "--size", "tiny", "--steps", "1", "--find-budget"]
    code, out, err = run(capsys, *argv, "--max-slowdown", "none", "--no-progress")
    assert code == 0, err
    assert "--find-budget --max-slowdown none (1 step per probe" in out
    assert "lowest ratio with no slowdown limit: 0." in out
    config = TrainConfig("mlp", size="tiny", steps=1)
    stopped = dataclasses.replace(find_budget(config, max_slowdown=None), interrupted=True)
    assert "so far the lowest ratio with no slowdown limit: 0." in frontier_table(stopped)


def test_train_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "mlp", "--ratio", "1.5"])
    with pytest.raises(SystemExit):
        cli.main(["train", "mlp", "--ratio", "0.5", "--budget", "1M"])
    with pytest.raises(SystemExit):
        cli.main(["train", "vgg"])
    code, _, err = run(
        capsys,
        "train",
        "mlp",
        "--size",
        "tiny",
        "--heuristic",
        "nope",
        "--steps",
        "1",
        "--no-progress",
    )
    assert code == 2 and "unknown heuristic" in err


def test_trace_option_depends_on_the_simulator(capsys, tmp_path):
    trace = tmp_path / "trace.jsonl"
    code, out, err = run(
        capsys,
        "train",
        "mlp",
        "--size",
        "tiny",
        "--steps",
        "1",
        "--trace",
        str(trace),
        "--no-progress",
    )
    if getattr(md.sim, "record", None) is None:
        assert code == 2 and "not have yet" in err
    else:
        assert code == 0, err
        assert trace.exists() and trace.stat().st_size > 0


def test_plot_writes_a_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    code, out, err = run(
        capsys,
        "train",
        "unet",
        "--size",
        "tiny",
        "--steps",
        "2",
        "--ratio",
        "0.7",
        "--plot",
        str(png),
        "--no-progress",
    )
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_models_lists_every_model(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    for name in md.models.MODELS if hasattr(md, "models") else cli_models():
        assert name in out


def cli_models():
    from minidtr.models import MODELS

    return MODELS


def test_python_dash_m_runs_the_cli():
    done = subprocess.run(
        [sys.executable, "-m", "minidtr", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "train" in done.stdout and "explain" in done.stdout


def test_parse_bytes():
    assert cli.parse_bytes("1500") == 1500
    assert cli.parse_bytes("2K") == 2048
    assert cli.parse_bytes("1.5MiB") == int(1.5 * 1024**2)
    assert cli.parse_bytes("1g") == 1024**3
    assert cli.parse_bytes("0") == 0
    # whole numbers exactly: as floats, the largest budget rounded past the limit
    assert cli.parse_bytes(str(2**63 - 1)) == 2**63 - 1
    assert cli.parse_bytes("12345678901234567") == 12345678901234567
    assert cli.parse_bytes("8796093022207K") == 8796093022207 * 1024
    with pytest.raises(argparse.ArgumentTypeError, match="at most"):
        cli.parse_bytes(str(2**63))
    for fraction in ("0.5", "1e-3"):  # became a budget of 0 bytes, as the API refuses it
        with pytest.raises(argparse.ArgumentTypeError, match="less than a byte: .* use --ratio"):
            cli.parse_bytes(fraction)


# ---- explain ----------------------------------------------------------------------------


def chain_events(budget, views=False, end_views=False):
    """A 12-layer tanh chain, forward and backward, under ``budget`` (with ``views``, each
    layer reshapes and transposes its input first: view ops, which allocate nothing; with
    ``end_views``, the run ends with view ops of its output)."""
    w = md.tensor(np.full((8, 8), 0.1, np.float32), requires_grad=True)
    runtime = md.Runtime(budget=budget, cost="flops", record_events=True)
    with runtime:
        h = md.tensor(np.ones((4, 8), np.float32))
        for _ in range(12):
            h = ((h.reshape(8, 4).T if views else h) @ w).tanh()
        h.sum().backward()
        if end_views:
            _ = h.reshape(32).reshape(8, 4).T  # view ops after the last event
    return runtime


@pytest.mark.parametrize(
    "views, end_views", [(False, False), (True, False), (True, True)], ids=["", "views", "end"]
)
def test_explain_agrees_with_the_runtime_stats(tmp_path, views, end_views):
    """With views too: a view op has no event of its own, and explain left its cost out
    of the first computations (and so of the slowdown); those run after the log's last
    event, which no event carries, were left out until the header carried them."""
    runtime = chain_events(2600, views, end_views)
    assert (runtime.unlogged_view_cost > 0) == end_views
    stats = runtime.stats()
    assert stats["remats"] > 0
    path = tmp_path / "ev.jsonl"
    write_event_log(str(path), runtime)
    s = summarize(load_events(str(path)))
    assert s.budget == 2600
    assert sum(s.remats_by_op.values()) == stats["remats"]
    assert s.remat_cost == pytest.approx(stats["remat_cost"])
    assert s.compute_cost == pytest.approx(stats["compute_cost"])
    assert s.peak_memory == stats["peak_memory"]
    forced = stats["evictions"] - stats["dead_evictions"]
    assert sum(s.budget_evictions_by_op.values()) == forced
    assert s.evictions_by_reason["dead"] == stats["dead_evictions"]
    assert len(s.decisions) == forced
    assert all(d.runner_up_score is None or d.score <= d.runner_up_score for d in s.decisions)
    text = explain(s)
    assert "Peak resident memory" in text and "Rematerializations" in text
    assert f"{stats['remats']:,} recomputations" in text
    assert f"slowdown {stats['slowdown']:.3f}x." in text


def test_a_runner_up_without_a_finite_score_is_explained(tmp_path):
    """The log writes an infinite or NaN score as null: explain failed with a traceback."""
    events = chain_events(2600).events
    decision = next(e for e in events if e.get("runner_up"))
    decision["runner_up"] = [decision["runner_up"][0], None]
    text = explain(summarize(events), top=50)
    assert f"runner-up #{decision['runner_up'][0]} (" in text and "with no finite score" in text
    # counted as such, not among those with no runner-up (then listed with one)
    assert "1 had a runner-up with no finite score, and 0 had no runner-up" in text


def test_the_resident_bytes_at_the_peak_are_counted_per_op():
    """Kept per op as the log goes (a copy of the whole resident set at each new peak made
    summarize quadratic: 20,000 rising allocations took 70 s, now a fraction of one)."""
    events = [
        {"event": "alloc", "id": 1, "op": "a", "nbytes": 64, "clock": 1, "memory": 64},
        {"event": "alloc", "id": 2, "op": "b", "nbytes": 32, "clock": 2, "memory": 96},
        {"event": "evict", "id": 1, "op": "a", "nbytes": 64, "clock": 3, "memory": 32,
         "reason": "dead"},
        {"event": "alloc", "id": 3, "op": "b", "nbytes": 80, "clock": 4, "memory": 112},
        {"event": "remat", "id": 3, "op": "b", "nbytes": 80, "clock": 5, "memory": 112},
    ]  # fmt: skip
    s = summarize(events)
    assert s.peak_memory == 112 and s.peak_resident_by_op == {"b": 112}


def test_the_per_op_tally_is_not_copied_at_every_new_peak(monkeypatch):
    """With one op name per allocation and every allocation a new peak, a copy of the
    per-op tally at each peak made summarize quadratic (20,000 events: 48 s); it is now
    rebuilt once, at the end, from the changes up to the peak."""
    import collections

    copies = []
    positive = collections.Counter.__pos__
    monkeypatch.setattr(
        collections.Counter, "__pos__", lambda self: copies.append(1) or positive(self)
    )
    events = [
        {"event": "alloc", "id": i, "op": f"o{i}", "nbytes": 1, "clock": i, "memory": i + 1}
        for i in range(50)
    ]
    events.append({"event": "evict", "id": 3, "op": "o3", "nbytes": 1, "clock": 50,
                   "memory": 49, "reason": "dead"})  # fmt: skip
    s = summarize(events)
    assert s.peak_memory == 50 and s.peak_resident_by_op == {f"o{i}": 1 for i in range(50)}
    assert len(copies) <= 1


def test_explain_without_evictions_says_everything_fit(tmp_path):
    runtime = chain_events(None)
    path = tmp_path / "ev.jsonl"
    # a log without the header line (written by other tools): the budget is unknown
    path.write_text("".join(json.dumps(event) + "\n" for event in runtime.events))
    text = explain(summarize(load_events(str(path))))
    assert "None: everything fit." in text
    assert "budget is not known" in text


def test_explain_command_and_bad_logs(capsys, tmp_path):
    runtime = chain_events(2600)
    path = tmp_path / "ev.jsonl"
    write_event_log(str(path), runtime)
    code, out, _ = run(capsys, "explain", str(path))
    assert code == 0 and "Evictions forced by the budget" in out
    bad = tmp_path / "bad.jsonl"
    alloc = {"event": "alloc", "id": 1, "op": "mm", "nbytes": 8, "clock": 1.0, "memory": 8}
    bad.write_text(json.dumps(alloc) + "\nnot json\n")
    code, _, err = run(capsys, "explain", str(bad))
    assert code == 1 and "bad.jsonl:2" in err
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"event": "party"}\n')
    code, _, err = run(capsys, "explain", str(odd))
    assert code == 1 and "not a minidtr event" in err


def test_resident_timeline_marks_evictions_and_remats():
    runtime = chain_events(2600)
    columns = resident_timeline(runtime.events)
    assert len(columns["clock"]) == len(runtime.events)
    assert max(columns["memory"]) <= 2600
    assert len(columns["remat_clock"]) >= runtime.stats()["remats"]
    assert columns["clock"] == sorted(columns["clock"])


def test_the_readme_example_runs_within_its_budget():
    import re
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    stats = namespace["rt"].stats()
    assert stats["peak_memory"] <= stats["budget"] == 5_000_000
    assert stats["remats"] > 0 and np.isfinite(namespace["loss"].item())


def test_cuda_without_a_gpu_is_a_clear_error(capsys):
    from minidtr import backend

    if backend.cuda_available():
        pytest.skip("a CUDA device is present")
    code, _, err = run(
        capsys,
        "train",
        "mlp",
        "--size",
        "tiny",
        "--steps",
        "1",
        "--device",
        "cuda",
        "--no-progress",
    )
    assert code == 2 and "CuPy" in err


@pytest.mark.parametrize("command", [["models"], ["sim", "info", "--bundled"]])
def test_a_reader_that_stops_reading_ends_the_command_quietly(command):
    """``minidtr models | head -1``: the closed pipe ends the command with the status of a
    tool its reader stopped, and no error on stderr (small outputs are flushed at the end,
    large ones while printing; both are covered)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "minidtr", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # the reader is gone before the first line
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=120) == cli.EXIT_BROKEN_PIPE, stderr
    assert stderr == ""


def test_export_events_writes_the_header_minidtr_train_writes(tmp_path):
    """README's own suggestion, ``rt.export_events(path)``: the log opens with the runtime's
    header, so explain knows the budget, the clock's unit and the score formula."""
    runtime = chain_events(2600)
    path = tmp_path / "ev.jsonl"
    runtime.export_events(str(path), model="chain")
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {**runtime.header(), "model": "chain"}
    assert first["budget"] == 2600 and first["cost"] == "flops"
    assert first["score"] == "(c + c(e*)) / (m * s)"
    text = explain(summarize(load_events(str(path))))
    assert "budget is not known" not in text and "2,600" in text


def test_a_later_batch_larger_than_the_measured_ones_is_named(capsys, tmp_path, monkeypatch):
    """The tiny Tree-LSTM's eighth batch needs more than the two measured steps' floor:
    the failure says which step, and what it needs as a fraction of the measured peak."""
    from minidtr import plots

    titles = []
    monkeypatch.setattr(plots, "memory_timeline", lambda *a, title, **k: titles.append(title))
    tiny_tree = ("train", "treelstm", "--size", "tiny", "--steps", "10", "--ratio", "0.49")
    events, plot = tmp_path / "ev.jsonl", str(tmp_path / "p.png")
    code, out, err = run(
        capsys, *tiny_tree, "--no-progress", "--events", str(events), "--plot", plot
    )
    assert code == 1 and "budget is too small" in err and len(err.strip().splitlines()) == 1
    # what the seven steps did is kept: the summary, and the event log, saying how it ended
    assert "stopped by a BudgetError after 7 of 10 steps" in out
    # its counts are of the run up to the error, which stopped step 7 (of the log's marks)
    assert "run to the error, so include the part of step 7 (counting from 0)" in out
    assert titles == ["treelstm (tiny), 7 of 10 steps (stopped by a BudgetError)"]
    assert "(end: not measured, the run stopped)" in out
    header = json.loads(events.read_text().splitlines()[0])
    assert header["stopped_by"] == "BudgetError" and header["steps_done"] == 7
    assert "(step 7, counting from 0 as the event log and the plot do, needs more than " in err
    assert "the first 2 steps" in err
    logged = [json.loads(line) for line in events.read_text().splitlines()[1:]]
    assert [e["step"] for e in logged if e["event"] == "step"][-1] == 7  # the step stopped
    assert "at least 55,356 bytes, 0.492 of that peak" in err and "--measure-steps" in err
    # measured on all ten steps, the same ratio is of a larger peak, above every floor
    code, out, err = run(capsys, *tiny_tree, "--measure-steps", "10", "--no-progress")
    assert code == 0, err
    assert "= 0.49 x unbounded peak 112.1 KiB" in out and "floor: 54.1 KiB" in out
    assert "--seed 0 --measure-steps 10 (2,506 parameters)" in out


def test_a_budget_error_before_any_op_keeps_its_message_with_a_plot(capsys, tmp_path):
    plot, trace = tmp_path / "p.png", tmp_path / "t.log"
    argv = ["train", "mlp", "--size", "tiny", "--budget", "10K", "--no-progress"]
    code, out, err = run(capsys, *argv, "--plot", str(plot), "--trace", str(trace))
    assert code == 1 and "the budget is too small to train mlp" in err
    assert f"memory timeline: not written to {plot} (no op ran)" in out
    assert f"trace: not written to {trace} (the run stopped)" in out
    assert not plot.exists()


def test_measure_steps_below_one_is_refused(capsys):
    from minidtr.training import ConfigError, TrainConfig, measure_unbounded, train

    code, _, err = run(capsys, "train", "mlp", "--measure-steps", "0")
    assert code == 2 and "--measure-steps: must be at least 1" in err
    config = TrainConfig("mlp", size="tiny", steps=1, ratio=0.5, measure_steps=0)
    with pytest.raises(ConfigError, match="measure_steps must be >= 1, got 0"):
        train(config)
    with pytest.raises(ConfigError, match="at least one step, got 0"):
        measure_unbounded(config)
