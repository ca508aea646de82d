"""``minidtr animate``: the classic animation of checkpointing drawn from real event logs.
One frame per event shown (the longest panel's, side by side), a GIF that reads back,
nodes coloured by what each event did, and one-line errors for logs that cannot be
animated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minidtr.animate import (
    CONSTANT,
    EVICTED,
    FREED,
    RECOMPUTING,
    RESIDENT,
    WAITING,
    AnimationError,
    Panel,
    animate,
    places,
    shown_events,
    states,
)
from minidtr.course.chain import chain_logs, run_chain
from minidtr.event_log import load_events

ROOT = Path(__file__).resolve().parents[1]
PIL = pytest.importorskip("PIL.Image", reason="matplotlib writes GIFs with Pillow")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """The three runs of a four-layer chain: no budget, checkpoints every 2, DTR."""
    return chain_logs(tmp_path_factory.mktemp("chain"), layers=4, segment=2)


def frames_of(path: Path) -> int:
    with PIL.open(path) as image:
        return image.n_frames


def test_one_frame_per_event_of_a_log(logs, tmp_path):
    path = logs[0].path
    shown = shown_events(load_events(str(path)))
    out = tmp_path / "plain.gif"
    assert animate([str(path)], str(out)) == len(shown)
    assert frames_of(out) == len(shown)


def test_side_by_side_the_longest_log_sets_the_frames(logs, tmp_path):
    paths = [str(run.path) for run in logs]
    out = tmp_path / "three.gif"
    frames = animate(paths, str(out), titles=[run.title for run in logs])
    assert frames == max(len(shown_events(load_events(p))) for p in paths)
    assert frames_of(out) == frames
    with PIL.open(out) as image:
        assert image.size[0] > 2 * image.size[1]  # three panels in a row


def test_start_and_limit_choose_the_events_shown(logs, tmp_path):
    path = str(logs[0].path)
    out = tmp_path / "part.gif"
    assert animate([path], str(out), start=3, limit=5) == 5 == frames_of(out)


def test_an_interrupted_animation_leaves_the_gif_before_it(logs, tmp_path, monkeypatch):
    """matplotlib's writer saves the frames drawn so far when interrupted: a Ctrl-C
    replaced a complete GIF with two frames."""
    from matplotlib.animation import PillowWriter

    path, out = str(logs[0].path), tmp_path / "whole.gif"
    animate([path], str(out), limit=4)
    before = out.read_bytes()
    grab = PillowWriter.grab_frame
    grabbed = []

    def interrupted(self, **kwargs):
        if len(grabbed) == 2:
            raise KeyboardInterrupt
        grabbed.append(1)
        grab(self, **kwargs)

    monkeypatch.setattr(PillowWriter, "grab_frame", interrupted)
    with pytest.raises(KeyboardInterrupt):
        animate([path], str(out), limit=8)
    assert out.read_bytes() == before and frames_of(out) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["whole.gif"]  # no partial file left
    assert out.stat().st_mode & 0o777 == 0o666 & ~current_umask()  # as any file (not 0600)


def current_umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_three_runs_are_what_the_course_says():
    plain, _ = run_chain(8)
    checkpointed, _ = run_chain(8, segment=3)
    budget = checkpointed.stats()["peak_memory"]
    dtr, _ = run_chain(8, budget=budget)
    assert budget < 0.7 * plain.stats()["peak_memory"]
    assert plain.stats()["remats"] == 0 < checkpointed.stats()["remats"]
    reasons = {e.get("reason") for e in checkpointed.events if e["event"] == "evict"}
    assert "checkpointing" in reasons
    assert dtr.stats()["peak_memory"] <= budget and dtr.stats()["remats"] > 0


def _event(kind: str, storage: int, op: str = "tanh", **extra) -> dict:
    return {"event": kind, "id": storage, "op": op, "nbytes": 8, "clock": 0.0, "memory": 8, **extra}


def test_each_event_colours_its_node():
    events = [
        _event("alloc", 1, "constant"),
        _event("alloc", 2, cost=1.0),
        _event("evict", 2, reason="budget"),
        _event("remat", 2, cost=1.0),
        _event("alloc", 3, "activation_grad", cost=1.0),
        _event("evict", 2, reason="dead"),
    ]
    panel = Panel("t", events, places(events), None, 8)
    seen = [now for now, _ in states(panel)]
    assert seen[0] == [CONSTANT, WAITING, WAITING]
    assert seen[2][1] == EVICTED and seen[3][1] == RECOMPUTING and seen[4][1] == RESIDENT
    assert seen[5] == [CONSTANT, FREED, RESIDENT]


def test_the_backward_pass_is_drawn_below_right_to_left():
    events = [_event("alloc", i, "tanh", cost=1.0) for i in (1, 2, 3)] + [
        _event("alloc", i, "activation_grad", cost=1.0) for i in (4, 5)
    ]
    where = places(events)
    assert [where[i][1] for i in (1, 2, 3)] == [0, 0, 0]
    assert where[4][1] < 0 and where[4][1] == where[5][1]
    assert where[4][0] > where[5][0]  # the first gradient on the right


def test_names_from_a_log_and_its_file_are_drawn_as_text(tmp_path):
    """A ``$`` in an op's name or the log's file name was parsed as mathtext (a crash on
    ``$\\frac{a}{$``, ``x^2`` drawn as math) and an ESC was drawn raw."""
    import matplotlib.pyplot as plt

    from minidtr.animate import _figure, load_panels

    path = tmp_path / "$x^2$\x1b[31m.jsonl"
    events = [_event("alloc", 1, "$\\frac{a}{$", cost=1.0), _event("alloc", 2, "$y^2$", cost=1.0)]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert animate([str(path)], str(tmp_path / "out.gif")) == 2
    figure, drawers = _figure(load_panels([str(path)]), plt)
    try:
        ax = figure.axes[0]
        assert ax.get_title() == str(tmp_path / "$x^2$\\x1b[31m.jsonl")
        (caption,) = ax.texts
        drawers[0]([RESIDENT, RESIDENT], events[1], 1, 2)
        assert "#2 $y^2$, memory" in caption.get_text()
        assert not ax.title.get_parse_math() and not caption.get_parse_math()
    finally:
        plt.close(figure)


def test_nothing_to_draw_is_one_line_and_empty_tensors_draw(tmp_path):
    """Only frees after --start: 'min() arg is an empty sequence'; every event of memory 0
    and no budget: ZeroDivisionError."""
    frees = [_event("alloc", 1, cost=1.0), _event("evict", 1, reason="dead")]
    (tmp_path / "ev.jsonl").write_text("".join(json.dumps(e) + "\n" for e in frees))
    with pytest.raises(AnimationError, match="ev.jsonl: no allocation to draw among its 1 "):
        animate([str(tmp_path / "ev.jsonl")], str(tmp_path / "out.gif"), start=1)
    empty = [{**_event("alloc", i, cost=1.0), "nbytes": 0, "memory": 0} for i in (1, 2)]
    (tmp_path / "zero.jsonl").write_text("".join(json.dumps(e) + "\n" for e in empty))
    assert animate([str(tmp_path / "zero.jsonl")], str(tmp_path / "zero.gif")) == 2


def animate_command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "minidtr", "animate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_the_command_writes_the_gif_and_says_how_many_frames(logs, tmp_path):
    paths = [str(run.path) for run in logs]
    done = animate_command(*paths, "out.gif", "--titles", "a,b,c", "--limit", "6", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("animation: out.gif (6 frames, one per event;")
    assert frames_of(tmp_path / "out.gif") == 6


@pytest.mark.parametrize(
    "content, says",
    [
        ("not json\n", "ev.jsonl:1:"),
        (json.dumps({"event": "alloc", "id": 1}) + "\n", "lacks the field"),
        (json.dumps({"event": "runtime"}) + "\n", "holds only its runtime header"),
        ("", "is empty"),
    ],
)
def test_a_bad_log_is_one_line_and_exit_1(tmp_path, content, says):
    (tmp_path / "ev.jsonl").write_text(content)
    done = animate_command("ev.jsonl", "out.gif", cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minidtr animate: ") and says in lines[0]
    assert not (tmp_path / "out.gif").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (("ev.jsonl", "out.png"), "the last argument is the GIF to write"),
        (("out.gif",), "the following arguments are required: OUT.gif"),
        (("ev.jsonl", "a.gif", "ev.jsonl", "b.gif"), "a.gif: only the last argument is a GIF"),
        (("missing.jsonl", "out.gif"), "missing.jsonl: no such file"),
        (("ev.jsonl", "ev.jsonl.gif", "--titles", "a,b"), "--titles: 2 titles for 1 logs"),
        (("ev.jsonl", "out.gif", "--fps", "0"), "--fps"),
    ],
)
def test_usage_errors_exit_2(logs, tmp_path, args, says):
    (tmp_path / "ev.jsonl").write_text(logs[0].path.read_text())
    done = animate_command(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert says in done.stderr


def test_the_usage_says_several_logs_then_one_gif(capsys):
    """It read 'EVENTS.jsonl ... OUT.gif [EVENTS.jsonl ... OUT.gif ...]', as if pairs of
    logs and GIFs repeated."""
    from minidtr import cli

    with pytest.raises(SystemExit):
        cli.main(["animate", "--help"])
    usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
    assert usage.endswith("EVENTS.jsonl [EVENTS.jsonl ...] OUT.gif")
