"""``learned``: next uses predicted from the step before, live and in the simulator."""

import pytest

import minidtr as md
from minidtr import sim
from minidtr.runtime.learned import PREDICTED, Learned, parse_learned
from minidtr.runtime.observers import Observer, Observers, add_observer, remove_observer
from minidtr.sim.simulator import Replayer, baseline
from minidtr.sim.trace import Annotate, Call, Constant, Release, Result
from minidtr.testing import assert_remat_equivalent, isolated_allocator


def repeated_steps(steps: int):
    """A small training-like step (forward, backward, update) repeated ``steps`` times."""
    ins = [Annotate("START"), Constant("w0", 40)]
    for k in range(steps):
        w = f"w{k}"
        ins += [
            Constant(f"x{k}", 40),
            Call("f", (f"x{k}", w), (Result(f"a{k}", 100),), 5.0),
            Call("g", (f"a{k}",), (Result(f"b{k}", 100),), 5.0),
            Call("h", (f"b{k}",), (Result(f"c{k}", 100),), 5.0),
            Call("loss", (f"c{k}",), (Result(f"l{k}", 4),), 1.0),
            Call("h_grad", (f"l{k}", f"b{k}"), (Result(f"gb{k}", 100),), 5.0),
            Release(f"c{k}"),
            Call("g_grad", (f"gb{k}", f"a{k}"), (Result(f"ga{k}", 100),), 5.0),
            Release(f"b{k}"),
            Release(f"gb{k}"),
            Call("f_grad", (f"ga{k}", f"x{k}"), (Result(f"gw{k}", 40),), 5.0),
            Release(f"a{k}"),
            Release(f"ga{k}"),
            Call("update", (w, f"gw{k}"), (Result(f"w{k + 1}", 40),), 1.0, constant=True),
            Release(w),
            Release(f"gw{k}"),
            Release(f"x{k}"),
            Release(f"l{k}"),
        ]
    return sim.make_trace(ins, f"steps-{steps}")


def test_names():
    assert parse_learned("learned") == ("estar", True, "time", PREDICTED)
    assert parse_learned("learned+local+nosize+time") == ("local", False, "time", PREDICTED)
    assert parse_learned("learned+estar+size+ops+0.7").weight == 0.7
    assert Learned("learned+estar+size+time+1").weight == 1.0
    for bad in (
        "learned+x+size+time",
        "learned+none+size",
        "learnt",
        "learned+estar+size+time+2",
        "learned+estar+size+time+nan",
        "learned+estar+size+time+x",
        "learned+estar+size",
    ):
        with pytest.raises(ValueError, match="unknown heuristic"):
            parse_learned(bad)
    assert isinstance(md.Runtime(heuristic="learned").heuristic, Learned)


# a's accesses in a step, counted from its creation by f: g reads it 1 op later and 5 of
# compute later, g_grad 5 ops (g, h, loss, h_grad between) and 21 of compute later
@pytest.mark.parametrize("distance, after_g, next_use", [("ops", 2, 5), ("time", 10.0, 21.0)])
def test_the_second_step_is_predicted_from_the_first(distance, after_g, next_use):
    trace = repeated_steps(2)
    ins = trace.instructions
    replayer = Replayer(None, f"learned+estar+size+{distance}", trace=trace)
    learned = replayer.runtime.heuristic
    assert isinstance(learned, Learned)
    for step in (0, 1):
        at_g = next(p for p, i in enumerate(ins) if isinstance(i, Call) and i.args == (f"a{step}",))
        while replayer.position <= at_g:
            replayer.step(ins[replayer.position])
        a = replayer.cells[f"a{step}"].storage
        assert learned.clock - learned.born[a.id] == after_g
        predicted = learned.predicted_distance(a)
        if step == 0:
            assert predicted is None  # nothing to learn from yet
        else:
            assert learned.profile[learned.signature[a.id]] == [after_g / 2, next_use]
            assert predicted == next_use - after_g
    replayer.close()


def test_a_single_step_has_nothing_to_predict_from():
    trace = repeated_steps(1)
    peak = baseline(trace).peak_memory
    for ratio in (0.9, 0.8):
        replayer = Replayer(int(ratio * peak), "learned", trace=trace)
        for ins in trace.instructions:
            replayer.step(ins)
        learned = replayer.runtime.heuristic
        assert replayer.stats.evictions > 0 and learned.fallbacks > 0
        assert learned.predicted == 0
        assert replayer.stats.peak_memory <= ratio * peak
        replayer.close()


def test_past_its_last_use_a_storage_is_a_period_away():
    """Past the last use of its profile, the predicted distance is the time between the
    creations of its signature's last two storages (a step's compute: 32 here), and the
    score weighs it with the staleness (``PREDICTED``)."""
    trace = repeated_steps(2)
    replayer = Replayer(None, "learned", trace=trace)
    learned = replayer.runtime.heuristic
    ins = trace.instructions
    at_f_grad = max(p for p, i in enumerate(ins) if getattr(i, "op", "") == "f_grad")
    while replayer.position <= at_f_grad:
        replayer.step(ins[replayer.position])
    a = replayer.cells["a1"].storage  # g_grad, its last use, has run
    assert learned.predicted_distance(a) == 32.0
    staleness = learned.staleness(a)
    assert staleness == 10.0  # g_grad (stamped as it starts) and f_grad ran since
    context = replayer.allocator.eviction.context
    distance = 32.0**PREDICTED * staleness ** (1 - PREDICTED)
    assert learned.look_ahead(a, context) == (distance, True)
    assert learned.score(a, context) == learned.cost_term(a, context) / a.nbytes / distance
    terms = learned.terms(a, context)
    assert terms["predicted distance"] == 32.0 and terms["distance"] == distance
    replayer.close()


def test_a_signature_seen_once_has_no_period():
    trace = repeated_steps(1)
    replayer = Replayer(None, "learned", trace=trace)
    learned = replayer.runtime.heuristic
    for ins in trace.instructions:
        replayer.step(ins)
    assert learned.profile and not learned.period
    replayer.close()


def mlp_steps(steps: int = 3):
    def run():
        md.manual_seed(0)
        layers = [md.nn.Linear(16, 32), md.nn.Tanh()]
        for _ in range(4):
            layers += [md.nn.Linear(32, 32), md.nn.Tanh()]
        model = md.nn.Sequential(*layers, md.nn.Linear(32, 4))
        opt = md.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = md.randn((256, 16)), md.tensor([i % 4 for i in range(256)])
        losses = []
        for _ in range(steps):
            loss = md.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses, model

    return run


def test_live_runs_are_bit_identical_and_use_their_predictions():
    assert_remat_equivalent(mlp_steps(), budgets=[0.8, 0.7], heuristics=["learned"])
    learned = Learned()
    with isolated_allocator():
        peak_runtime = md.Runtime()
        with peak_runtime:
            mlp_steps()()
        peak = peak_runtime.stats()["peak_memory"]
    budgeted = md.Runtime(budget=int(0.7 * peak), heuristic=learned)
    with isolated_allocator(), budgeted:
        mlp_steps()()
    assert budgeted.stats()["evictions"] > 0
    assert learned.predicted > 0 and learned.fallbacks > 0  # steps 2-3 looked ahead
    assert learned.allocator is not None and learned not in Observers([]).members


def test_observers_share_an_allocator():
    class Counter(Observer):
        def __init__(self):
            self.computed = 0

        def on_compute(self, recipe, cells):
            self.computed += 1

    first, second = Counter(), Counter()
    with isolated_allocator() as allocator:
        add_observer(allocator, first)
        add_observer(allocator, second)
        assert isinstance(allocator.observer, Observers)
        (md.randn((4,)) * 2).sum()
        remove_observer(allocator, first)
        assert allocator.observer is second
        (md.randn((4,)) * 2).sum()
        remove_observer(allocator, second)
        assert allocator.observer is None
    assert (first.computed, second.computed) == (3, 6)  # randn, mul, sum each time


def test_learning_goes_on_across_runtimes_and_stops_outside_them():
    learned = Learned()
    with isolated_allocator() as allocator:
        with md.Runtime(heuristic=learned):
            assert learned in [allocator.observer]
            mlp_steps(1)()
        assert allocator.observer is None
        profiles = len(learned.profile)
        assert profiles > 0
        with md.Runtime(heuristic=learned), sim.record() as recorder:
            assert isinstance(allocator.observer, Observers)
            mlp_steps(1)()
        assert allocator.observer is None and recorder.trace().ops > 10
    assert len(learned.profile) == profiles  # the same signatures again


def test_nested_runtimes_sharing_one_instance_learn_until_the_outer_leaves():
    """Leaving the inner runtime stopped the outer one's learning (its observer went)."""
    learned = Learned()
    with isolated_allocator() as allocator:
        with md.Runtime(heuristic=learned):
            with md.Runtime(heuristic=learned):
                mlp_steps(1)()
            assert allocator.observer is learned
            before = learned.ops
            mlp_steps(1)()
            assert learned.ops > before
        assert allocator.observer is None and not learned.attached


def test_another_allocator_starts_from_nothing():
    learned = Learned()
    with isolated_allocator(), md.Runtime(heuristic=learned):
        mlp_steps(1)()
    assert learned.profile
    with isolated_allocator(), md.Runtime(heuristic=learned):  # its storage ids mean nothing
        assert not learned.profile and learned.ops == 0
