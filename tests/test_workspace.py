"""Kernel workspaces are part of the budget: reserved before the kernel runs (evicting if
needed), released after it, in first runs and replays alike; shown in event logs and
traces; and real memory measured beside the counted bytes (``measure_real``)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

import minidtr as md
from minidtr import sim
from minidtr.event_log import EventLogError, check_events
from minidtr.explain import explain, resident_timeline, summarize
from minidtr.explorer import page_data
from minidtr.ops.op import Op, apply
from minidtr.runtime.runtime import Stats
from minidtr.sim.simulator import ThrashGuard, TraceOp, baseline
from minidtr.sim.trace import Call, TraceError

N = 1000  # float32 elements: 4,000 bytes a value
VALUE = 4 * N


class Scratch(Op):
    """y = 2x, whose kernel allocates ``factor`` times x's bytes of scratch, as declared
    (``declared=False``: the same kernel, declaring nothing)."""

    name = "scratch"
    retain_inputs = (0,)

    def __init__(self, factor: int = 1, declared: bool = True):
        self.factor, self.declared = factor, declared

    def infer(self, x):
        return [(x.shape, x.dtype)]

    def workspace(self, x):
        return self.factor * x.dtype.itemsize * int(np.prod(x.shape)) if self.declared else 0

    def forward(self, xp, x):
        scratch = xp.full(self.factor * x.size, 1.0, dtype=x.dtype)
        out = x * 2
        out += scratch[: x.size].reshape(x.shape)  # uses it: 0 added
        out -= 1
        return out

    def backward(self, ctx, g):
        return (g * 2,)


def scratch(x, factor=1, declared=True):
    return apply(Scratch(factor, declared), x)


def test_a_class_that_defines_workspace_is_flagged():
    assert Scratch.has_workspace and Scratch().has_workspace
    assert not md.ops.op.Op.has_workspace and not md.tanh(md.ones(2)).cell.op.has_workspace

    class Derived(Scratch):
        name = "derived"

    assert Derived().has_workspace  # inherited with the method
    assert Scratch(3).workspace(md.zeros(N).cell) == 3 * VALUE


def test_the_workspace_is_reserved_with_the_outputs_and_released_after(fresh_allocator):
    x = md.tensor(np.ones(N, np.float32))
    with md.Runtime(budget=4 * VALUE, record_events=True) as rt:  # x, a, y and the scratch
        a = md.tanh(x)
        y = scratch(a)
        assert rt.stats()["memory"] == 3 * VALUE  # the scratch is gone
    assert rt.stats()["peak_memory"] == 4 * VALUE and rt.stats()["evictions"] == 0
    alloc = [e for e in rt.events if e["event"] == "alloc" and e["op"] == "scratch"]
    assert alloc[0]["workspace"] == VALUE and alloc[0]["memory"] == 3 * VALUE
    del a, y

    x = md.tensor(np.ones(N, np.float32))
    with md.Runtime(budget=5 * VALUE - 1, record_events=True) as rt:  # no room: a goes
        a = md.tanh(x)
        b = md.sigmoid(x)
        y = scratch(b)
    kinds = [(e["event"], e["op"]) for e in rt.events if e["event"] != "runtime"]
    assert ("evict", "tanh") in kinds and kinds.index(("evict", "tanh")) < kinds.index(
        ("alloc", "scratch")
    )  # made room for the kernel's scratch before it ran
    np.testing.assert_array_equal(y.numpy(), 2 * b.numpy())
    assert a.cell.storage.buffer is None


def test_a_workspace_that_cannot_fit_is_a_budget_error(fresh_allocator):
    x = md.tensor(np.ones(N, np.float32))
    # x and y fit, the scratch of 2 values does not
    message = r"^scratch \(its outputs and 8,000 bytes of kernel workspace\): needs 12,000"
    with pytest.raises(md.BudgetError, match=message), md.Runtime(budget=3 * VALUE):
        scratch(x, factor=2)


def test_a_replay_reserves_the_workspace_too(fresh_allocator):
    x = md.tensor(np.ones(N, np.float32))
    with md.Runtime(budget=10 * VALUE, record_events=True) as rt:
        y = scratch(md.tanh(x), factor=2)
        before = rt.stats()["peak_memory"]
        rt.allocator.evict(y.cell.storage, "test")
        memory = rt.stats()["memory"]
        rt.stats_.peak_memory = 0
        y.numpy()  # rebuilt: tanh(x) is evicted (dead), so two replays
    remats = [e for e in rt.events if e["event"] == "remat"]
    assert [e["op"] for e in remats] == ["tanh", "scratch"]
    assert remats[1]["workspace"] == 2 * VALUE and "workspace" not in remats[0]
    assert rt.stats_.peak_memory == memory + 2 * VALUE + 2 * VALUE  # tanh, y and the scratch
    assert before == 4 * VALUE + VALUE  # x, tanh, y, the scratch of 2


def test_the_reference_policy_decides_the_same():
    logs = []
    for reference in (False, True):
        with md.testing.isolated_allocator():
            x = md.tensor(np.ones(N, np.float32))
            options = dict(budget=6 * VALUE, record_events=True, cost="flops")
            with md.Runtime(**options, reference=reference) as rt:
                h = x
                for i in range(6):
                    h = scratch(md.tanh(h), factor=1 + i % 2)
                h.numpy()
            logs.append(rt.events)
            del h, x
    assert logs[0] == logs[1] and any(e["event"] == "evict" for e in logs[0])


def test_event_logs_check_and_show_the_workspace(fresh_allocator):
    x = md.tensor(np.ones(N, np.float32))
    with md.Runtime(record_events=True) as rt:
        y = scratch(md.tanh(x), factor=3)
    events = [rt.header(), *rt.events]
    check_events(events)
    alloc = next(e for e in events if e.get("workspace"))
    bad = dict(alloc, workspace=-1)
    with pytest.raises(EventLogError, match="workspace"):
        check_events([bad])
    summary = summarize(events)
    assert summary.peak_memory == 3 * VALUE + 3 * VALUE and summary.peak_workspace == 3 * VALUE
    text = explain(summary)
    assert "11.7 KiB of workspace" in text and "largest kernel workspaces, by op: scratch" in text
    columns = resident_timeline(events)
    assert max(columns["memory"]) == 6 * VALUE  # the spike, then memory after it
    assert max(page_data(events)["columns"]["ws"]) == 3 * VALUE
    del y


# ---- traces ------------------------------------------------------------------------------


def program(factor: int = 2) -> float:
    """A small chain with workspaces in forward and backward (conv2d's too)."""
    rng = np.random.default_rng(0)
    w = md.tensor(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), requires_grad=True)
    x = md.tensor(rng.standard_normal((8, 2, 6, 6)).astype(np.float32))
    h = md.conv2d(x, w, padding=1)
    for _ in range(4):
        h = scratch(md.tanh(h), factor=factor)
    loss = h.sum()
    loss.backward()
    value = loss.item()
    del loss, h
    return value


def test_traces_carry_workspaces_and_replays_match_the_live_run(tmp_path, fresh_allocator):
    with md.Runtime(cost="flops"), sim.record(tmp_path / "w.log") as recorder:
        expected = program()
    calls = [c for c in recorder.trace().instructions if isinstance(c, Call)]
    assert [c.workspace for c in calls if c.op == "scratch"] == [2 * 8 * 4 * 36 * 4] * 4
    text = (tmp_path / "w.log").read_text()
    assert '"WORKSPACE": "' in text.replace('":"', '": "')
    trace = sim.load_log(tmp_path / "w.log")
    assert [c.workspace for c in trace.instructions if isinstance(c, Call)] == [
        c.workspace for c in calls
    ]
    peak = baseline(trace).peak_memory
    compared = 0
    for ratio in (1.0, 0.8, 0.65, 0.5):
        budget = int(ratio * peak)
        with md.testing.isolated_allocator():
            try:
                with md.Runtime(budget=budget, cost="flops") as rt:
                    assert program() == expected
                live = {k: rt.stats()[k] for k in ("evictions", "remats", "peak_memory")}
            except md.BudgetError:
                live = "oom"
        result = sim.simulate(trace, budget=budget, thrash=None, outputs=False)
        replayed = (
            {"evictions": result.evictions, "remats": result.remats, "peak": result.peak_memory}
            if result.status == "ok"
            else result.status
        )
        if live != "oom":
            live["peak"] = live.pop("peak_memory")
        assert replayed == live, ratio
        compared += live != "oom" and live["remats"] > 0
    assert compared >= 1


def test_old_traces_read_as_no_workspace_and_bad_ones_are_refused(tmp_path, fresh_allocator):
    with md.Runtime(cost="flops"), sim.record(tmp_path / "w.log.gz"):
        program()
    lines = gzip.decompress((tmp_path / "w.log.gz").read_bytes()).decode().splitlines()
    rows = [json.loads(line) for line in lines]
    old = [{k: v for k, v in row.items() if k != "WORKSPACE"} for row in rows]
    (tmp_path / "old.log").write_text("".join(json.dumps(r) + "\n" for r in old))
    trace = sim.load_log(tmp_path / "old.log")
    assert all(c.workspace == 0 for c in trace.instructions if isinstance(c, Call))
    with_ws = sim.load_log(tmp_path / "w.log.gz")
    assert baseline(with_ws).peak_memory > baseline(trace).peak_memory
    at = next(i for i, r in enumerate(rows) if "WORKSPACE" in r)
    for bad in ("-5", "x", True):
        rows_bad = [dict(r) for r in rows]
        rows_bad[at]["WORKSPACE"] = bad
        (tmp_path / "bad.log").write_text("".join(json.dumps(r) + "\n" for r in rows_bad))
        with pytest.raises(TraceError, match=f"bad.log:{at + 1}: WORKSPACE must be an integer"):
            sim.load_log(tmp_path / "bad.log")


def test_a_trace_op_declares_the_workspace_of_its_call():
    guard = ThrashGuard(Stats(), float("inf"))
    op = TraceOp("conv2d", 1, False, 5.0, guard, workspace=123)
    assert op.has_workspace and op.workspace() == 123
    assert not TraceOp("add", 1, False, 5.0, guard).has_workspace


# ---- measured, not assumed -------------------------------------------------------------------


def test_measure_real_is_a_checked_switch():
    with pytest.raises(TypeError, match="measure_real must be True or False, got 'yes'"):
        md.Runtime(measure_real="yes")
    assert md.RuntimeOptions(measure_real=True).measure_real
    with md.Runtime() as rt:
        md.tanh(md.ones(10)).numpy()
    assert rt.stats()["real_peak"] is None and rt.stats()["traced_peak"] is None


@pytest.mark.parametrize("declared", [True, False])
def test_the_real_peak_sees_what_a_kernel_allocates(fresh_allocator, declared):
    x = md.tensor(np.ones(50 * N, np.float32))
    with md.Runtime(measure_real=True, cost="flops") as rt:
        y = scratch(md.tanh(x), factor=4, declared=declared)
        y = md.tanh(y)
    stats = rt.stats()
    counted, real = stats["peak_memory"], stats["real_peak"]
    if declared:  # x, tanh, y and 4 values of scratch: counted, and really allocated
        assert counted == 7 * 50 * VALUE and counted - 2048 <= real <= counted + 2048
    else:  # the same kernel, its scratch undeclared: the budget missed it, the meter did not
        assert counted == 3 * 50 * VALUE and real >= counted + 4 * 50 * VALUE
    assert stats["traced_peak"] >= real
    del y


def test_measuring_stops_with_the_runtime(fresh_allocator):
    import tracemalloc

    assert not tracemalloc.is_tracing()
    with md.Runtime(measure_real=True) as rt:
        assert tracemalloc.is_tracing() and "run_kernel" in vars(rt.allocator)
        with md.Runtime(budget=10**9, measure_real=True) as inner:
            md.tanh(md.ones(1000)).numpy()
        assert tracemalloc.is_tracing()
    assert not tracemalloc.is_tracing() and "run_kernel" not in vars(fresh_allocator)
    assert fresh_allocator.meter is None
    assert inner.stats()["real_peak"] >= 8000 and rt.stats()["real_peak"] >= 8000
