"""The command line tried as a new user would: a heuristic the simulator knows but the
error did not list, options that would be silently ignored, outputs that would fail only
after the work. Each ends in one line, with the right exit status, before any work."""

import os
from pathlib import Path

import pytest

from minidtr import cli
from minidtr.sim.experiments import chain_trace
from minidtr.sim.trace import write_log


def run(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.log"
    write_log(chain_trace(10), path)
    return str(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["sim", "{trace}", "--heuristics", "dtr,nope"],
        ["sim", "frontier", "{trace}", "--heuristic", "nope"],
        ["sim", "optimal", "{trace}", "--heuristics", "nope"],
        ["sim", "bound", "{trace}", "--heuristics", "nope"],
        ["sim", "sqrt-n", "--heuristics", "nope"],
    ],
)
def test_an_unknown_heuristic_lists_the_trace_heuristics_too(capsys, trace_file, argv):
    argv = [a.replace("{trace}", trace_file) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    line = one_line(err)
    assert "unknown heuristic 'nope'" in line and "'dtr'" in line
    assert "'belady'" in line and "'learned'" in line
    assert line.endswith("--help)")


def test_sim_frontier_takes_the_trace_heuristics(capsys, trace_file):
    code, out, err = run(capsys, "sim", "frontier", trace_file, "--heuristic", "belady")
    assert code == 0, err
    assert "lowest ratio" in out


def test_a_sim_plot_without_matplotlib_is_refused_before_the_replays(
    capsys, trace_file, tmp_path, monkeypatch
):
    from minidtr import plots

    def missing():
        raise ImportError("plots need matplotlib: pip install 'minidtr[plots]'")

    monkeypatch.setattr(plots, "require_matplotlib", missing)
    code, out, err = run(capsys, "sim", trace_file, "--plot", str(tmp_path / "p.png"))
    assert code == 2 and out == ""
    assert "--plot: plots need matplotlib" in one_line(err)


@pytest.mark.parametrize(
    ("options", "flags"),
    [
        (["--heuristic", "lru"], "--heuristic"),
        (["--heuristic", "dtr"], "--heuristic"),  # given, even at its default
        (["--no-orphan-rebuild"], "--no-orphan-rebuild"),
        (["--max-slowdown", "3"], "--max-slowdown"),
        (["--heuristic", "lru", "--max-wall-slowdown", "9"], "--heuristic, --max-wall-slowdown"),
    ],
)
def test_eviction_settings_without_a_budget_are_refused(capsys, options, flags):
    """Unbudgeted, nothing is evicted to make room: the heuristic would never run."""
    code, out, err = run(capsys, "train", "mlp", "--size", "tiny", *options)
    assert code == 2 and out == ""
    assert one_line(err) == (
        f"minidtr train: {flags}: no effect without a budget (nothing is evicted to make "
        "room): add --budget BYTES or --ratio R (see minidtr train --help)"
    )


def test_eviction_settings_with_a_budget_or_find_budget_are_taken():
    from minidtr.cli_train import _check_eviction_settings

    parse = cli.build_parser().parse_args
    for budget in (["--ratio", "0.5"], ["--budget", "1M"], ["--find-budget"]):
        _check_eviction_settings(parse(["train", "mlp", "--heuristic", "lru", *budget]))


def test_dealloc_without_a_budget_still_acts(capsys):
    """--dealloc decides what a death frees, budget or not: ignore keeps every dead
    tensor resident, so the unbudgeted peak grows; it is not refused."""
    peaks = {}
    for policy in ("eager", "ignore"):
        argv = ["train", "mlp", "--size", "tiny", "--steps", "2", "--no-progress"]
        code, out, err = run(capsys, *argv, "--dealloc", policy)
        assert code == 0, err
        peaks[policy] = out.split("peak memory")[1].split("\n")[0].strip()
    assert peaks["eager"] != peaks["ignore"]


@pytest.mark.parametrize("option", ["--events", "--trace", "--plot"])
def test_find_budget_refuses_the_outputs_it_would_not_write(capsys, tmp_path, option):
    path = str(tmp_path / "out")
    code, out, err = run(capsys, "train", "mlp", "--find-budget", option, path)
    assert code == 2 and out == ""
    assert f"--find-budget writes no {option}" in one_line(err)


@pytest.fixture
def event_log(tmp_path):
    import minidtr as md
    from minidtr.explain import write_event_log

    runtime = md.Runtime(record_events=True)
    with runtime:
        md.sum(md.tensor([1.0, 2.0]) * 2.0)
    path = tmp_path / "ev.jsonl"
    write_event_log(str(path), runtime)
    return str(path)


def test_an_output_over_an_input_or_another_output_is_refused(
    capsys, trace_file, event_log, tmp_path
):
    """Each of these overwrote the file the command read (or had just written)."""
    trace_text, log_text = Path(trace_file).read_text(), Path(event_log).read_text()
    cases = [
        (["sim", trace_file, "--csv", trace_file], f"--csv: {trace_file} is the input"),
        (["plot", event_log, event_log], f"OUT.png: {event_log} is the input"),
        (["explain", event_log, "--html", event_log], f"--html: {event_log} is the input"),
        (
            ["train", "mlp", "--events", str(tmp_path / "a.png"), "--plot", str(tmp_path / "a")],
            "--plot: ", "is the path of --events too",
        ),
    ]  # fmt: skip
    for argv, *expected in cases:
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", argv
        assert all(part in one_line(err) for part in expected), err
    assert Path(trace_file).read_text() == trace_text
    assert Path(event_log).read_text() == log_text
    link = tmp_path / "hard.jsonl"  # another name of the input: overwrote it
    os.link(event_log, link)
    code, out, err = run(capsys, "explain", event_log, "--html", str(link))
    assert code == 2 and f"{link} is the input {event_log} too" in one_line(err)
    assert Path(event_log).read_text() == log_text


@pytest.mark.parametrize(
    "argv",
    [
        ["plot", "{log}", "{tmp}/timeline.txt"],
        ["train", "mlp", "--ratio", "0.5", "--plot", "{tmp}/timeline.doc"],
        ["sim", "{trace}", "--plot", "{tmp}/figure.csv"],
    ],
)
def test_a_plot_in_a_format_matplotlib_cannot_write_is_refused_before_the_work(
    capsys, trace_file, event_log, tmp_path, argv
):
    pytest.importorskip("matplotlib")
    fill = {"{log}": event_log, "{trace}": trace_file, "{tmp}": str(tmp_path)}
    for key, value in fill.items():
        argv = [a.replace(key, value) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "matplotlib cannot write a ." in one_line(err)
    assert not list(tmp_path.glob("timeline*")) and not list(tmp_path.glob("figure*"))


@pytest.mark.parametrize(
    "address", ["", "tcp://head", "ucx://head:8786", "inproc://x", "head", "foo://head:1"]
)
def test_a_scheduler_address_dask_cannot_take_is_a_usage_error(capsys, trace_file, address):
    code, out, err = run(capsys, "sim", trace_file, "--scheduler", address)
    assert code == 2 and out == ""
    assert one_line(err).startswith("minidtr sim: --scheduler: expected tls://HOST:PORT")


def test_sim_frontier_checks_its_tolerance_before_loading_traces(capsys):
    code, out, err = run(
        capsys, "sim", "frontier", "nowhere.log", "--step", "0.1", "--tolerance", "0.5"
    )
    assert code == 2 and out == ""
    assert "--tolerance (0.5) must be at most --step (0.1)" in one_line(err)


@pytest.mark.skipif(
    not (Path("/proc/self").is_dir() and os.access("/proc", os.W_OK | os.X_OK)),
    reason="needs /proc (Linux), writable as access() sees it (root)",
)
@pytest.mark.parametrize(
    "argv",
    [
        ("sim", "TRACE", "--ratios", "0.5", "--csv", "/proc/minidtr.csv"),
        ("train", "mlp", "--size", "tiny", "--steps", "1", "--events", "/proc/minidtr.jsonl"),
    ],
)
def test_an_output_the_checks_let_through_that_cannot_be_written_is_one_line(
    capsys, trace_file, argv
):
    """/proc looks writable to ``check_output`` (it exists, and root may write there) but
    takes no new file: the open's error is one line naming the file, not a traceback."""
    argv = [trace_file if a == "TRACE" else a for a in argv]
    code, _, err = run(capsys, *argv)
    path = argv[-1]
    assert code == 1
    assert one_line(err) == f"minidtr {argv[0]}: {path}: No such file or directory"


def test_a_repeated_ratio_or_heuristic_is_replayed_once(capsys, trace_file):
    code, out, err = run(
        capsys, "sim", trace_file, "--ratios", "0.5,0.8,0.5", "--heuristics", "dtr,lru,dtr"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[1:] == ["0.5", "0.8"], out
    assert [line.split()[0] for line in lines[2:4]] == ["dtr", "lru"], out
    assert "4 replays" in out


@pytest.mark.parametrize(
    "command", [["sim"], ["sim", "info"], ["sim", "frontier"], ["sim", "bound"]]
)
def test_a_bad_read_limit_in_the_environment_is_one_line(capsys, monkeypatch, trace_file, command):
    monkeypatch.setenv("MINIDTR_MAX_LINE", "abc")
    code, out, err = run(capsys, *command, trace_file)
    assert code == 1 and out == ""
    assert one_line(err).endswith(
        "MINIDTR_MAX_LINE: not a byte count >= 1: 'abc' (use e.g. 4M, 2G)"
    )


def test_a_plot_without_an_extension_is_checked_and_named_as_the_png_written(
    capsys, tmp_path, event_log
):
    """matplotlib adds .png: the checks saw NAME while NAME.png was written (over the input
    log, or after a whole run into a directory)."""
    pytest.importorskip("matplotlib")
    (tmp_path / "dir.png").mkdir()
    code, out, err = run(capsys, "train", "mlp", "--size", "tiny", "--plot", str(tmp_path / "dir"))
    assert code == 2 and one_line(err).endswith("dir.png is a directory (see minidtr train --help)")
    code, out, err = run(capsys, "plot", event_log, str(tmp_path / "timeline"))
    assert code == 0, err
    assert f"memory timeline: {tmp_path / 'timeline.png'}" in out
    assert (tmp_path / "timeline.png").is_file() and not (tmp_path / "timeline").exists()


@pytest.mark.parametrize("name, written", [("x.", "x.png"), ("..png", "..png.png")])
def test_a_plot_name_matplotlib_sees_no_extension_in_is_named_as_written(
    capsys, tmp_path, event_log, name, written
):
    """splitext saw an extension in 'x.' (matplotlib wrote x.png) and none in '..png'
    (printed ..png.png, matplotlib wrote ..png.png.png): the message named another file."""
    pytest.importorskip("matplotlib")
    code, out, err = run(capsys, "plot", event_log, str(tmp_path / name))
    assert code == 0, err
    assert f"memory timeline: {tmp_path / written}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([written, "ev.jsonl"])


@pytest.mark.parametrize(
    "command", [["plot", "{log}"], ["train", "mlp", "--plot"], ["demo", "--plot"]]
)
@pytest.mark.parametrize("where", ["{dir}", "{dir}/", ".", "{dir}/..."])
def test_a_plot_into_a_directory_is_refused(capsys, tmp_path, event_log, command, where):
    """A directory (or a path ending in a separator) got a hidden .png in it, named
    as another file."""
    (tmp_path / "out").mkdir()
    path = where.replace("{dir}", str(tmp_path / "out"))
    argv = [a.replace("{log}", event_log) for a in command]
    code, out, err = run(capsys, *argv, path)
    assert code == 2 and out == ""
    assert "names a directory" in one_line(err) or "is not a file name" in one_line(err)
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(
    "argv, says",
    [
        (["train", "mlp", "--ratio", "0.5", "--placement", "best"], "--placement best acts only"),
        (["sim", "{trace}", "--placement", "first"], "--placement first acts only"),
        (
            ["sim", "{trace}", "--heuristics", "window"],
            "window evicts runs of adjacent blocks: add",
        ),
        (["sim", "bound", "{trace}", "--heuristics", "window"], "only minidtr sim and minidtr tr"),
        (["sim", "frontier", "{trace}", "--heuristic", "window"], "(--fit contiguous)"),
    ],
)
def test_a_placement_without_a_contiguous_fit_is_refused(capsys, trace_file, argv, says):
    """It was ignored: a placement picks a block of the arena, which only --fit contiguous has."""
    code, out, err = run(capsys, *[a.replace("{trace}", trace_file) for a in argv])
    assert code == 2 and says in one_line(err)


@pytest.mark.parametrize("command, most", [("sqrt-n", "10,000"), ("adversary", "5,000")])
def test_an_experiment_size_past_its_limit_is_refused(capsys, command, most):
    """--n 99999999999999999999 ran until memory ran out."""
    code, out, err = run(capsys, "sim", command, "--n", "100,99999999999999999999")
    assert code == 2 and f"expected whole numbers from 1 to {most}, got 1e+20" in one_line(err)


def test_a_bundled_trace_is_an_input_no_output_may_overwrite(capsys, tmp_path):
    from minidtr.sim.bundled import bundled_traces

    shipped = str(next(iter(bundled_traces())))
    code, out, err = run(capsys, "sim", "--bundled", "--ratios", "0.5", "--csv", shipped)
    assert code == 2 and "is the input" in one_line(err)


def test_two_traces_of_one_name_are_refused(capsys, trace_file, tmp_path):
    """Results name their trace: the second's would have hidden the first's."""
    import shutil

    (tmp_path / "other").mkdir()
    twin = tmp_path / "other" / Path(trace_file).name
    shutil.copy(trace_file, twin)
    code, out, err = run(capsys, "sim", trace_file, str(twin), "--ratios", "0.5")
    assert code == 1 and "are both named" in one_line(err) and "rename one" in err


@pytest.mark.parametrize(
    "seed, says", [("-1", "at least 0, got -1"), (str(2**64), "at most 18,446,744,073,709,551,615")]
)
def test_a_seed_out_of_range_is_a_usage_error(capsys, seed, says):
    """2**64 passed the parser and failed in manual_seed, exit 1, not naming --seed."""
    code, out, err = run(capsys, "train", "mlp", "--size", "tiny", "--steps", "1", "--seed", seed)
    assert code == 2 and out == ""
    assert f"argument --seed: must be {says}" in one_line(err)
