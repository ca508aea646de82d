"""Where sweeps run (``minidtr.sim.parallel``): a local pool, any executor, a Dask cluster;
results streamed into a CSV that an interrupted sweep resumes from."""

import csv
import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from minidtr import RuntimeOptions
from minidtr.sim.cli import main
from minidtr.sim.experiments import chain_trace
from minidtr.sim.sweep import compare_with_optimal, read_csv, sweep
from minidtr.sim.trace import write_log

RATIOS = [1.0, 0.5, 0.3, 0.2, 0.1]
HEURISTICS = ["dtr", "lru", "msps"]


def cells(results):
    """What a replay decides, without its timings."""
    return [
        (r.trace, r.heuristic, r.ratio, r.status, r.remats, r.remat_cost, r.evictions)
        for r in results
    ]


@pytest.fixture(scope="module")
def traces():
    return [chain_trace(40), chain_trace(60)]


@pytest.fixture(scope="module")
def reference(traces):
    return sweep(traces, RATIOS, HEURISTICS, jobs=1)


def test_any_executor_gives_the_serial_results(traces, reference):
    with ThreadPoolExecutor(2) as executor:
        results = sweep(traces, RATIOS, HEURISTICS, executor=executor)
    assert cells(results) == cells(reference)


def test_an_interrupted_sweep_resumes_from_its_csv(traces, reference, tmp_path):
    path = tmp_path / "sweep.csv"
    seen = []

    def interrupt_after_four(result):
        seen.append(result)
        if len(seen) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(traces, RATIOS, HEURISTICS, jobs=1, csv_path=path, on_result=interrupt_after_four)
    assert len(read_csv(path)) == 4  # each result was on disk as soon as it came

    rerun = []
    results = sweep(
        traces, RATIOS, HEURISTICS, jobs=2, csv_path=path, resume=True, on_result=rerun.append
    )
    assert len(rerun) == len(reference) - 4  # only the missing points ran
    assert cells(results) == cells(reference)
    assert sorted(cells(read_csv(path))) == sorted(cells(reference))  # in finishing order


def test_resume_refuses_results_of_other_options(traces, tmp_path):
    path = tmp_path / "sweep.csv"
    sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path, thrash=2.0)
    with pytest.raises(ValueError, match="other simulate options"):
        sweep(traces[:1], [0.5, 0.3], ["dtr"], jobs=1, csv_path=path, resume=True, thrash=3.0)


def test_resume_refuses_the_options_naming_the_setting_that_differs(traces, tmp_path):
    path = tmp_path / "sweep.csv"
    sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path, thrash=2.0)
    with pytest.raises(ValueError, match=r"thrash 2.0 there, 3.0 now\); write to a new file"):
        sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path, resume=True, thrash=3.0)


def rewrite(path, columns, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def test_resume_refuses_a_csv_of_other_columns_before_appending(traces, tmp_path):
    """Rows appended under another header land in the wrong columns (an older minidtr's
    file, a spreadsheet's reordering): refused, the file left as it was."""
    path = tmp_path / "sweep.csv"
    sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path)
    rows = list(csv.DictReader(path.read_text().splitlines()))
    columns = list(rows[0])
    for changed, message in [
        ([c for c in columns if c != "orphan_remats"], "it lacks orphan_remats"),
        ([*columns, "note"], "it adds note"),
        (columns[::-1], "this sweep's in another order"),
    ]:
        rewrite(path, changed, rows)
        before = path.read_bytes()
        with pytest.raises(ValueError, match=f"sweep.csv:1: its columns .*{message}.*new file"):
            sweep(traces[:1], [0.5, 0.3], ["dtr"], jobs=1, csv_path=path, resume=True)
        assert path.read_bytes() == before


@pytest.mark.parametrize("cut", [2, 40])
def test_resume_replays_a_row_cut_mid_write(traces, reference, tmp_path, cut):
    """A stop mid-write (a full disk) leaves a last row without its line end: a resumed
    sweep drops it and replays that point, and the file ends whole."""
    path = tmp_path / "sweep.csv"
    sweep(traces, RATIOS, HEURISTICS, jobs=1, csv_path=path)
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    rerun = []
    results = sweep(
        traces, RATIOS, HEURISTICS, jobs=1, csv_path=path, resume=True, on_result=rerun.append
    )
    assert len(rerun) == 1 and cells(results) == cells(reference)
    assert sorted(cells(read_csv(path))) == sorted(cells(reference))


def test_resume_from_an_empty_file_starts_it(traces, tmp_path):
    path = tmp_path / "sweep.csv"
    path.write_bytes(b"")
    sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path, resume=True)
    assert len(read_csv(path)) == 1


def test_results_of_another_trace_of_the_same_name_are_refused(traces, tmp_path):
    path = tmp_path / "sweep.csv"
    sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path)
    other = chain_trace(50)
    other.name = traces[0].name
    with pytest.raises(ValueError, match="results for .* are of another trace of that name"):
        sweep([other], [0.5], ["dtr"], jobs=1, csv_path=path, resume=True)
    with pytest.raises(ValueError, match="two traces are named"):
        sweep([traces[0], other], [0.5], ["dtr"], jobs=1)


def test_empty_results_write_a_header_or_are_refused(tmp_path):
    from minidtr.sim.sweep import plot, write_csv, write_rows

    write_csv([], tmp_path / "e.csv")
    assert (tmp_path / "e.csv").read_text().startswith("trace,heuristic,")
    with pytest.raises(ValueError, match="write_rows: no rows"):
        write_rows([], tmp_path / "r.csv")
    with pytest.raises(ValueError, match="plot: no results"):
        plot([], [], tmp_path / "e.png")


def test_optimal_rows_through_the_pool():
    trace = chain_trace(8)
    serial = compare_with_optimal(trace, [1.0, 0.5], ["dtr"], time_limit=20)
    pooled = compare_with_optimal(trace, [1.0, 0.5], ["dtr"], time_limit=20, jobs=2)
    assert [(r["ratio"], r["dtr"], r["best"]) for r in serial] == [
        (r["ratio"], r["dtr"], r["best"]) for r in pooled
    ]


def process_of(trace, k):
    return os.getpid(), k


def test_isolated_tasks_run_in_a_worker_even_one_at_a_time():
    """A solve is C code that a Ctrl-C in this process could not stop until its time limit
    (``minidtr sim bound`` with one ratio ran 45 s after it); a worker is stopped at once."""
    from minidtr.sim import parallel

    trace = chain_trace(4)
    here = dict(parallel.run(process_of, [trace], [(0, (1,))], jobs=1))
    assert here[0] == (os.getpid(), 1)
    (away,) = dict(parallel.run(process_of, [trace], [(0, (2,))], jobs=1, isolate=True)).values()
    assert away[0] != os.getpid() and away[1] == 2


def test_cli_resume_needs_a_csv(tmp_path, capsys):
    write_log(chain_trace(10), tmp_path / "c.log")
    assert main([str(tmp_path / "c.log"), "--resume"]) == 2  # a usage error's status
    assert "--resume needs --csv" in capsys.readouterr().err


def test_cli_sweep_csv_and_resume(tmp_path, capsys):
    log = tmp_path / "c.log"
    write_log(chain_trace(20), log)
    out = tmp_path / "s.csv"
    argv = [str(log), "--ratios", "0.5,0.3", "--heuristics", "dtr", "--jobs", "1"]
    assert main([*argv, "--csv", str(out)]) == 0
    first = read_csv(out)
    assert main([*argv, "--ratios", "0.5,0.3,0.2", "--csv", str(out), "--resume"]) == 0
    assert [r.ratio for r in read_csv(out)] == [0.5, 0.3, 0.2]
    assert cells(read_csv(out)[:2]) == cells(first)
    resumed = capsys.readouterr().out.split("CSV:")[1]
    assert "0.5     0.3     0.2" in resumed  # the table holds the old points and the new one
    # its summary counts the one point it replayed, apart from the two it read back
    assert f"\n1 replays (2 more results read back from {out})," in resumed
    # resumed with nothing left: no replay time to divide by (it printed inf instructions/s)
    capsys.readouterr()
    assert main([*argv, "--ratios", "0.5,0.3,0.2", "--csv", str(out), "--resume"]) == 0
    assert f"\n0 replays (3 more results read back from {out})\n" in capsys.readouterr().out


def test_ctrl_c_leaves_a_csv_to_resume(tmp_path):
    """SIGINT in the middle of a sweep: one line, exit 130, finished rows kept."""
    log = tmp_path / "c.log"
    write_log(chain_trace(400), log)
    out = tmp_path / "s.csv"
    ratios = ",".join(str(r / 100) for r in range(100, 4, -3))
    argv = [sys.executable, "-m", "minidtr", "sim", str(log), "--ratios", ratios]
    argv += ["--heuristics", "dtr,lru,msps,dtr_eq", "--thrash", "0", "--csv", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and len(out.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err and "rerun with --resume" in err
    kept = len(read_csv(out))
    assert kept >= 2
    with open(out) as f:
        assert len(list(csv.DictReader(f))) == kept  # no half-written row


SLOW_POOL = """
import sys, time
from minidtr.sim import parallel
try:
    list(parallel.run(time.sleep, [120], [(0, ())] * 2, jobs=2))
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc for the workers")
def test_ctrl_c_stops_running_workers_at_once():
    """A replay can run for minutes; Ctrl-C stops the pool's workers, it does not wait."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_POOL], start_new_session=True, stderr=subprocess.PIPE
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(children.read_text().split()) < 2:
        time.sleep(0.05)
    workers = [int(pid) for pid in children.read_text().split()]
    assert len(workers) >= 2, "the pool did not start its workers"
    time.sleep(0.5)  # past the workers' initializer, which ignores SIGINT
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    proc.communicate(timeout=100)
    assert proc.returncode == 130
    assert time.monotonic() - started < 30  # not the 120 s the running tasks would take
    for pid in workers:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or ") Z " in stat.read_text()  # gone, or a zombie


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_a_dask_cluster_gives_the_local_results(cluster, traces, reference):
    results = sweep(traces, RATIOS, HEURISTICS, client=cluster)
    assert cells(results) == cells(reference)


def test_a_worker_killed_mid_sweep_costs_only_its_tasks(cluster, traces, reference):
    pids = cluster.run(os.getpid)
    victim = next(iter(pids.values()))
    killed = []

    def kill_one_worker(result):
        if not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    results = sweep(traces, RATIOS, HEURISTICS, client=cluster, on_result=kill_one_worker)
    assert killed
    assert cells(results) == cells(reference)
    cluster.wait_for_workers(2, timeout=60)  # the nanny brought it back


def test_resume_reads_a_command_line_csv_whatever_the_options_are_given_as(traces, tmp_path):
    """The stamp names the settings, not how they were passed: keywords and a
    RuntimeOptions give one stamp, the stamp ``minidtr sim`` wrote before RuntimeOptions
    existed (so its CSVs resume), and other settings refuse to resume."""
    path = tmp_path / "sweep.csv"
    sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path, dealloc="eager", sample=False)
    stamp = read_csv_stamp(path)
    assert stamp == (
        '{"dealloc": "eager", "keep_dead_remats": false, "min_size": 0.0, '
        '"rebuild_orphans": true, "sample": false, "thrash": 2.0}'
    )
    ran = []
    sweep(
        traces[:1],
        [0.5, 0.3],
        ["dtr"],
        jobs=1,
        csv_path=path,
        resume=True,
        options=RuntimeOptions(cost="flops"),  # the cost is no replay setting
        on_result=ran.append,
    )
    assert [r.ratio for r in ran] == [0.3]
    with pytest.raises(ValueError, match="other simulate options"):
        sweep(traces[:1], [0.5], ["dtr"], jobs=1, csv_path=path, resume=True, seed=1)


def read_csv_stamp(path) -> str:
    with open(path, newline="") as f:
        return next(csv.DictReader(f))["options"]


def test_sim_optimal_reports_a_bad_scheduler_in_one_line(tmp_path, capsys):
    pytest.importorskip("distributed")
    write_log(chain_trace(20), tmp_path / "t.log")
    code = main(["optimal", str(tmp_path / "t.log"), "--ratios", "0.5", "--scheduler", "nohost"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("minidtr sim optimal: ") and "nohost" in err


def test_losing_the_scheduler_mid_run_is_one_error_not_a_traceback(monkeypatch):
    """distributed raises CommClosedError (an OSError) from whatever call was waiting."""
    comm = pytest.importorskip("distributed.comm")
    from minidtr.sim import parallel
    from minidtr.sim.cluster_cli import ClusterSettings, cluster

    class Client:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait_for_workers(self, n, timeout):
            pass

    monkeypatch.setattr(parallel, "connect", lambda address, security=None: Client())
    with (
        pytest.raises(ValueError, match=r"^lost the Dask scheduler at tcp://head:8786: in <TCP"),
        cluster(ClusterSettings("tcp://head:8786")),
    ):
        raise comm.CommClosedError("in <TCP (closed)>: Stream is closed")
