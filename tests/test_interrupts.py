"""Ctrl-C keeps what was done: a real SIGINT to ``minidtr train --events`` leaves the
event log of the steps done (marked as interrupted, readable by ``minidtr explain``) and
their summary; to ``--find-budget``, the table of the probes that finished. Each exits
with 130 and one line on stderr, within seconds."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from minidtr import cli
from minidtr.testing import isolated_allocator

# The command, with a side channel: a line in MARKS after every finished step (or probe),
# so the test interrupts once there is something to keep. Nothing else changes.
TRAIN = """
import sys
from minidtr import cli, cli_report

marks = sys.argv.pop(1)
on_loss = cli_report.Progress.on_loss

def counted(self, bar, loss):
    on_loss(self, bar, loss)
    with open(marks, "a") as f:
        f.write("step\\n")

cli_report.Progress.on_loss = counted
sys.exit(cli.main())
"""

# --find-budget whose third probe trains until Ctrl-C (at 0.9, a million steps), so two
# probes have finished when it is interrupted.
FIND_BUDGET = """
import dataclasses, sys
from minidtr import budget_search, cli

marks = sys.argv.pop(1)
probe = budget_search.probe
finished = []

def counted(config, ratio, unbounded):
    if len(finished) == 2:
        config, ratio = dataclasses.replace(config, steps=10**6), 0.9
    finished.append(probe(config, ratio, unbounded))
    with open(marks, "a") as f:
        f.write("probe\\n")
    return finished[-1]

budget_search.probe = counted
sys.exit(cli.main())
"""


def interrupt_after(code: str, argv: list[str], marks, count: int, cwd) -> tuple:
    """Run ``code`` with ``argv``, SIGINT it once ``marks`` has ``count`` lines; return
    (exit status, stdout, stderr, seconds from the SIGINT to the exit)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(marks), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if marks.exists() and len(marks.read_text().splitlines()) >= count:
            break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err, time.monotonic() - sent


def test_ctrl_c_keeps_the_event_log_and_the_summary_of_the_steps_done(tmp_path, capsys):
    events = tmp_path / "ev.jsonl"
    argv = ["train", "mlp", "--size", "tiny", "--steps", "1000000", "--ratio", "0.9"]
    argv += ["--events", str(events), "--no-progress"]
    code, out, err, seconds = interrupt_after(TRAIN, argv, tmp_path / "marks", 3, tmp_path)
    assert code == 130, err
    assert err == "minidtr train: interrupted\n"
    assert seconds < 10, seconds
    steps = int(out.split("interrupted (Ctrl-C) after ")[1].split()[0])
    assert steps >= 3
    assert f"after {steps} of 1000000 steps" in out
    assert "peak memory" in out and "remats" in out and "(end: not measured" in out
    assert (
        f"event log: {events} (" in out and f"step marks, after {steps} steps, interrupted" in out
    )

    lines = events.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["event"] == "runtime" and header["interrupted"] is True
    assert header["steps_done"] == steps and header["model"] == "mlp"
    marks = [json.loads(line) for line in lines if '"step"' in line]
    assert len(marks) in (steps, steps + 1)  # the step Ctrl-C cut short is marked too
    with isolated_allocator():
        assert cli.main(["explain", str(events)]) == 0
    assert "interrupted=True" in capsys.readouterr().out


def test_ctrl_c_keeps_the_probes_of_find_budget(tmp_path):
    argv = ["train", "resnet", "--size", "tiny", "--steps", "2", "--find-budget"]
    code, out, err, seconds = interrupt_after(FIND_BUDGET, argv, tmp_path / "marks", 2, tmp_path)
    assert code == 130, err
    assert err == "minidtr train: interrupted\n"
    assert seconds < 10, seconds
    rows = [line.split() for line in out.splitlines()]
    probed = [row[0] for row in rows if row and row[0] in ("0.90", "0.80")]
    assert probed == ["0.90", "0.80"]
    assert "interrupted (Ctrl-C) after 2 probes, before the search ended" in out
    assert "so far the lowest ratio within 2x: 0.80" in out


@pytest.fixture
def fresh_allocator():
    with isolated_allocator() as allocator:
        yield allocator


def test_an_interrupted_train_returns_what_its_steps_did(fresh_allocator):
    from minidtr.training import TrainConfig, TrainingInterrupted, train

    def stop_after_two(bar, loss):
        stop_after_two.steps += 1
        if stop_after_two.steps == 2:
            raise KeyboardInterrupt

    stop_after_two.steps = 0
    config = TrainConfig("mlp", size="tiny", steps=5, ratio=0.9, record_events=True)
    with pytest.raises(TrainingInterrupted) as stopped:
        train(config, on_loss=stop_after_two)
    result = stopped.value.result
    assert result.interrupted and len(result.losses) == 2
    assert result.stats["peak_memory"] <= result.budget
    assert sum(e["event"] == "step" for e in result.runtime.events) == 2
    assert result.accuracy_start > 0 and result.accuracy_end != result.accuracy_end  # nan


def test_a_second_ctrl_c_while_the_log_is_written_leaves_no_cut_log(
    fresh_allocator, tmp_path, monkeypatch
):
    from minidtr import cli_train
    from minidtr.training import TrainConfig, train

    result = train(TrainConfig("mlp", size="tiny", steps=1, ratio=0.9, record_events=True))
    path = tmp_path / "ev.jsonl"

    def cut_short(target, runtime, **header):
        with open(target, "w") as f:
            f.write('{"event": "runtime"}\n{"event": "al')
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_train, "write_event_log", cut_short)
    with pytest.raises(KeyboardInterrupt):
        cli_train.write_events(result, str(path))
    assert not path.exists()


def test_ctrl_c_keeps_the_probes_of_sim_frontier(tmp_path, capsys, monkeypatch):
    """The third replay is interrupted: the two probes before it are printed."""
    from minidtr.sim import frontier as frontier_module
    from minidtr.sim.cli import main as sim_main
    from minidtr.sim.experiments import chain_trace
    from minidtr.sim.trace import write_log

    write_log(chain_trace(40), tmp_path / "chain.log")
    replays = []
    simulate = frontier_module.simulate

    def interrupted_third(*args, **kwargs):
        replays.append(None)
        if len(replays) == 3:
            raise KeyboardInterrupt
        return simulate(*args, **kwargs)

    monkeypatch.setattr(frontier_module, "simulate", interrupted_third)
    assert sim_main(["frontier", str(tmp_path / "chain.log")]) == 130
    out, err = capsys.readouterr()
    assert err == "minidtr sim frontier: interrupted\n"
    assert [line.split()[0] for line in out.splitlines()[2:4]] == ["1.000", "0.900"]
    assert out.splitlines()[-1] == (
        "interrupted (Ctrl-C) after 2 probes, before the search ended; "
        "so far the lowest ratio within 2x: 0.900"
    )
