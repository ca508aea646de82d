"""The reference policy and the accelerator decide identically.

``Runtime(reference=True)`` runs the plain policy alone (minidtr/runtime: the score, the
loop over the candidates, e* walked at every score, the budget check, the replay, the
deallocation rules); the default runs the accelerated equivalents of runtime/fast. Both
must make the same decisions: the same event log line for line, the same statistics and
the same values. Checked on the bundled models' traces for every heuristic (the
simulator drives the same allocator), on live training steps, with the accelerator's hot
paths on (no event log), and on random programs with hypothesis. The full grid, live
training of all seven models, is behind ``-m slow``.
"""

import dataclasses
import math
import os

import numpy as np
import pytest
from chains import short_chains
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minidtr as md
from minidtr import sim
from minidtr.runtime import HEURISTIC_NAMES, fast
from minidtr.runtime.candidates import Candidates
from minidtr.testing import isolated_allocator, run_under
from minidtr.testing.strategies import (
    deallocs,
    heuristics,
    random_programs,
    training_loops,
    unbounded_peak,
)

# each model's lowest trainable ratio (docs/models.md, the frontier of h_DTR)
LOWEST = {
    "mlp": 0.18,
    "resnet": 0.2,
    "densenet": 0.27,
    "unet": 0.27,
    "lstm": 0.21,
    "transformer": 0.16,
    "treelstm": 0.18,
}
COMPARED = (
    "status",
    "slowdown",
    "remats",
    "evictions",
    "dead_evictions",
    "banished",
    "orphan_remats",
    "peak_memory",
    "ops",
)


def replayed(trace, ratio: float, heuristic: str, reference: bool):
    result = sim.simulate(
        trace, ratio=ratio, heuristic=heuristic, record_events=True, reference=reference
    )
    return {name: getattr(result, name) for name in COMPARED}, result.extra["events"]


def assert_same_events(fast_events: list, reference_events: list) -> None:
    for i, (a, b) in enumerate(zip(fast_events, reference_events, strict=False)):
        assert a == b, f"event {i} differs:\n  accelerated {a}\n  reference   {b}"
    assert len(fast_events) == len(reference_events)


@pytest.fixture(scope="module")
def traces():
    return {path.name.split(".")[0]: sim.load_log(path) for path in sim.bundled_traces()}


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(m, marks=pytest.mark.slow) if m == "treelstm" else m  # 10 s
        for m in sorted(LOWEST)
    ],
)
def test_bundled_traces_replay_identically_with_the_reference_policy(traces, model):
    """Every heuristic at the model's lowest trainable ratio and at 0.5: the same events,
    the same statistics (thrashing or running out included)."""
    trace = traces[model]
    for ratio in (LOWEST[model], 0.5):
        for heuristic in HEURISTIC_NAMES:
            stats, events = replayed(trace, ratio, heuristic, reference=False)
            reference_stats, reference_events = replayed(trace, ratio, heuristic, reference=True)
            assert stats == reference_stats or _both_nan(stats, reference_stats), (
                model,
                ratio,
                heuristic,
            )
            assert_same_events(events, reference_events)


@pytest.mark.parametrize("model", ["mlp", "treelstm"])
def test_traces_with_fractional_times_replay_identically(traces, model):
    """A trace's TIMEs need not add up exactly (these are a tenth of the bundled ones, plus
    0.01): h_DTR's e* is then summed in the reference's order (``fast/closures.py``),
    where the cached closures' sums differed in their last bits and changed decisions."""
    trace = traces[model]
    fractional = dataclasses.replace(
        trace,
        instructions=[
            dataclasses.replace(i, time=i.time * 0.1 + 0.01) if hasattr(i, "time") else i
            for i in trace.instructions
        ],
    )
    for ratio in (0.5, 0.35):
        stats, events = replayed(fractional, ratio, "dtr", reference=False)
        reference_stats, reference_events = replayed(fractional, ratio, "dtr", reference=True)
        assert stats == reference_stats or _both_nan(stats, reference_stats), ratio
        assert_same_events(events, reference_events)


def _both_nan(a: dict, b: dict) -> bool:
    """Equal but for a slowdown that is nan in both (an out-of-memory replay)."""
    return {k: v for k, v in a.items() if k != "slowdown"} == {
        k: v for k, v in b.items() if k != "slowdown"
    } and (math.isnan(a["slowdown"]) and math.isnan(b["slowdown"]))


def mlp_steps(budget: int | None, heuristic: str, reference: bool, events: bool):
    """Two training steps of a small MLP with dropout under ``budget``: the values, the
    runtime's statistics and, with ``events``, its event log."""
    with isolated_allocator():
        md.manual_seed(0)
        layers = [md.nn.Linear(16, 32), md.nn.ReLU(), md.nn.Dropout(0.2)]
        for _ in range(6):
            layers += [md.nn.Linear(32, 32), md.nn.ReLU()]
        model = md.nn.Sequential(*layers, md.nn.Linear(32, 10))
        opt = md.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        rng = np.random.default_rng(0)
        x = md.tensor(rng.standard_normal((512, 16)).astype(np.float32))
        y = md.tensor(rng.integers(0, 10, 512))
        runtime = md.Runtime(
            budget=budget,
            heuristic=heuristic,
            cost="flops",
            record_events=events,
            reference=reference,
            max_slowdown=None,
        )
        values, counts = two_steps(model, opt, x, y, runtime)
        return values, counts, runtime.events


def two_steps(model, opt, x, y, runtime: md.Runtime) -> tuple[list, dict]:
    """Two training steps under ``runtime``: the losses and parameters, and its counts."""
    losses = []
    with runtime:
        for _ in range(2):
            loss = md.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.numpy())
    stats = runtime.stats()
    counts = {k: stats[k] for k in ("evictions", "remats", "peak_memory", "compute_cost")}
    return [*losses, *(p.numpy() for p in model.parameters())], counts


@pytest.mark.parametrize("heuristic", HEURISTIC_NAMES)
def test_live_training_decides_identically(heuristic):
    """Live steps under a tight budget: with an event log (every decision compared) and
    without one, where the accelerator's hot paths run (their counts compared)."""
    budget = int(0.55 * mlp_steps(None, "dtr", False, False)[1]["peak_memory"])
    for events in (True, False):
        values, counts, log = mlp_steps(budget, heuristic, reference=False, events=events)
        ref_values, ref_counts, ref_log = mlp_steps(budget, heuristic, True, events)
        assert counts == ref_counts and counts["evictions"] > 0, (heuristic, events)
        for a, b in zip(values, ref_values, strict=True):
            np.testing.assert_array_equal(a, b)
        if events:
            assert_same_events(log, ref_log)


def conv_steps(budget: int | None, reference: bool, general: list):
    """Two steps of a small conv net (its convolutions, batch norms and loss declare kernel
    workspaces): the values and the statistics; ``general`` gets the names of the ops with
    a workspace that took ``Allocator.compute_general``."""
    from minidtr.runtime.allocator import Allocator

    plain = Allocator.compute_general

    def counting(self, op, *args):
        if op.has_workspace:
            general.append(op.name)
        return plain(self, op, *args)

    with isolated_allocator(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(Allocator, "compute_general", counting)
        md.manual_seed(0)
        model = md.nn.Sequential(
            md.nn.Conv2d(3, 8, 3, padding=1), md.nn.BatchNorm2d(8, relu=True),
            md.nn.Conv2d(8, 8, 3, stride=2, padding=1), md.nn.BatchNorm2d(8, relu=True),
            md.nn.Flatten(), md.nn.Linear(8 * 4 * 4, 10),
        )  # fmt: skip
        opt = md.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        rng = np.random.default_rng(0)
        x = md.tensor(rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
        y = md.tensor(rng.integers(0, 10, 16))
        return two_steps(
            model, opt, x, y, md.Runtime(budget=budget, cost="flops", reference=reference)
        )


@pytest.mark.parametrize("generous", [False, True])
def test_ops_with_a_workspace_take_the_fast_path_with_the_reference_peak(generous):
    """An op whose kernel declares a workspace takes the accelerator's ``compute`` when its
    outputs and workspace fit: the same values, peak (the workspace counted while the
    kernel runs) and costs as the reference, which takes the general path."""
    budget = 10**9 if generous else None
    fast_general: list = []
    values, counts = conv_steps(budget, False, fast_general)
    ref_values, ref_counts = conv_steps(budget, True, [])
    assert counts == ref_counts and counts["remats"] == 0
    for a, b in zip(values, ref_values, strict=True):
        np.testing.assert_array_equal(a, b)
    assert fast_general == []


def test_the_reference_runs_no_accelerated_code():
    """Inside a reference runtime the allocator holds the reference pieces only, and
    leaving it brings the accelerator back, with the candidates in the same order."""
    with isolated_allocator() as allocator:
        x = md.tensor(np.ones(8, np.float32))
        kept = [md.tanh(x), md.exp(x), md.tanh(x) * 2.0]
        before = list(allocator.eviction.candidates.in_order())
        with md.Runtime(budget=10**6, reference=True):
            assert allocator.fast is None and allocator.eviction.search is None
            assert type(allocator.eviction.candidates) is Candidates
            assert "release" not in vars(allocator)
            assert allocator.eviction.candidates.in_order() == before
            kept.append(md.exp(kept[0]))
        assert isinstance(allocator.fast, fast.FastPath)
        assert isinstance(allocator.eviction.candidates, fast.CandidateTable)
        assert allocator.eviction.candidates.in_order() == [*before, kept[-1].storage]


def test_the_reference_modules_never_import_the_accelerator():
    import ast
    import pathlib

    runtime = pathlib.Path(md.__file__).parent / "runtime"
    reference_modules = (
        "heuristics", "victims", "estar", "eqclasses", "candidates", "ledger", "eviction",
        "remat", "lifetime", "guard", "storage", "views", "costs",
    )  # fmt: skip
    for name in reference_modules:
        tree = ast.parse((runtime / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert "fast" not in (node.module or ""), f"{name}.py imports {node.module}"


def run_both(fn, budget: int, heuristic: str, dealloc: str, cost="flops", **settings):
    """``fn`` under the accelerated and under the reference policy: (outputs or the
    error's message, event log) of each (``settings``: more Runtime keywords)."""
    runs = []
    for reference in (False, True):
        runtime = md.Runtime(
            budget=budget,
            heuristic=heuristic,
            dealloc=dealloc,
            cost=cost,
            record_events=True,
            reference=reference,
            # the cost model's thrash guard, which both policies reach at the same op; the
            # wall guard's timings differ from run to run, and a slow machine would trip
            # it on an example that is only slow (a thrashing one ran to it, 10 s a run,
            # recording tens of thousands of events)
            max_slowdown=50.0,
            max_wall_slowdown=None,
            **settings,
        )
        try:
            outputs = run_under(fn, runtime)
        except md.BudgetError as error:
            outputs = str(error)
        runs.append((outputs, runtime.events))
    return runs


def assert_same_runs(runs) -> None:
    (outputs, events), (ref_outputs, ref_events) = runs
    if isinstance(outputs, str) or isinstance(ref_outputs, str):
        assert outputs == ref_outputs
    else:
        for (name, a), (_, b) in zip(outputs, ref_outputs, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    assert_same_events(events, ref_events)


PROPERTY_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY_SETTINGS
@given(random_programs(), heuristics(), deallocs(), st.floats(0.3, 0.95))
def test_random_programs_decide_identically(program, heuristic, dealloc, ratio):
    """The property tests' random programs (tests/test_remat_properties.py) under a budget
    between 0.3 and 0.95 of their peak, every heuristic and deallocation policy."""
    budget = int(ratio * unbounded_peak(program, dealloc=dealloc))
    assert_same_runs(run_both(program, budget, heuristic, dealloc))


@PROPERTY_SETTINGS
@given(random_programs(), heuristics(), deallocs(), st.floats(0.3, 0.95))
def test_random_programs_cutting_dead_chains_decide_identically(program, heuristic, dealloc, ratio):
    """The same with a dead chain cut every three recipes (tests/short_chains.py): the
    reference and the accelerator make the same values constants at the same ops."""
    with short_chains():
        budget = int(ratio * unbounded_peak(program, dealloc=dealloc))
        assert_same_runs(run_both(program, budget, heuristic, dealloc))


RUN_COUNTS = (
    "ops",
    "searches",
    "scored",
    "evictions",
    "dead_evictions",
    "banished",
    "remats",
    "orphan_remats",
    "compute_cost",
    "remat_cost",
    "peak_memory",
    "memory",
)


def stats_of_run(program, budget: int, heuristic: str, dealloc: str, reference: bool, **settings):
    """(outputs or the error's message, the run's counts) without an event log."""
    runtime = md.Runtime(
        budget=budget,
        heuristic=heuristic,
        dealloc=dealloc,
        cost="flops",
        reference=reference,
        max_slowdown=50.0,
        max_wall_slowdown=None,
        **settings,
    )
    try:
        outputs = [(name, array.tobytes()) for name, array in run_under(program, runtime)]
    except md.BudgetError as error:
        outputs = str(error)
    stats = runtime.stats()
    return outputs, {name: stats[name] for name in RUN_COUNTS}


@PROPERTY_SETTINGS
@given(random_programs(), heuristics(), deallocs(), st.floats(0.3, 0.95), st.booleans())
def test_random_programs_decide_identically_without_an_event_log(
    program, heuristic, dealloc, ratio, sample
):
    """Without an event log the runtime takes its fast paths, and a decision wants the
    lowest score alone (``TableSearch.settle_lowest``): the same outputs and counts as the
    reference, bit for bit."""
    budget = int(ratio * unbounded_peak(program, dealloc=dealloc))
    fast = stats_of_run(program, budget, heuristic, dealloc, False, sample=sample)
    reference = stats_of_run(program, budget, heuristic, dealloc, True, sample=sample)
    assert fast == reference


def fractional_cost(op, in_metas, out_metas) -> float:
    """A cost model of a user's whose costs do not add up exactly: tenths, some near 2**50,
    so that a sum depends on its order."""
    n = math.prod(out_metas[0][0]) if out_metas else 1
    return (n % 7 + 1) * 0.1 + (2.0**50 if n % 2 else 0.0)


@PROPERTY_SETTINGS
@given(random_programs(), deallocs(), st.floats(0.3, 0.95))
def test_random_programs_decide_identically_with_costs_that_round(program, dealloc, ratio):
    """h_DTR's e* sums costs; the accelerator's cached closures sum them in another order,
    which gives the same float only when they add up exactly (the built-in models'). With
    a cost function whose sums round, the terms are the walk's, in its order."""
    budget = int(ratio * unbounded_peak(program, dealloc=dealloc))
    assert_same_runs(run_both(program, budget, "dtr", dealloc, cost=fractional_cost))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), heuristics(), st.floats(0.3, 0.95))
def test_random_programs_decide_identically_as_the_prototype(program, heuristic, ratio):
    """``as_prototype``: the accelerator stands aside, so asking for it changes nothing."""
    budget = int(ratio * unbounded_peak(program))
    assert_same_runs(run_both(program, budget, heuristic, "eager", as_prototype=True))


@pytest.mark.parametrize("model", ["resnet", "lstm", "transformer"])
def test_bundled_traces_replay_identically_as_the_prototype(traces, model):
    """The simulator's rules (``as_prototype``) with and without reference=True: the same
    events and statistics, for every heuristic at 0.5 and 0.3."""
    for ratio in (0.5, 0.3):
        for heuristic in ("dtr", "dtr_eq", "msps", "lru"):
            runs = [
                sim.simulate(
                    traces[model], ratio=ratio, heuristic=heuristic, record_events=True,
                    reference=reference, as_prototype=True,
                )
                for reference in (False, True)
            ]  # fmt: skip
            (a, b) = ({n: getattr(r, n) for n in COMPARED} for r in runs)
            assert a == b or _both_nan(a, b), (model, ratio, heuristic)
            assert_same_events(runs[0].extra["events"], runs[1].extra["events"])


def test_the_prototype_mode_runs_without_the_accelerator_and_gives_it_back():
    """While a runtime with ``as_prototype`` is innermost the allocator runs the reference
    code with the mode's parts (prototype.py); a default runtime entered after it gets the
    accelerator and minidtr's own parts back, and decides as on a fresh allocator."""
    from minidtr.runtime import prototype

    def program(runtime):
        with isolated_allocator() as allocator:
            md.manual_seed(0)
            seen = []
            x = md.tensor(np.ones((64, 64), dtype=np.float32))
            with runtime:
                seen.append(
                    (allocator.fast is None, type(allocator.remat).__name__)
                )  # fmt: skip
                for _ in range(8):
                    x = (x @ x).relu() * 0.01
                x.numpy()
            again = md.Runtime(budget=runtime.budget, cost="flops", record_events=True)
            with again:
                seen.append((allocator.fast is None, type(allocator.remat).__name__))
                y = md.tensor(np.ones((64, 64), dtype=np.float32))
                for _ in range(8):
                    y = (y @ y).relu() * 0.01
                y.numpy()
            return seen, again.events

    budget = 4 * 64 * 64 * 4
    kw = dict(budget=budget, cost="flops", max_slowdown=None)
    seen, events = program(md.Runtime(as_prototype=True, **kw))
    assert seen == [(True, "PrototypeRematerializer"), (False, "Rematerializer")]
    assert prototype.PrototypeRematerializer.__name__ == seen[0][1]
    _, plain_events = program(md.Runtime(**kw))
    assert [e for e in events if e["event"] != "step"] == [
        e for e in plain_events if e["event"] != "step"
    ]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_loops(), heuristics(), st.floats(0.3, 0.95))
def test_random_training_loops_decide_identically(loop, heuristic, ratio):
    """Its training loops (an MLP, an unrolled LSTM, a tree, a CNN), likewise."""
    _, fn = loop
    budget = int(ratio * unbounded_peak(fn))
    assert_same_runs(run_both(fn, budget, heuristic, "eager"))


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(LOWEST))
def test_bundled_models_train_identically_with_the_reference_policy(model):
    """Two live steps of each bundled model, every heuristic, at its lowest trainable ratio
    and at 0.5 (minidtr train's settings): the same event log, line for line."""
    from minidtr.training import TrainConfig, train

    for ratio in (LOWEST[model], 0.5):
        for heuristic in HEURISTIC_NAMES:
            logs = []
            for reference in (False, True):
                config = TrainConfig(
                    model,
                    steps=2,
                    ratio=ratio,
                    heuristic=heuristic,
                    record_events=True,
                    reference=reference,
                    max_wall_slowdown=None,
                )
                with isolated_allocator():
                    try:
                        result = train(config)
                        logs.append(("ok", result.runtime.events, result.stats["remats"]))
                    except md.BudgetError as error:  # a ThrashError too: compare messages
                        logs.append(("failed", str(error), None))
            assert logs[0][0] == logs[1][0], (model, ratio, heuristic)
            if logs[0][0] == "ok":
                assert_same_events(logs[0][1], logs[1][1])
                assert logs[0][2] == logs[1][2]
            else:
                assert logs[0][1] == logs[1][1]


def storages_made(make, reference: bool) -> list:
    """The storages of the outputs ``make()`` returns, made with or without the reference."""
    with md.Runtime(cost="flops", reference=reference):
        out = make()
    return [t.storage for t in (out if isinstance(out, tuple | list) else (out,))]


def assert_same_storages(fast_made: list, reference_made: list) -> None:
    from minidtr.runtime.storage import Storage

    skip = {"id", "buffer", "last_access", "__weakref__", "op", "shared", "inputs", "parents"}
    for a, b in zip(fast_made, reference_made, strict=True):
        for name in Storage.__slots__:
            if name not in skip:
                assert getattr(a, name) == getattr(b, name), name
        assert type(a.op) is type(b.op) and (a.shared is None) == (b.shared is None)
        assert [c.storage for c in a.inputs] == [c.storage for c in b.inputs]
        assert a.parents == b.parents
        np.testing.assert_array_equal(a.buffer, b.buffer)


@pytest.mark.skipif(
    os.environ.get("MINIDTR_AUDIT") == "1",
    reason="measures minidtr without the audit (which copies outputs, general path)",
)
@pytest.mark.parametrize("kind", ["one output", "several outputs", "constants"])
def test_the_hot_path_makes_the_storages_the_reference_makes(monkeypatch, kind):
    """``FastPath`` builds storages positionally, as fast as it can; every field must be
    what the reference's keyword construction gives: one output, the outputs of a
    multi-output op (sharing a Recipe), constants (as optimizer updates make them)."""
    from minidtr.ops.op import Op

    class Halves(Op):  # two outputs, no workspace: the hot path takes it
        name = "halves"
        n_outputs = 2

        def infer(self, x):
            return [(x.shape, x.dtype), (x.shape, x.dtype)]

        def forward(self, xp, x):
            return x * 0.5, x - x * 0.5

    built = []
    compute = fast.FastPath.compute

    def noting(self, *args):
        out = compute(self, *args)
        built.append(out is not None)
        return out

    monkeypatch.setattr(fast.FastPath, "compute", noting)
    with isolated_allocator() as allocator:
        x = md.tensor(np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4))
        make = {
            "one output": lambda: md.tanh(x),
            "several outputs": lambda: md.ops.apply(Halves(), x),
            "constants": lambda: md.as_constants()(lambda: md.tanh(x) * 2.0)(),
        }[kind]
        fast_made = storages_made(make, reference=False)
        assert built == [True] * len(built) and built  # the hot path made them
        assert allocator.fast is not None
        reference_made = storages_made(make, reference=True)
    assert_same_storages(fast_made, reference_made)
    if kind == "several outputs":
        assert fast_made[0].shared is not None and len(fast_made) == 2
    if kind == "constants":
        assert all(s.op is None for s in fast_made)


class Unbounded:
    """A heuristic of a user's: every score infinite."""

    name = "unbounded"

    def score(self, storage, context) -> float:
        return float("inf")


def test_an_infinite_score_is_logged_as_null_and_the_log_reads(tmp_path):
    from minidtr.explain import explain, load_events, summarize

    with isolated_allocator():
        x = md.tensor(np.ones(256, np.float32))
        runtime = md.Runtime(budget=5 * 1024, heuristic=Unbounded(), record_events=True)
        with runtime:
            kept = [x]
            for _ in range(8):
                kept.append(md.tanh(kept[-1]))
            kept[1].numpy()
        path = tmp_path / "ev.jsonl"
        runtime.export_events(str(path))
    evictions = [e for e in runtime.events if e["event"] == "evict" and e["reason"] == "budget"]
    assert evictions and all(e["score"] is None for e in evictions)
    assert "Infinity" not in path.read_text()
    assert "Evictions forced by the budget" in explain(summarize(load_events(str(path))))


@pytest.mark.parametrize("heuristic", ["dtr_eq", "msps"])
def test_a_value_with_many_evicted_children_decides_identically(heuristic):
    """One value read by 120 ops whose outputs get evicted: h_DTR^eq's classes border
    rows through up to 47 evicted neighbours, with more than 32 rows to recompute at a
    time, the table's wide case (its repeat test was O(width^2) array operations a
    decision)."""

    def run(reference: bool):
        with isolated_allocator():
            runtime = md.Runtime(
                budget=200_000, heuristic=heuristic, cost="flops", reference=reference,
                record_events=True, max_slowdown=None, max_wall_slowdown=None,
            )  # fmt: skip
            with runtime:
                md.manual_seed(5)
                base = md.tanh(md.randn((32, 32), requires_grad=True))
                total = None
                for i in range(120):
                    part = md.sum(md.exp(base * (0.001 * i)))
                    total = part if total is None else total + part
                value = total.item()
        return value, runtime.events, runtime.stats()["evictions"]

    value, log, evictions = run(False)
    ref_value, ref_log, _ = run(True)
    assert value == ref_value and evictions > 100
    assert_same_events(log, ref_log)
