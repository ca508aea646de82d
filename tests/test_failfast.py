"""Failing fast and clearly: the thrash guard, argument and file checks, exit statuses,
Ctrl-C, one count of rematerializations everywhere, the demo's determinism."""

import gc
import gzip
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import minidtr as md
from minidtr import cli, sim
from minidtr.explain import explain, load_events, summarize, write_event_log
from minidtr.runtime import deferred_interrupts, guard
from minidtr.runtime.errors import BudgetError, PlacementError, ThrashError
from minidtr.runtime.runtime import DEFAULT_MAX_SLOWDOWN, DEFAULT_MAX_WALL_SLOWDOWN
from minidtr.runtime.storage import Storage
from minidtr.sim.experiments import chain_trace
from minidtr.testing import isolated_allocator


@pytest.fixture(autouse=True)
def fresh_allocator():
    with isolated_allocator() as allocator:
        yield allocator


def run(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def program():
    """Ten layer-norm + matmul + tanh layers, forward and backward: layer_norm has three
    outputs, so one of its replays can refill several storages."""
    rng = np.random.default_rng(0)
    w = md.tensor(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, requires_grad=True)
    g = md.tensor(np.ones(16, np.float32), requires_grad=True)
    h = md.tensor(rng.standard_normal((8, 16)).astype(np.float32))
    for _ in range(10):
        h = md.tanh(md.layer_norm(h, g, None) @ w)
    md.sum(h).backward()
    return w.grad.numpy()


def unbounded_peak() -> int:
    runtime = md.Runtime(cost="flops")
    with runtime:
        program()
    return runtime.stats()["peak_memory"]


def allocator_is_consistent(allocator) -> None:
    """No runtime left pushed, nothing locked, and the counted memory is exactly the
    bytes of the resident storages."""
    assert len(allocator.runtimes) == 1, allocator.runtimes
    gc.collect()
    storages = [o for o in gc.get_objects() if isinstance(o, Storage) and o.allocator is allocator]
    assert not [s for s in storages if s.locks], "storages left locked"
    assert allocator.memory == sum(s.nbytes for s in storages if s.buffer is not None)
    assert not allocator.interrupt_requested


# ---- the thrash guard -----------------------------------------------------------------


def test_the_thrash_guard_is_on_by_default_and_can_be_disabled():
    runtime = md.Runtime(budget=10**6)
    assert runtime.max_slowdown == DEFAULT_MAX_SLOWDOWN == 4.0
    assert runtime.max_wall_slowdown == DEFAULT_MAX_WALL_SLOWDOWN == 10.0
    off = md.Runtime(budget=10**6, max_slowdown=None, max_wall_slowdown=None)
    assert off.max_slowdown is None and off.max_wall_slowdown is None
    parse = cli.build_parser().parse_args
    assert cli.max_slowdown(parse(["train", "mlp"])) == DEFAULT_MAX_SLOWDOWN
    assert cli.max_slowdown(parse(["train", "mlp", "--find-budget"])) == 2.0
    assert cli.max_slowdown(parse(["train", "mlp", "--max-slowdown", "none"])) is None
    assert (
        cli.build_parser().parse_args(["train", "mlp", "--max-slowdown", "none"]).max_slowdown
        is None
    )


@pytest.mark.parametrize("value", [1, 1.0, 0, -1, 0.5, math.nan])
def test_slowdown_limits_must_be_above_one(value):
    with pytest.raises(ValueError, match="max_slowdown must be > 1"):
        md.Runtime(max_slowdown=value)
    with pytest.raises(ValueError, match="max_wall_slowdown must be > 1"):
        md.Runtime(max_wall_slowdown=value)


def test_slowdown_limits_must_be_numbers():
    with pytest.raises(TypeError, match="max_slowdown"):
        md.Runtime(max_slowdown="2")
    with pytest.raises(TypeError, match="max_slowdown"):
        md.Runtime(max_slowdown=True)


def budgeted(runtime: md.Runtime):
    """``program()`` under ``runtime`` on a fresh allocator (so that no garbage of an
    earlier run is counted): its result and the runtime's stats."""
    gc.collect()
    with isolated_allocator(), runtime:
        return program(), runtime.stats()


def test_max_slowdown_is_honoured_exactly(replay_slowdowns):
    """The guard stops a run before the rematerialization that would take its slowdown so
    far past the limit: at the limit the run completes, a hair below it stops, on every
    remat (not after the first 100)."""
    budget = int(0.6 * unbounded_peak())
    seen = replay_slowdowns
    expected, stats = budgeted(md.Runtime(budget=budget, cost="flops", max_slowdown=None))
    worst = max(seen)
    assert worst >= stats["slowdown"] > 1.05 and 0 < stats["remats"] < 100
    got, _ = budgeted(md.Runtime(budget=budget, cost="flops", max_slowdown=worst))
    np.testing.assert_array_equal(got, expected)
    limit = worst * (1 - 1e-9)
    tight = md.Runtime(budget=budget, cost="flops", max_slowdown=limit)
    with pytest.raises(md.ThrashError) as info:
        budgeted(tight)
    assert tight.stats_.slowdown <= limit
    assert info.value.slowdown == pytest.approx(worst) and info.value.limit == limit
    assert not info.value.wall
    assert "max_slowdown" in str(info.value) and "raise it" in str(info.value)


def program_then_more_compute():
    """``program()``, then twenty matmuls that recompute nothing: the slowdown so far is
    highest in the middle (during ``program``'s backward) and lower at the end."""
    out = program()
    x = md.tensor(np.ones((8, 16), np.float32))
    w = md.tensor(np.ones((16, 16), np.float32))
    for _ in range(20):
        x @ w
    return out


def test_a_marked_step_is_guarded_against_its_expected_compute(replay_slowdowns):
    """After ``mark_step(expected_cost=E)`` the guard measures recomputation against the
    compute expected by the end of the step: a run whose slowdown so far passes the limit
    only mid-step completes (bit-identical, its slowdown within the limit), where the
    unmarked run stops; a step that computes less than expected is caught at exit."""
    unbounded = md.Runtime(cost="flops")
    with unbounded:
        program_then_more_compute()
    step_cost = unbounded.stats_.compute_cost
    budget = int(0.6 * unbounded.stats()["peak_memory"])
    seen = replay_slowdowns

    def run(limit, expected_cost=None):
        gc.collect()
        runtime = md.Runtime(budget=budget, cost="flops", max_slowdown=limit)
        with isolated_allocator(), runtime:
            if expected_cost is not None:
                runtime.mark_step(expected_cost=expected_cost)
            return program_then_more_compute(), runtime.stats()

    expected, stats = run(None)
    worst, final = max(seen), stats["slowdown"]
    assert worst > final + 0.05 > 1.05
    limit = (worst + final) / 2
    with pytest.raises(md.ThrashError, match="recomputing"):
        run(limit)
    got, guarded = run(limit, expected_cost=step_cost)
    np.testing.assert_array_equal(got, expected)
    assert guarded["slowdown"] == final <= limit
    # expecting far more compute than the step does: the exit check stops it
    with pytest.raises(md.ThrashError, match="computed less than expected") as info:
        run((1 + final) / 2, expected_cost=10 * step_cost)
    assert info.value.slowdown == pytest.approx(final)


def test_mark_step_expects_the_previous_steps_compute(fresh_allocator):
    runtime = md.Runtime(cost="flops")
    x = md.tensor(np.ones((8, 16), np.float32))
    w = md.tensor(np.ones((16, 16), np.float32))
    with runtime:
        runtime.mark_step()
        assert runtime.expected_compute == 0.0  # the first mark knows nothing
        x @ w
        one = runtime.stats_.compute_cost
        runtime.mark_step()
        assert runtime.expected_compute == 2 * one
        x @ w
        x @ w
        runtime.mark_step(expected_cost=5.0)
        assert runtime.expected_compute == 3 * one + 5.0
        runtime.mark_step()
        assert runtime.expected_compute == 3 * one  # the step before computed nothing


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, "1", True])
def test_mark_step_checks_the_expected_cost(value):
    runtime = md.Runtime()
    with pytest.raises(ValueError, match="expected_cost must be a finite number >= 0"):
        runtime.mark_step(expected_cost=value)
    runtime.mark_step(expected_cost=np.float32(3.0))
    assert runtime.expected_compute == runtime.stats_.compute_cost + 3.0


def test_the_wall_clock_guard_sees_eviction_work(monkeypatch):
    budget = int(0.6 * unbounded_peak())
    # judge from the start, and call any eviction work at all too much
    monkeypatch.setattr(guard, "WALL_GUARD_AFTER", 0.0)
    runtime = md.Runtime(budget=budget, cost="flops", max_slowdown=None, max_wall_slowdown=1.000001)
    with pytest.raises(md.ThrashError) as info:
        budgeted(runtime)
    assert info.value.wall and "max_wall_slowdown" in str(info.value)
    stats = runtime.stats()
    assert 0 < stats["search_time"] <= stats["overhead_time"] <= stats["wall_time"]
    # the default guard judges only after WALL_GUARD_AFTER seconds: the same program ends
    monkeypatch.undo()
    calm = md.Runtime(budget=budget, cost="flops", max_slowdown=None)
    _, s = budgeted(calm)
    assert 0 < s["overhead_time"] <= s["wall_time"] and calm.wall_slowdown() >= 1.0


def test_the_wall_clock_guard_names_a_cheaper_heuristic_when_searching_is_the_cost(monkeypatch):
    """h_DTR's exact e* over a long evicted chain makes decisions slow (heuristics.md); when
    searching is most of the eviction work, the error says which heuristic costs less."""
    from minidtr.testing.programs import tanh_chain, unit_cost

    monkeypatch.setattr(guard, "WALL_GUARD_AFTER", 0.0)
    messages = {}
    for heuristic in ("dtr", "dtr_eq"):
        with isolated_allocator():
            runtime = md.Runtime(
                budget=10 * 8, heuristic=heuristic, cost=unit_cost, max_wall_slowdown=1.000001
            )
            with pytest.raises(md.ThrashError) as info, runtime:
                tanh_chain(200)()
        stats = runtime.stats()
        messages[heuristic] = (str(info.value), 2 * stats["search_time"] > stats["overhead_time"])
    text, searching = messages["dtr"]
    assert ("heuristic='dtr_eq'" in text) == searching
    assert "heuristic='dtr_eq'" not in messages["dtr_eq"][0]  # already the cheap one


def test_a_thrash_error_leaves_the_allocator_consistent(fresh_allocator):
    peak = unbounded_peak()
    runtime = md.Runtime(budget=int(0.6 * peak), cost="flops", max_slowdown=1.0001)
    with pytest.raises(md.ThrashError), runtime:
        program()
    allocator_is_consistent(fresh_allocator)
    program()  # the runtime stays usable, unbounded


def thrash_unguarded(length: int = 400) -> tuple[md.Runtime, list[md.Tensor]]:
    """A tanh chain of ``length`` read backwards under a tight budget with both guards
    off: it recomputes far past 4x. The runtime and the chain (many of it evicted)."""
    x = md.tensor(np.ones(256, np.float32))
    inner = md.Runtime(
        budget=10_000, heuristic="lru", cost="flops", max_slowdown=None, max_wall_slowdown=None
    )
    with inner:
        chain = [x]
        for _ in range(length):
            chain.append(md.tanh(chain[-1]))
        for i in range(length - 1, 0, -40):
            chain[i].numpy()
    return inner, chain


def test_an_outer_runtime_does_not_judge_an_inner_ones_recomputation():
    """After a budgeted run with its guards off recomputed 5.5x, the runtime around it
    (here the default one, max_slowdown=4) refused every recomputation: it judged the
    inner run's remat cost, which Stats.add had given it. Its stats still count it."""
    outer = md.current_runtime()
    inner, chain = thrash_unguarded()
    assert inner.stats()["slowdown"] > 4 and outer.max_slowdown == 4
    assert outer.stats()["slowdown"] == pytest.approx(inner.stats()["slowdown"])
    evicted = [h for h in chain if not h.is_resident]
    assert evicted
    for h in evicted:
        h.numpy()
    assert outer.stats()["remats"] > inner.stats()["remats"]


def test_an_outer_runtime_judges_its_own_recomputation_without_blaming_a_budget():
    """The outer guard still judges what it recomputes itself; with no budget in force the
    message does not say that the budget is too small."""
    outer = md.Runtime(cost="flops", max_slowdown=1.0001)
    with outer:
        inner, chain = thrash_unguarded()
        with pytest.raises(md.ThrashError) as info:
            for h in chain:
                h.numpy()
    text = str(info.value)
    assert info.value.budget is None and info.value.slowdown < 1.01
    assert "no budget" in text and "too small" not in text and "raise the limit" in text
    assert "The budget is too small" in str(ThrashError("tanh", 5.0, 4.0, 10_000))
    assert outer.stats_.remat_cost == inner.stats_.remat_cost > 0  # reported, not judged


def test_an_outer_runtime_does_not_judge_an_inner_ones_eviction_time(monkeypatch):
    """The wall-clock guard too: an inner runtime's eviction work (faked long here) made
    the outer one raise ThrashError at its first eviction work of its own."""
    monkeypatch.setattr(guard, "WALL_GUARD_AFTER", 0.0)
    outer = md.Runtime(cost="flops", max_slowdown=None, max_wall_slowdown=2.0)
    with outer:
        inner, chain = thrash_unguarded()
        with inner:
            inner.stats_.overhead_time += 1000.0
        assert outer.stats()["overhead_time"] > 1000 > outer.wall_time()
        evicted = [h for h in chain if not h.is_resident]
        evicted[0].numpy()
        outer.stats_.overhead_time += 1000.0  # its own work is judged still
        with pytest.raises(md.ThrashError) as info:
            evicted[-1].numpy()
    assert info.value.wall and "1000" in str(info.value) and "too small" not in str(info.value)


# ---- budgets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "budget, error, fragment",
    [
        (math.nan, ValueError, "finite"),
        (math.inf, ValueError, "finite"),
        (-1, ValueError, ">= 0"),
        (1e99, ValueError, "at most"),
        (2**63, ValueError, "at most"),
        ("abc", TypeError, "a number of bytes"),
        (True, TypeError, "a number of bytes"),
        ([1000], TypeError, "a number of bytes"),
    ],
)
def test_a_budget_must_be_a_sane_number_of_bytes(budget, error, fragment):
    with pytest.raises(error, match=fragment):
        md.Runtime(budget=budget)
    runtime = md.Runtime(budget=None)
    with pytest.raises(error, match=fragment):
        runtime.budget = budget


def test_a_fractional_budget_is_rounded_down():
    assert md.Runtime(budget=1500.7).budget == 1500
    assert md.Runtime(budget=np.int64(2048)).budget == 2048
    assert isinstance(md.Runtime(budget=np.float64(10.0)).budget, int)


# ---- exit statuses and one-line usage errors ---------------------------------------------------


BAD_ARGUMENTS = [
    ["train", "mlp", "--batch", "0"],
    ["train", "mlp", "--batch", "-3"],
    ["train", "mlp", "--batch", "many"],
    ["train", "mlp", "--heuristic", "nope"],
    ["train", "mlp", "--seed", "-1"],
    ["train", "mlp", "--steps", "0"],
    ["train", "mlp", "--steps", "1.5"],
    ["train", "mlp", "--budget", "inf"],
    ["train", "mlp", "--budget", "1e99"],
    ["train", "mlp", "--budget", "nan"],
    ["train", "mlp", "--budget", "-5M"],
    ["train", "mlp", "--budget", "lots"],
    ["train", "mlp", "--ratio", "0"],
    ["train", "mlp", "--ratio", "1.5"],
    ["train", "mlp", "--ratio", "nan"],
    ["train", "mlp", "--ratio", "abc"],
    ["train", "mlp", "--ratio", "0.5", "--budget", "1M"],
    ["train", "mlp", "--max-slowdown", "1"],
    ["train", "mlp", "--max-slowdown", "0"],
    ["train", "mlp", "--max-slowdown", "-1"],
    ["train", "mlp", "--max-slowdown", "nan"],
    ["train", "mlp", "--max-wall-slowdown", "0.5"],
    ["train", "mlp", "--dealloc", "never"],
    ["train", "mlp", "--cost", "money"],
    ["train", "mlp", "--size", "huge"],
    ["train", "vgg"],
    ["train"],
    ["train", "mlp", "--events", "/nonexistent/ev.jsonl"],
    ["train", "mlp", "--trace", "/nonexistent/t.log"],
    ["train", "mlp", "--plot", "/nonexistent/m.png"],
    ["train", "mlp", "--events", "."],
    ["train", "mlp", "--size", "tiny", "--batch", "100000"],
    ["demo", "--plot", "/nonexistent/m.png"],
    ["demo", "extra"],
    ["explain"],
    ["explain", "/nonexistent/ev.jsonl"],
    ["explain", "ev.jsonl", "--top", "-1"],
    ["explain", "ev.jsonl", "--top", "0"],
    ["plot", "/nonexistent/ev.jsonl", "out.png"],
    ["plot", "ev.jsonl", "/nonexistent/out.png"],
    ["plot", "ev.jsonl", "out.png", "--budget", "inf"],
    ["models", "extra"],
    ["nope"],
    [],
    ["sim"],
    ["sim", "/nonexistent/t.log"],
    ["sim", "t.log", "--ratios", "0"],
    ["sim", "t.log", "--ratios", "1.5"],
    ["sim", "t.log", "--ratios", "x"],
    ["sim", "t.log", "--heuristics", "nope"],
    ["sim", "t.log", "--thrash", "0.5"],
    ["sim", "t.log", "--jobs", "0"],
    ["sim", "t.log", "--min-size", "1"],
    ["sim", "t.log", "--csv", "/nonexistent/r.csv"],
    ["sim", "t.log", "--plot", "/nonexistent/r.png"],
    ["sim", "info"],
    ["sim", "info", "/nonexistent/t.log"],
    ["sim", "frontier", "/nonexistent/t.log"],
    ["sim", "frontier", "t.log", "--max-slowdown", "1"],
    ["sim", "frontier", "t.log", "--step", "0"],
    ["sim", "optimal", "t.log", "--time-limit", "0"],
    ["sim", "bound", "t.log", "--ratios", "1.5"],
    ["sim", "bound", "/nonexistent/t.log"],
    ["sim", "bound", "t.log", "--block", "0"],
    ["sim", "bound", "t.log", "--time-limit", "-1"],
    ["sim", "sqrt-n", "--n", "0"],
    ["sim", "sqrt-n", "--n", "2.5"],
    ["sim", "adversary", "--budget", "2"],
    ["sim", "adversary", "--paths", "0"],
]


@pytest.mark.parametrize("argv", BAD_ARGUMENTS, ids=" ".join)
def test_every_usage_error_exits_2_with_one_line(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    runtime = md.Runtime(record_events=True)
    with runtime:
        md.sum(md.tensor(np.ones(4, np.float32)) * 2.0)
    write_event_log("ev.jsonl", runtime)
    sim.write_log(chain_trace(4), "t.log")
    started = time.perf_counter()
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, out, err)
    assert one_line(err).startswith("minidtr")
    assert out == ""
    assert time.perf_counter() - started < 30  # found before any work


@pytest.mark.parametrize(
    "argv", [["train", "mlp", "--bogus"], ["demo", "extra"], ["explain", "ev.jsonl", "-x"]]
)
def test_an_unknown_argument_names_its_subcommand(capsys, argv):
    """The subcommand's --help lists its options; the top-level one does not."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    unknown = " ".join(argv[2:] if argv[0] != "demo" else argv[1:])
    assert one_line(err) == (
        f"minidtr {argv[0]}: unrecognized arguments: {unknown} (see minidtr {argv[0]} --help)"
    )


def test_an_infeasible_budget_exits_1_with_one_line(capsys):
    code, out, err = run(
        capsys, "train", "mlp", "--size", "tiny", "--steps", "2", "--budget", "20K", "--no-progress"
    )
    assert code == 1
    assert "budget is too small" in one_line(err) and "Raise the budget" in err


def test_max_slowdown_stops_the_cli_run_exactly(capsys):
    argv = ["train", "resnet", "--size", "tiny", "--steps", "2", "--ratio", "0.8"]
    code, out, err = run(capsys, *argv, "--max-slowdown", "none", "--no-progress")
    assert code == 0, err
    slowdown = float(out.split("slowdown")[1].split("x")[0])
    assert slowdown > 1.01
    limit = 1 + (slowdown - 1) / 2
    code, out, err = run(capsys, *argv, "--max-slowdown", f"{limit}", "--no-progress")
    assert code == 1 and "stopped by a ThrashError after 1 of 2 steps" in out  # what it did
    line = one_line(err)
    assert "thrashing" in line and "--max-slowdown" in line


# ---- Ctrl-C ------------------------------------------------------------------------------------


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path):
    """SIGINT to a training run in a subprocess, once its imports are done (they can take
    seconds on a loaded machine) and it had time to start training."""
    code = "import sys; from minidtr import cli; print('ready', flush=True); sys.exit(cli.main())"
    argv = [sys.executable, "-c", code, "train", "mlp", "--size", "tiny"]
    argv += ["--steps", "1000000", "--ratio", "0.9", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    assert process.stdout.readline() == "ready\n", process.communicate()
    time.sleep(3)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert one_line(err) == "minidtr train: interrupted"
    assert out == "" or out.splitlines()[1].startswith("interrupted (Ctrl-C) after")  # the summary


def test_an_interrupt_between_steps_leaves_the_runtime_clean(fresh_allocator):
    from minidtr.training import TrainConfig, train

    def stop(bar, loss):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig("mlp", size="tiny", steps=5, ratio=0.9), on_loss=stop)
    allocator_is_consistent(fresh_allocator)


def test_ctrl_c_inside_an_op_waits_for_a_consistent_point(fresh_allocator):
    """A SIGINT while ops run under a budget: the allocator raises KeyboardInterrupt only
    at the start of an op, a remat or a search for room, so nothing is left half done."""
    peak = unbounded_peak()
    runtime = md.Runtime(budget=int(0.6 * peak), cost="flops", max_slowdown=None)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        timer.start()
        with runtime:
            deadline = time.perf_counter() + 30
            while time.perf_counter() < deadline:
                program()
    timer.join()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    allocator_is_consistent(fresh_allocator)
    program()


# ---- files that are not what they should be -----------------------------------------------


def write_cut_trace(path, lines: int) -> None:
    sim.write_log(chain_trace(20), path)
    text = path.read_text().splitlines(keepends=True)
    path.write_text("".join(text[:lines]))


@pytest.mark.parametrize("command", [[], ["info"]])
def test_sim_on_bad_files_says_which_file_and_line(capsys, tmp_path, command):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    binary = tmp_path / "binary.log"
    binary.write_bytes(bytes(range(128, 256)) * 8)
    cut = tmp_path / "cut.log"
    write_cut_trace(cut, 50)
    broken = tmp_path / "broken.log"
    write_cut_trace(broken, 50)
    broken.write_text(broken.read_text() + '{"INSTRUCTION": "CALL", "NA')
    for path, fragment in (
        (empty, "empty.log: empty"),
        (binary, "binary.log: cannot be read as a text log"),
        (cut, "cut.log:50: truncated"),
        (broken, "broken.log:51: not valid JSON"),
    ):
        code, out, err = run(capsys, "sim", *command, str(path))
        assert code == 1, (path, out, err)
        assert fragment in one_line(err)
        assert "1.00" not in out


def test_a_whole_recorded_trace_still_loads(tmp_path):
    path = tmp_path / "whole.log"
    write_cut_trace(path, 10**6)
    first = json.loads(path.read_text().splitlines()[0])
    assert first["ANNOTATION"] == "START" and int(first["LINES"]) == len(
        path.read_text().splitlines()
    )
    assert sim.load_log(path).ops > 0
    with open(path, "a") as f:
        f.write('{"INSTRUCTION": "RELEASE", "NAME": "x"}\n')
    with pytest.raises(sim.TraceError, match="appended"):
        sim.load_log(path)


def test_explain_on_bad_files(capsys, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    header_only = tmp_path / "header.jsonl"
    header_only.write_text('{"event": "runtime", "budget": null}\n')
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(bytes(range(128, 256)) * 8)
    trace = tmp_path / "trace.log.gz"
    with gzip.open(trace, "wt") as f:
        f.write('{"INSTRUCTION": "ANNOTATION", "ANNOTATION": "START"}\n')
    for path, fragment in (
        (empty, "is empty"),
        (header_only, "only its runtime header"),
        (binary, "binary.jsonl:1: not text"),
        (trace, "trace.log.gz: a gzip file, not an event log (a trace"),
    ):
        for command in ("explain", "plot"):
            extra = [str(tmp_path / "out.png")] if command == "plot" else []
            code, out, err = run(capsys, command, str(path), *extra)
            if command == "plot" and code == 2:
                assert "matplotlib" in err  # checked before the log is read
                continue
            assert code == 1, (command, path, out, err)
            assert fragment in one_line(err)
            if path in (empty, header_only):  # the same words for explain and plot
                assert "it records no op" in err


def test_explain_rejects_a_top_below_one():
    with pytest.raises(ValueError, match="top"):
        explain(summarize([{"event": "runtime"}]), top=-1)


# ---- one count of rematerializations ---------------------------------------------------------


def test_every_count_of_rematerializations_agrees(tmp_path):
    """A remat is one recipe replayed. layer_norm has three outputs, so its replays refill
    several storages: the event log has more remat events than there were remats, and
    explain, the runtime, the train summary and the simulator must all count replays."""
    budget = int(0.5 * unbounded_peak())
    runtime = md.Runtime(budget=budget, cost="flops", record_events=True, max_slowdown=None)
    with sim.record() as recorder, runtime:
        program()
    stats = runtime.stats()
    path = tmp_path / "ev.jsonl"
    write_event_log(str(path), runtime)
    summary = summarize(load_events(str(path)))
    assert summary.counts["remat"] > summary.remats == stats["remats"] > 0
    text = explain(summary)
    assert f"{stats['remats']:,} rematerializations (recomputed ops; they refilled" in text
    assert f"{stats['remats']:,} recomputations cost" in text
    assert summary.remat_cost == pytest.approx(stats["remat_cost"])
    replayed = sim.simulate(recorder.trace(), budget=budget, thrash=None, outputs=False)
    assert replayed.status == "ok" and replayed.remats == stats["remats"]


def test_the_train_summary_counts_what_explain_counts(capsys, tmp_path):
    events = tmp_path / "ev.jsonl"
    argv = ["train", "transformer", "--size", "tiny", "--steps", "2", "--ratio", "0.8"]
    code, out, err = run(capsys, *argv, "--events", str(events), "--no-progress")
    assert code == 0, err
    remats = int(out.split("\nremats")[1].split()[0].replace(",", ""))
    summary = summarize(load_events(str(events)))
    assert remats == summary.remats > 0
    assert summary.counts["remat"] > summary.remats  # layer norm refilled several outputs


# ---- the demo is the same on every run -----------------------------------------------------------


def wall_clock_free(text: str) -> list[str]:
    return [
        line for line in text.splitlines() if not line.startswith(("steps/s", "eviction search"))
    ]


def test_the_demo_prints_the_same_on_every_run():
    """The demo's own figures (losses, accuracy, memory, counts, costs, clocks) are the
    same on every run; only the wall-clock lines differ (on the tiny ResNet, for time)."""
    texts = []
    for _ in range(2):
        with isolated_allocator():  # as in a new process: the clock and ids from zero
            texts.append(cli.demo_report(steps=2, size="tiny", ratio=0.8)[1])
    first, second = texts
    assert "clock" in first and "Rematerializations" in first
    assert wall_clock_free(first) == wall_clock_free(second)


def test_the_budget_errors_pickle_whole():
    """A BudgetError raised in a worker process (a sweep, a pool) must reach the parent:
    unpickling one called its class with the message alone, which failed, and a
    multiprocessing pool then waited for the lost result for ever."""
    made = [
        BudgetError("add", 16, 100, 90, 0, 50, 16),
        PlacementError("matmul", 1000, 1024, None, 10, 0, 5, 0, 512, 900),
        ThrashError("tanh", 2.5, 2.0, 4096, wall=True, detail="searching 1.0 s"),
    ]
    for error in made:
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert again.__dict__ == error.__dict__
