"""The traces that ship with minidtr (minidtr/sim/traces/, linked as traces/ in a clone): they
load, replay at a few budgets, and show what the docs say they show."""

from __future__ import annotations

import gzip
import pathlib
import subprocess
import sys

import pytest

from minidtr import sim
from minidtr.sim.cli import main as sim_main
from minidtr.sim.simulator import baseline

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = ("densenet", "lstm", "mlp", "resnet", "transformer", "treelstm", "unet")


@pytest.fixture(scope="module")
def traces() -> dict[str, sim.Trace]:
    return {path.name.removesuffix(".log.gz"): sim.load_log(path) for path in sim.bundled_traces()}


def test_one_trace_per_model_small_and_compressed():
    paths = sim.bundled_traces()
    assert [p.name for p in paths] == [f"{m}.log.gz" for m in MODELS]
    assert sum(p.stat().st_size for p in paths) < 400_000
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(2) == b"\x1f\x8b"  # gzip
    assert sim.bundled_traces(["unet", "resnet"]) == [paths[6], paths[3]]
    with pytest.raises(ValueError, match="no bundled trace 'vgg'"):
        sim.bundled_traces(["vgg"])


def test_the_clone_links_traces_to_the_package_data():
    linked = sorted(p.name for p in (ROOT / "traces").glob("*.log.gz"))
    assert linked == [f"{m}.log.gz" for m in MODELS]


@pytest.mark.parametrize("model", MODELS)
def test_replays_at_a_few_ratios(traces, model):
    trace = traces[model]
    assert trace.name == model and trace.ops > 30
    unbounded = baseline(trace)
    full = sim.simulate(trace, ratio=1.0)
    assert full.status == "ok" and full.remats == 0 and full.slowdown == 1.0
    assert full.peak_memory == unbounded.peak_memory
    roomy = sim.simulate(trace, ratio=0.9)
    assert roomy.status == "ok" and 1.0 <= roomy.slowdown < 2.0
    assert roomy.peak_memory <= roomy.budget
    if model != "treelstm":  # its thousands of tiny ops take long to exhaust a budget
        floor = max(unbounded.constant_floor, unbounded.bottleneck) / unbounded.peak_memory
        below = sim.simulate(trace, ratio=0.95 * floor)  # no policy can finish below a floor
        assert below.status in ("oom", "thrash")


@pytest.mark.parametrize("model", MODELS)
def test_bundled_traces_are_what_the_code_records(model, tmp_path):
    """Every figure docs derive from the bundled traces assumes they are what minidtr
    records now: a change to a model, an op or the order in which values are released
    (the autograd engine's, say) must come with re-recorded traces (traces/README.md)."""
    path = tmp_path / f"{model}.log.gz"
    command = [sys.executable, "-m", "minidtr", "train", model, "--steps", "1"]
    subprocess.run([*command, "--trace", str(path)], check=True, capture_output=True, cwd=ROOT)
    recorded = gzip.decompress(path.read_bytes()).decode().splitlines()
    bundled_path = sim.bundled_traces([model])[0]
    bundled = gzip.decompress(bundled_path.read_bytes()).decode().splitlines()
    if recorded == bundled:
        return
    pairs = enumerate(zip(recorded, bundled, strict=False))
    first = next((i for i, (a, b) in pairs if a != b), min(len(recorded), len(bundled)))
    lines = [(r[first] if first < len(r) else "the end") for r in (recorded, bundled)]
    where = f"at line {first + 1}: {lines[0]!r} against {lines[1]!r}"
    pytest.fail(f"{model}: the recorded trace differs from the bundled one {where}")


def test_resnet_trace_separates_dtr_from_lru(traces):
    """docs/simulator.md's Figure 2 on the ResNet-32 trace: at half the peak h_DTR runs at a
    modest slowdown; h_LRU runs too, and pays more at every budget, 19% more at 0.3."""
    for ratio in (0.5, 0.3):
        dtr = sim.simulate(traces["resnet"], ratio=ratio, heuristic="dtr")
        lru = sim.simulate(traces["resnet"], ratio=ratio, heuristic="lru")
        assert dtr.status == "ok" and 1.0 < dtr.slowdown < 1.3
        assert lru.status == "ok" and lru.slowdown > dtr.slowdown
    assert lru.slowdown > 1.15 * dtr.slowdown


def test_gzip_round_trip_is_byte_stable(traces, tmp_path):
    trace = traces["mlp"]
    a, b, plain = tmp_path / "a.log.gz", tmp_path / "b.log.gz", tmp_path / "a.log"
    sim.write_log(trace, a)
    sim.write_log(trace, b)
    sim.write_log(trace, plain)
    assert a.read_bytes() == b.read_bytes()
    assert gzip.decompress(a.read_bytes()) == plain.read_bytes()
    again = sim.load_log(a)
    assert again.name == "a" and again.instructions == trace.instructions


def test_a_bad_gzip_log_is_a_trace_error(tmp_path):
    bad = tmp_path / "bad.log.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(sim.TraceError, match="bad.log.gz"):
        sim.load_log(bad)


def test_cli_bundled(capsys):
    assert sim_main(["info", "--bundled"]) == 0
    out = capsys.readouterr().out
    assert all(f"{m}:" in out for m in MODELS)
    resnet = str(ROOT / "traces" / "resnet.log.gz")
    assert sim_main([resnet, "--ratios", "0.9,0.5", "--heuristics", "dtr", "--jobs", "1"]) == 0
    assert "resnet" in capsys.readouterr().out
    assert sim_main([]) == 2  # a usage error's status
    assert "--bundled" in capsys.readouterr().err


def test_reference_logs_benchmark_fails_clearly_without_logs(tmp_path):
    script = ROOT / "benchmarks" / "sim_reference_logs.py"
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert "no *.log or *.log.gz files" in run.stderr and "Traceback" not in run.stderr
