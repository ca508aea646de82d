"""minidtr.testing for users: memory of its own per run, determinism first, infeasible budgets
with their floor, composable strategies, the pytest plugin, and docs/testing.md's example."""

import os
import pathlib
import re
import sys
import unittest

import hypothesis
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

import minidtr as md
from minidtr.runtime import registry as allocator_module
from minidtr.testing import (
    InfeasibleBudget,
    NondeterminismError,
    RematMismatch,
    assert_remat_equivalent,
    budget_floor,
    isolated_allocator,
    isolated_allocators,
    recompute,
    run_under,
)
from minidtr.testing.equivalence import describe_difference
from minidtr.testing.floor import Floor
from minidtr.testing.programs import mlp_training
from minidtr.testing.strategies import (
    budget_ratios,
    deallocs,
    heuristics,
    minimal_budget,
    random_programs,
    remat_configs,
    training_loops,
    unbounded_peak,
)

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"


def small_mlp(seed=0, depth=3, width=8, seeded=True, batch=64):
    """A user's own model the way docs/testing.md builds it (md.nn, SGD, dropout)."""

    def run():
        if seeded:
            md.manual_seed(seed)
        layers = []
        for i in range(depth):
            layers += [md.nn.Linear(8 if i == 0 else width, width), md.nn.Tanh()]
            layers.append(md.nn.Dropout(0.1))
        model = md.nn.Sequential(*layers, md.nn.Linear(width, 3))
        opt = md.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.default_rng(seed)
        x = md.tensor(rng.standard_normal((batch, 8)), dtype=md.float32)
        y = md.tensor(rng.integers(0, 3, batch))
        losses = []
        for _ in range(2):
            loss = md.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        return losses, model.parameters()

    return run


def allocator_state(allocator):
    return (
        allocator.memory,
        allocator.constant_bytes,
        allocator.next_id,
        len(allocator.eviction.candidates),
    )


# ---- memory of its own ---------------------------------------------------------------------


def test_leftovers_do_not_count_and_nothing_is_left_behind():
    fn = small_mlp()
    peak = unbounded_peak(fn)
    leftovers = [md.randn((200, 200), seed=1) for _ in range(3)]  # 3 x 160 KB, far over budget
    allocator = allocator_module.allocator_for("cpu")
    before = allocator_state(allocator)
    assert allocator.memory > 3 * peak
    (report,) = assert_remat_equivalent(fn, budgets=[int(0.8 * peak)], heuristics=["dtr"])
    assert report["status"] == "ok" and report["peak_memory"] <= int(0.8 * peak)
    assert report["evictions"] > 0
    assert allocator_module.allocator_for("cpu") is allocator
    assert allocator_state(allocator) == before
    assert leftovers[0].numpy().shape == (200, 200)


def test_a_kept_budget_error_does_not_disturb_the_next_call():
    fn = small_mlp()
    kept = []
    with pytest.raises(md.BudgetError) as info:
        assert_remat_equivalent(fn, budgets=[0.05])
    kept.append(info)  # what a test framework keeps: the error, its traceback, their tensors
    for _ in range(2):  # the same every time (hypothesis replays a failing example)
        with pytest.raises(InfeasibleBudget) as again:
            assert_remat_equivalent(fn, budgets=[0.05])
        assert str(again.value) == str(info.value)
    assert assert_remat_equivalent(fn, budgets=[0.9])[0]["status"] == "ok"


def test_grads_of_are_restored_and_captured_inputs_are_not_counted():
    rng = np.random.default_rng(0)
    w = md.tensor(rng.standard_normal((64, 64)), requires_grad=True)  # made outside: 32 KB
    x = md.tensor(rng.standard_normal((128, 64)))
    w.grad = md.tensor(np.full((64, 64), 7.0))

    def step():
        h = x
        for _ in range(4):
            h = md.tanh(h @ w)
        loss = (h * h).mean()
        loss.backward()
        return loss

    reports = assert_remat_equivalent(step, budgets=[0.7], grads_of=[w])
    assert reports[0]["status"] == "ok" and reports[0]["remats"] > 0
    assert (w.grad.numpy() == 7.0).all()
    values = run_under(step, md.Runtime(cost="flops"), grads_of=[w])
    assert [name for name, _ in values] == ["out", "grad[0]"]
    assert (w.grad.numpy() == 7.0).all()


def test_isolated_allocators_restore_every_device():
    allocator = allocator_module.allocator_for("cpu")
    with isolated_allocators():
        inner = allocator_module.allocator_for("cpu")
        assert inner is not allocator and inner.memory == 0
        md.randn((10, 10), seed=0)
    assert allocator_module.allocator_for("cpu") is allocator
    with isolated_allocator() as fresh:
        assert allocator_module.allocator_for("cpu") is fresh
    assert allocator_module.allocator_for("cpu") is allocator


# ---- determinism first ---------------------------------------------------------------------


def test_a_nondeterministic_function_is_named_as_such():
    with pytest.raises(NondeterminismError) as info:
        assert_remat_equivalent(small_mlp(seeded=False), budgets=[0.7])
    message = str(info.value)
    assert not isinstance(info.value, RematMismatch)
    assert "not deterministic" in message
    assert "md.manual_seed" in message and "seed=" in message
    # names the first output that differs: the first loss, a 0-d float32
    assert re.search(r"out\[0\]\[0\] differs: shape \(\) float32: \S+ vs \S+", message), message
    assert_remat_equivalent(small_mlp(seeded=True), budgets=[0.7])


def test_nondeterminism_names_an_array_element():
    state = {"calls": 0}

    def fn():
        state["calls"] += 1
        values = np.zeros((3, 4))
        values[1, 2] = state["calls"]
        return {"weights": md.tensor(values), "loss": 1.0}

    with pytest.raises(NondeterminismError, match=r"out\['weights'\] differs: shape \(3, 4\) "):
        assert_remat_equivalent(fn)
    with pytest.raises(NondeterminismError, match=r"first at index \(1, 2\): 1\.0 vs 2\.0"):
        state["calls"] = 0
        assert_remat_equivalent(fn)


def test_differences_are_described_bit_for_bit():
    assert "(bits 0x8000000000000000 vs 0x0)" in describe_difference(
        np.array([0.0, -0.0]), np.array([0.0, 0.0])
    )
    assert describe_difference(np.float32(1.5), np.float32(2.5)) == "shape () float32: 1.5 vs 2.5"
    assert "shape/dtype (2, 3) float32 vs (3, 2) float32" in describe_difference(
        np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32)
    )
    assert "1 of 3 elements differ, the first at index (2,): 3 vs 4" in describe_difference(
        np.array([1, 2, 3]), np.array([1, 2, 4])
    )


# ---- infeasible budgets and the floor ------------------------------------------------------


@pytest.mark.slow
def test_hypothesis_reports_an_infeasible_budget_not_a_flaky_test(pytester):
    # the report: with budgets drawn down to infeasible ones and "raise", hypothesis
    # must shrink to a clean failing example (each replay on fresh memory), not say Flaky
    pytester.makepyfile(
        test_user="""
from hypothesis import given, settings, strategies as st
from minidtr.testing import assert_remat_equivalent
from minidtr.testing.programs import mlp_training

@settings(max_examples=20, deadline=None, database=None)
@given(st.integers(0, 3), st.floats(0.05, 0.95))
def test_mlp(seed, ratio):
    assert_remat_equivalent(mlp_training(depth=3, seed=seed), budgets=[ratio])
"""
    )
    with isolated_allocators():
        result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E *InfeasibleBudget: budget=* Floor: unbounded peak *"])
    result.stdout.no_fnmatch_line("*Flaky*")


def test_raise_names_the_configuration_and_the_floor():
    fn = small_mlp()
    with pytest.raises(InfeasibleBudget) as info:
        assert_remat_equivalent(fn, budgets=[0.2], heuristics=["lru"])
    error = info.value
    assert isinstance(error, md.BudgetError) and isinstance(error.error, md.BudgetError)
    floor = error.floor
    assert error.budget == error.error.budget and error.needed == error.error.needed
    assert error.constant == error.error.constant and error.locked == error.error.locked
    assert floor.constants <= floor.largest_op <= floor.minimal <= floor.peak
    assert error.budget < floor.minimal
    message = str(error)
    assert "heuristic=lru, dealloc=eager" in message and "of the unbounded peak" in message
    assert f"the smallest feasible budget is {floor.minimal:,} bytes" in message
    assert f"constants alone {floor.constants:,}" in message
    assert f"the largest single op needs {floor.largest_op:,}" in message


def test_a_budget_above_the_floor_can_fail_and_the_error_says_so():
    """Feasibility is not monotonic in the budget: under ``random`` this program replays at
    its floor and fails at some budgets above it (the simulator and the live run agree),
    and the error says that, not "give budgets at or above the floor"."""
    from minidtr import sim
    from minidtr.testing.floor import record_reference
    from minidtr.testing.programs import Instruction, RandomProgram

    program = RandomProgram(
        n_inputs=1,
        size=4,
        instructions=[
            Instruction(op="sub", args=(0, 0), drop=(), read=True),
            Instruction(op="attention", args=(0, 1), drop=(), read=False),
            Instruction(op="tanh", args=(1,), drop=(), read=False),
            Instruction(op="reshape_roundtrip", args=(2,), drop=(), read=True),
            Instruction(op="matmul", args=(4, 2), drop=(1, 2), read=False),
            Instruction(op="maximum", args=(5, 3), drop=(3, 4), read=False),
        ],
        outputs=(0, 5, 6),
        seed=22,
        dtype=np.float64,
        reads=[],
    )
    floor = budget_floor(program, "random")
    trace, _ = record_reference(program, "flops", "cpu")
    failing = [
        budget
        for budget in range(floor.minimal, floor.peak, 4)
        if sim.simulate(trace, budget=budget, heuristic="random", outputs=False).status != "ok"
    ]
    assert failing, floor
    with pytest.raises(InfeasibleBudget) as info:
        assert_remat_equivalent(program, budgets=[failing[0]], heuristics=["random"])
    message = str(info.value)
    assert info.value.budget == failing[0] > floor.minimal
    assert "This budget is above that one: under heuristic=random a larger budget" in message
    assert "Give budgets at or above the floor" not in message


def test_the_floor_is_the_live_minimal_budget():
    fn = mlp_training(depth=4, width=12, steps=2, seed=3)
    for heuristic in ("dtr", "lru"):
        floor = budget_floor(fn, heuristic)
        live = minimal_budget(fn, heuristic, peak=floor.peak, max_slowdown=floor.max_slowdown)
        assert abs(floor.minimal - live) <= floor.peak // 100 + 1, (floor, live)
        (report,) = assert_remat_equivalent(fn, budgets=[floor.minimal], heuristics=[heuristic])
        assert report["peak_memory"] <= floor.minimal
        with pytest.raises(md.BudgetError):
            assert_remat_equivalent(fn, budgets=[floor.largest_op - 1], heuristics=[heuristic])


def constants_kept_by_recipes():
    """Two constants whose handles die while a live value's recipe still reads them."""

    def run():
        x = md.tensor(np.ones(1000))
        h = md.tanh(md.tensor(np.ones(1000)))
        y = h * x
        del x, h  # eager keeps both inputs (y's recipe needs h, h's its input); banish drops them
        return md.tanh(md.tensor(np.ones(3000))), y

    return run


def test_largest_op_is_a_floor_under_eager_and_ignore_but_not_banish():
    """banish makes y a constant when h dies, so the constants its recipe read can go: a
    banish run fits below ``largest_op`` (the eager run's need), and the search for its
    minimal budget does not start there."""
    fn = constants_kept_by_recipes()
    for dealloc in ("eager", "ignore"):
        floor = budget_floor(fn, "dtr", dealloc)
        with pytest.raises(md.BudgetError):
            assert_remat_equivalent(fn, budgets=[floor.largest_op - 1], dealloc=[dealloc])
    floor = budget_floor(fn, "dtr", "banish")
    (report,) = assert_remat_equivalent(fn, budgets=[floor.largest_op - 1], dealloc=["banish"])
    assert report["peak_memory"] < floor.largest_op
    assert floor.minimal is not None and floor.minimal < floor.largest_op
    (report,) = assert_remat_equivalent(fn, budgets=[floor.minimal], dealloc=["banish"])
    assert "the constants an eager run keeps alive then" in floor.describe()


def test_record_reports_infeasible_configurations_and_checks_the_rest():
    fn = small_mlp()
    reports = assert_remat_equivalent(
        fn, budgets=[0.2, 0.9], heuristics=["dtr", "size"], on_budget_error="record"
    )
    assert [r["status"] for r in reports] == ["infeasible", "infeasible", "ok", "ok"]
    for report in reports[:2]:
        assert report["floor"]["minimal"] > report["budget"]
        assert "needs" in report["error"]
        assert report["peak_memory"] <= report["budget"]
    assert [r["status"] for r in assert_remat_equivalent(fn, allow_budget_error=True)]


def test_skip_outside_hypothesis_skips_with_the_floor():
    fn = small_mlp()
    with pytest.raises(unittest.SkipTest, match="Floor: unbounded peak"):
        assert_remat_equivalent(fn, budgets=[0.9, 0.2], on_budget_error="skip")


def test_skip_under_hypothesis_rejects_the_example():
    fn = small_mlp()

    @settings(max_examples=3, deadline=None, database=None)
    @given(st.just(0.05))
    def only_infeasible(ratio):
        assert_remat_equivalent(fn, budgets=[ratio], on_budget_error="skip")

    with pytest.raises(Unsatisfiable):
        only_infeasible()


class NoisyTanh(md.ops.op.Op):
    """tanh plus a draw from NumPy's global generator: a different result at each run."""

    name = "noisy_tanh"
    retain_outputs = (0,)

    def infer(self, x):
        return [(x.shape, x.dtype)]

    def forward(self, xp, x):
        return xp.tanh(x) + np.random.standard_normal(x.shape).astype(x.dtype) * 1e-3

    def backward(self, ctx, grad):
        (y,) = ctx.outputs
        return (grad * (1 - y * y),)


def noisy_chain():
    def run():
        np.random.seed(0)
        rng = np.random.default_rng(0)
        w = md.tensor(rng.standard_normal((32, 32)) * 0.2, requires_grad=True)
        h = md.tensor(rng.standard_normal((16, 32)))
        for _ in range(6):
            h = md.ops.op.apply(NoisyTanh(), h @ w)
        loss = (h * h).mean()
        loss.backward()
        return loss, w.grad

    return run


def test_an_impure_op_is_named_and_its_configuration_runs_first_next_time(monkeypatch):
    """A budgeted run that differs is run again audited, which names the op; shrinking
    replays the example, and the configuration that failed then runs first."""
    from minidtr.testing import equivalence

    runs = []
    original = equivalence.Checker.run

    def counting(self, nbytes, heuristic, policy, audit):
        runs.append((nbytes, audit))
        return original(self, nbytes, heuristic, policy, audit)

    monkeypatch.setattr(equivalence.Checker, "run", counting)
    monkeypatch.setattr(equivalence, "_FAILED", [])
    budgets = [10**9, 10**9 + 1, 10**9 + 2, 0.75]  # only the last evicts anything
    for _ in range(2):
        runs.clear()
        with pytest.raises(RematMismatch) as info:
            assert_remat_equivalent(noisy_chain(), budgets=budgets)
        message = str(info.value)
        assert message.startswith("budget=") and "of the unbounded peak" in message
        assert "recomputing op 'noisy_tanh' (test_testing.NoisyTanh, applied at " in message
        assert "the usual cause is an impure user op" in message
        assert runs[-1][1] is True and runs[-1][0] == runs[-2][0]  # the audited rerun
    assert [audit for _, audit in runs] == [False, True]  # the failing one alone, first


def test_a_module_returned_is_compared_by_its_parameters_and_buffers():
    """Training mode: the running statistics do not change the loss or the parameters, so
    only comparing the buffers sees that they were updated differently."""
    momentum = iter([0.1, 0.2])

    def fn():
        md.manual_seed(0)
        model = md.nn.Sequential(
            md.nn.Conv2d(2, 3, 3), md.nn.BatchNorm2d(3, momentum=next(momentum))
        )
        loss = model(md.randn((4, 2, 5, 5))).sum()
        loss.backward()
        return loss, model

    with pytest.raises(NondeterminismError, match=r"out\[1\]\.1\.running_mean differs"):
        assert_remat_equivalent(fn)


def test_a_cache_kept_between_calls_is_told_by_the_peak_and_the_storages():
    cache = {}

    def fn():
        rng = np.random.default_rng(0)
        x = md.tensor(rng.standard_normal((16, 16)))
        if "scale" not in cache:  # the second run reuses what the first made
            cache["scale"] = md.tanh(x @ x).sum().detach()
        return md.tanh(x / cache["scale"]).sum()

    with pytest.raises(NondeterminismError) as info:
        assert_remat_equivalent(fn)
    message = str(info.value)
    assert "gave the same values but differ in peak memory (" in message
    assert "storages made (" in message and "a cache kept from one call to the next" in message


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="on_budget_error must be one of"):
        assert_remat_equivalent(small_mlp(), on_budget_error="ignore")
    with pytest.raises(ValueError, match="a budget is bytes"):
        assert_remat_equivalent(small_mlp(), budgets=[-0.5])
    with pytest.raises(TypeError, match=r"cannot compare a object at out\[1\]"):
        assert_remat_equivalent(lambda: (1.0, object()))


# ---- strategies ----------------------------------------------------------------------------


def test_random_programs_as_the_docs_write_them():
    """docs/testing.md's *Strategies* example, run as written: its health checks on. Drawn
    as ratios of the peak, four budgets in five were below the floor and rejected, and
    hypothesis's filter_too_much check failed on most seeds."""
    from doc_commands import python_blocks

    (source,) = [
        source
        for _, source in python_blocks("docs/testing.md")
        if "def test_random_programs(" in source
    ]
    namespace: dict = {"__name__": "docs_testing_example"}
    exec(compile(source, "docs/testing.md", "exec"), namespace)
    hypothesis.seed(1)(namespace["test_random_programs"])()  # a seed the old example failed


@settings(max_examples=5, deadline=None)
@given(
    training_loops(kinds=("lstm", "tree")),
    remat_configs(ratio=budget_ratios(0.7, 0.9), heuristic=heuristics(["dtr", "lru"])),
)
def test_training_loops_compose_with_configurations(loop, config):
    kind, fn = loop
    assert kind in ("lstm", "tree")
    assert config["dealloc"] == ["eager"]
    assert_remat_equivalent(fn, on_budget_error="record", **config)


def test_strategies_refuse_unknown_names():
    with pytest.raises(ValueError, match="heuristics must be a non-empty subset"):
        heuristics(["dtr", "fifo"])
    with pytest.raises(ValueError, match="deallocs must be a non-empty subset"):
        deallocs([])
    with pytest.raises(ValueError, match="min_ratio <= max_ratio"):
        budget_ratios(0.9, 0.2)
    with pytest.raises(ValueError, match="kinds must be"):
        training_loops(kinds=("resnet",))
    with pytest.raises(ValueError, match="ops must be"):
        random_programs(ops=("conv",))


# ---- the pytest plugin ---------------------------------------------------------------------

TRAIN = """
import numpy as np
import pytest
import minidtr as md

KEPT = []  # what a framework or a cache may keep of a finished test


def train(budget):
    rng = np.random.default_rng(0)
    w = md.tensor(rng.standard_normal((64, 64)), requires_grad=True)
    x = md.tensor(rng.standard_normal((128, 64)))
    with md.Runtime(budget=budget, cost="flops") as rt:
        h = x
        for _ in range(6):
            h = md.tanh(h @ w)
        loss = (h * h).mean()
        loss.backward()
        value = loss.item()
    return value, rt.stats()
"""

EXPECTS_BUDGET_ERROR = """
def test_a_budget_too_small_raises():
    with pytest.raises(md.BudgetError) as info:
        train(budget=100_000)
    KEPT.append(info)
"""

FITS_ITS_BUDGET = """
def test_training_fits_its_budget():
    value, stats = train(budget=400_000)  # alone it trains from about 370 KB
    assert stats["peak_memory"] <= 400_000 and stats["evictions"] > 0
"""


def run_in_both_orders(pytester, *args):
    """Outcomes with the BudgetError test first, then with it last (pytest runs a file's
    tests in the order they are defined)."""
    outcomes = []
    for tests in (
        (EXPECTS_BUDGET_ERROR, FITS_ITS_BUDGET),
        (FITS_ITS_BUDGET, EXPECTS_BUDGET_ERROR),
    ):
        pytester.makepyfile(test_order=TRAIN + "".join(tests))
        with isolated_allocators():  # each session starts from fresh memory, as a process
            result = pytester.runpytest("-p", "no:cacheprovider", *args)
        outcomes.append(result)
    return outcomes


def test_plugin_makes_a_suite_independent_of_test_order(pytester):
    for result in run_in_both_orders(pytester, "-p", "minidtr.testing.plugin"):
        result.assert_outcomes(passed=2)


def test_without_the_plugin_the_kept_error_breaks_the_next_test(pytester):
    # the control: the same file fails when the BudgetError test runs first
    first, second = run_in_both_orders(pytester, "-p", "no:minidtr.testing.plugin")
    first.assert_outcomes(passed=1, failed=1)
    first.stdout.fnmatch_lines(  # a BudgetError, or its subclass ThrashError
        ["E *minidtr.runtime.errors.*Error: *", "FAILED *test_training_fits_its_budget*"]
    )
    second.assert_outcomes(passed=2)


def test_plugin_fixture_and_opt_out(pytester):
    pytester.makepyfile(
        test_fixture="""
import minidtr as md
from minidtr.runtime import registry as allocator_module

def test_own_allocator(minidtr_allocator):
    assert minidtr_allocator.memory == 0
    x = md.randn((10, 10), seed=0, dtype=md.float64)
    assert minidtr_allocator.memory == x.numpy().nbytes == 800
    assert allocator_module.allocator_for("cpu") is minidtr_allocator
"""
    )
    result = pytester.runpytest("-p", "minidtr.testing.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nminidtr_isolate = false\n")
    result = pytester.runpytest("-p", "minidtr.testing.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# ---- docs/testing.md -----------------------------------------------------------------------


def doc_examples() -> dict[str, str]:
    """The code blocks of docs/testing.md marked ``<!-- example: PATH -->``."""
    text = (ROOT / "docs" / "testing.md").read_text()
    found = re.findall(r"<!-- example: (\S+) -->\n```python\n(.*?)```\n", text, re.S)
    return dict(found)


def test_docs_include_the_example_files_verbatim():
    examples = doc_examples()
    assert set(examples) == {
        "docs/examples/test_my_model.py",
        "docs/examples/shrink_budget.py",
        "docs/examples/planted_bugs.py",
    }
    for path, code in examples.items():
        assert (ROOT / path).read_text() == code, f"{path} differs from its copy in testing.md"


def run_example(pytester, monkeypatch, *args):
    """Run docs/examples/test_my_model.py as a user would: its own process, the plugin."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_my_model=(EXAMPLES / "test_my_model.py").read_text())
    return pytester.runpytest_subprocess(
        "-p",
        "minidtr.testing.plugin",
        "-p",
        "no:cacheprovider",
        "--hypothesis-show-statistics",
        *args,
    )


def test_the_docs_example_passes(pytester, monkeypatch):
    # the default run draws 25 examples; the slow test below runs the file's own 100
    pytester.makeconftest(
        "from hypothesis import settings\nsettings.register_profile('quick', max_examples=25)\n"
    )
    result = run_example(pytester, monkeypatch, "--hypothesis-profile=quick")
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r".*- 25 passing, 0 failing, and \d+ invalid test cases"])


@pytest.mark.slow
def test_the_docs_example_passes_100_examples(pytester, monkeypatch):
    result = run_example(pytester, monkeypatch)
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r".*- 100 passing, 0 failing, and \d+ invalid test cases"])


def test_the_docs_shrink_script_runs(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in ("test_my_model.py", "shrink_budget.py"):
        (pytester.path / name).write_text((EXAMPLES / name).read_text())
    result = pytester.run(sys.executable, "shrink_budget.py", timeout=300)
    assert result.ret == 0, result.stderr.str()
    result.stdout.re_match_lines([r"unbounded peak [\d,]+ bytes; constants alone", r"no budget .*"])


@pytest.mark.parametrize("max_slowdown, says", [(None, "runs with"), (20.0, "runs within a 20x")])
def test_a_floor_without_a_feasible_budget_describes_itself(max_slowdown, says):
    """Also without a slowdown limit (``max_slowdown=None``), which once raised TypeError."""
    floor = Floor(100, 10, 20, None, "dtr", "banish", max_slowdown)
    assert f"no budget below the peak {says}" in floor.describe()


def test_grads_of_is_left_alone_when_a_budget_is_infeasible():
    """The floor's recording ran ``fn`` without clearing and restoring ``grads_of``: the
    caller's weight kept a gradient that grew with every call."""
    w = md.tensor(np.ones((8, 5)), requires_grad=True)
    x = np.ones((4, 8))

    def step():
        loss = md.tanh(md.tensor(x) @ w).sum()
        loss.backward()
        return loss

    for _ in range(2):
        (report,) = assert_remat_equivalent(
            step, budgets=[0.1], grads_of=[w], on_budget_error="record"
        )
        assert report["status"] == "infeasible" and w.grad is None


@pytest.mark.parametrize(
    "options, says",
    [
        ({"budgets": [float("nan")]}, "a budget is bytes .* got nan"),
        ({"budgets": [float("inf")]}, "a budget is bytes .* got inf"),
        ({"budgets": []}, "budgets is empty"),
        ({"heuristics": []}, "heuristics is empty"),
        ({"dealloc": []}, "dealloc is empty"),
    ],
)
def test_arguments_that_would_check_nothing_or_fail_late_are_refused(options, says):
    calls = []

    def fn():
        calls.append(1)
        return md.tanh(md.tensor([1.0]))

    with pytest.raises(ValueError, match=f"^assert_remat_equivalent: {says}"):
        assert_remat_equivalent(fn, **options)
    assert not calls  # before any run


@pytest.mark.parametrize("returned", [None, [], {"loss": None}])
def test_a_function_that_returns_nothing_to_compare_is_refused(returned):
    """It passed: every run compared equal to the unbounded one, having nothing."""
    w = md.tensor(np.ones((8, 5)), requires_grad=True)

    def step():
        md.tanh(md.tensor(np.ones((4, 8))) @ w).sum().backward()
        return returned

    with pytest.raises(
        ValueError, match=r"^assert_remat_equivalent: fn returned nothing to compare"
    ):
        assert_remat_equivalent(step, budgets=[10**6])
    assert assert_remat_equivalent(step, budgets=[10**6], grads_of=[w])  # the gradient is compared


def test_a_lone_budget_is_taken_and_run_under_refuses_what_is_not_a_runtime():
    """budgets=0.5 was "'float' object is not iterable"; run_under(fn, "dtr") an
    AttributeError about 'device'."""

    def fn():
        return md.tanh(md.tensor(np.ones(64)))

    (report,) = assert_remat_equivalent(fn, budgets=10**6)
    assert report["label"].startswith("budget=1,000,000 bytes")
    with pytest.raises(ValueError, match="a budget is bytes .* got '0.5'$"):
        assert_remat_equivalent(fn, budgets="0.5")
    with pytest.raises(
        TypeError, match="^run_under: runtime must be an md.Runtime .* got str 'dtr'$"
    ):
        run_under(fn, "dtr")


def test_numpy_budgets_a_lone_heuristic_name_and_mixed_dict_keys_are_taken():
    def fn():
        return {1: md.tanh(md.tensor(np.ones(64))), "a": md.exp(md.tensor(np.ones(64)))}

    reports = assert_remat_equivalent(
        fn, budgets=[np.int64(10**6), np.float64(0.9)], heuristics="dtr"
    )
    labels = [report["label"] for report in reports]
    assert labels[0].startswith("budget=1,000,000 bytes") and "(0.900 of" in labels[1]
    assert repr(heuristics("dtr")) == "just('dtr')" and repr(deallocs("eager")) == "just('eager')"
    assert "('mlp', mlp_training" in repr(training_loops("mlp"))  # (it was split into letters)
    with pytest.raises(ValueError, match="need 0 < min_ratio <= max_ratio"):
        budget_ratios(0.5, float("inf"))


def test_a_floor_refuses_a_limit_it_cannot_use_and_describes_an_empty_program():
    with pytest.raises(ValueError, match="budget_floor: max_slowdown must be > 1 or None, got nan"):
        budget_floor(lambda: None, max_slowdown=float("nan"))
    assert "0 bytes (0.000 of peak)" in budget_floor(lambda: None).describe()


def test_recompute_of_a_tensor_already_evicted_recomputes_it():
    """It raised "cannot evict ...: it is not resident"."""
    with isolated_allocator() as allocator:
        a = md.tanh(md.randn((32, 32), seed=1))
        expected = a.numpy()
        allocator.evict(a.cell.storage, reason="budget")
        assert not a.is_resident
        assert recompute(a).tobytes() == expected.tobytes()


def test_recomputations_asked_for_are_not_charged_to_the_thrash_guard():
    """Twelve recompute(a) under a budget that evicts nothing ended in ThrashError "the
    budget is too small"; they count in the stats, not in the guard's slowdown."""
    with isolated_allocator(), md.Runtime(budget=10**7, cost="flops") as rt:
        x = md.randn((64, 64), seed=1)
        a = md.tanh(x @ x)
        for _ in range(12):
            recompute(a)
    stats = rt.stats()  # the with block ended without a ThrashError
    assert stats["remats"] >= 12 and stats["slowdown"] > rt.max_slowdown
    assert rt.asked_remat_cost == stats["remat_cost"]
