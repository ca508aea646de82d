"""PyTorch's optimizer interface beyond step(): param_groups (settings per group, checked
whenever set), state_dict/load_state_dict, and the learning-rate schedules, each against
torch.optim where it is installed."""

import importlib.util
import math
import pickle

import numpy as np
import pytest

import minidtr as md
from minidtr import optim
from minidtr.optim import lr_scheduler

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def make_model(seed: int = 0) -> md.nn.Module:
    md.manual_seed(seed)
    return md.nn.Sequential(
        md.nn.Linear(4, 6, dtype=md.float64), md.nn.Tanh(), md.nn.Linear(6, 3, dtype=md.float64)
    )


def batch(step: int):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((8, 4)), rng.standard_normal((8, 3))


def train_step(model, opt, step: int) -> float:
    x, y = batch(step)
    opt.zero_grad()
    diff = model(md.tensor(x)) - md.tensor(y)
    loss = (diff * diff).mean()
    loss.backward()
    opt.step()
    return loss.item()


def torch_twin(model):
    import torch

    twin = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    twin = twin.double()
    twin.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})
    return twin


def torch_step(twin, opt, step: int) -> float:
    import torch

    x, y = batch(step)
    opt.zero_grad()
    loss = ((twin(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def assert_same_parameters(model, twin, where: str) -> None:
    for (name, p), tp in zip(model.named_parameters(), twin.parameters(), strict=True):
        np.testing.assert_allclose(
            p.numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-14, err_msg=f"{where} {name}"
        )


def two_groups(model, torch_params=None):
    """The weights in one group (a learning rate of their own, no weight decay), the
    biases in another; of ``model``'s parameters or of PyTorch's in the same order."""
    params = list(torch_params) if torch_params is not None else model.parameters()
    return [{"params": params[0::2], "lr": 0.02, "weight_decay": 0.0}, {"params": params[1::2]}]


OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.01)),
    ("AdamW", dict(lr=0.01)),
]


# ---- param_groups ---------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_param_groups_hold_torchs_settings(name, options):
    """One group of every parameter, its settings PyTorch's (defaults included), each of
    ours a key of theirs with the same value."""
    import torch

    model = make_model()
    ours = getattr(optim, name)(model.parameters(), **options)
    theirs = getattr(torch.optim, name)(torch_twin(model).parameters(), **options)
    (group,) = ours.param_groups
    assert group["params"] == tuple(model.parameters())
    (torch_group,) = theirs.param_groups
    for key, value in group.items():
        if key != "params":
            assert key in torch_group and value == torch_group[key], (key, value)


@needs_torch
@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_per_group_settings_and_a_rate_changed_between_steps_as_torch(name, options):
    import torch

    model = make_model()
    twin = torch_twin(model)
    opt = getattr(optim, name)(two_groups(model), **options)
    ref = getattr(torch.optim, name)(two_groups(None, twin.parameters()), **options)
    assert all(len(pack) and len({opt.group_of[i] for i in pack}) == 1 for pack in opt.groups)
    for step in range(6):
        if step == 3:
            for groups in (opt.param_groups, ref.param_groups):
                groups[0]["lr"] *= 0.5
                groups[1]["lr"] = 0.003
        assert train_step(model, opt, step) == pytest.approx(torch_step(twin, ref, step), 1e-12)
        assert_same_parameters(model, twin, f"{name} step {step}")


def test_opt_lr_reads_and_sets_every_group():
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.lr = 0.05
    assert opt.param_groups[0]["lr"] == 0.05 == opt.lr
    grouped = optim.SGD(two_groups(model), lr=0.1)
    with pytest.raises(ValueError, match=r"SGD.lr: the param groups differ \(\[0.02, 0.1\]\)"):
        _ = grouped.lr
    grouped.lr = 0.3
    assert [g["lr"] for g in grouped.param_groups] == [0.3, 0.3]
    assert grouped.weight_decay == 0.0  # every group has the same


def test_a_setting_set_in_a_group_is_checked_as_in_the_constructor():
    model = make_model()
    sgd, adam = optim.SGD(model.parameters(), lr=0.1), optim.AdamW(model.parameters())
    group = sgd.param_groups[0]
    with pytest.raises(ValueError, match="SGD: lr must be >= 0 and finite, got nan"):
        group["lr"] = float("nan")
    with pytest.raises(TypeError, match="SGD: momentum must be a number, got str"):
        group.update(momentum="0.9")
    with pytest.raises(TypeError, match="SGD: nesterov must be True or False, got 'yes'"):
        group["nesterov"] = "yes"
    with pytest.raises(ValueError, match=r"AdamW: betas\[1\] must be in \[0, 1\), got 1.0"):
        adam.param_groups[0]["betas"] = (0.9, 1.0)
    with pytest.raises(TypeError, match="SGD: a param group's params are fixed"):
        group["params"] = []
    assert group["lr"] == 0.1 and group["momentum"] == 0.0
    group["lr"] = 1  # a number, kept as a float as the constructor keeps it
    group.setdefault("initial_lr", 0.5)  # keys that are not settings are kept as given
    assert group["lr"] == 1.0 and group["initial_lr"] == 0.5
    adam.param_groups[0]["betas"] = [0.8, 0.9]
    assert adam.betas == (0.8, 0.9)


def test_pytorchs_options_load_at_the_value_that_changes_nothing_and_are_refused_at_others():
    """Every torch.optim state dict carries maximize, foreach, dampening or amsgrad...: at
    their defaults they are kept; at another value (which minidtr's update would ignore,
    stepping the wrong way for maximize=True) they are refused, loaded or set."""
    model = make_model()
    for opt, own in (
        (optim.SGD(model.parameters(), lr=0.1), {"dampening": 0}),
        (optim.AdamW(model.parameters()), {"amsgrad": False}),
    ):
        neutral = {"maximize": False, "foreach": None, "differentiable": False, "fused": None}
        neutral |= {"capturable": False, **own}
        saved = opt.state_dict()
        saved["param_groups"][0].update(neutral)
        opt.load_state_dict(saved)
        assert {k: opt.param_groups[0][k] for k in neutral} == neutral
        name = type(opt).__name__
        for key, value in (("maximize", True), ("foreach", False), *((k, 0.5) for k in own)):
            saved["param_groups"][0][key] = value
            message = f"{name}: PyTorch's option {key}={value} is not supported"
            with pytest.raises(ValueError, match=message):
                opt.load_state_dict(saved)
            with pytest.raises(ValueError, match=message):
                opt.param_groups[0][key] = value
            saved["param_groups"][0][key] = neutral[key]
            assert opt.param_groups[0][key] == neutral[key]
    with pytest.raises(ValueError, match="SGD: PyTorch's option maximize=1 is not supported"):
        optim.SGD([{"params": model.parameters(), "maximize": 1}], lr=0.1)
    assert optim.SGD([{"params": model.parameters(), "dampening": 0.0}], lr=0.1)


def test_bad_param_groups_are_refused_naming_the_group():
    model = make_model()
    w, b = model.parameters()[:2]
    with pytest.raises(ValueError, match=r"SGD: param group 1's params\[0\] is in an earlier"):
        optim.SGD([{"params": [w, b]}, {"params": [b]}], lr=0.1)
    with pytest.raises(ValueError, match=r"Adam: param group 0 sets \['dampening'\], not a set"):
        optim.Adam([{"params": [w], "dampening": 0.1}])
    with pytest.raises(ValueError, match="SGD: nesterov=True needs a momentum above 0"):
        optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match=r"SGD: nesterov=True needs .* \(param group 1\)"):
        optim.SGD([{"params": [w]}, {"params": [b], "momentum": 0.0}], lr=0.1, momentum=0.9,
                  nesterov=True)  # fmt: skip
    with pytest.raises(TypeError, match="SGD: params must be Tensors or dicts with 'params'"):
        optim.SGD([{"params": [w]}, [b]], lr=0.1)
    with pytest.raises(ValueError, match=r"SGD: got an empty parameter list \(param group 1"):
        optim.SGD([{"params": [w]}, {"params": []}], lr=0.1)
    single = optim.SGD([{"params": w}], lr=0.1)  # one Tensor as a group's params, as torch
    assert single.params == [w]


def test_param_groups_are_changed_only_through_checks():
    """``group |= {...}`` is checked as ``group[key] = ...``; a group is not replaced,
    removed or appended (which step() skipped while state_dict() listed it): it is added
    with add_param_group."""
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    groups = opt.param_groups
    with pytest.raises(ValueError, match="SGD: lr must be >= 0 and finite, got nan"):
        groups[0] |= {"lr": float("nan")}
    groups[0] |= {"lr": 0.2}
    assert opt.lr == 0.2 and groups is opt.param_groups
    with pytest.raises(TypeError, match="SGD: a param group's 'lr' cannot be removed"):
        del groups[0]["lr"]
    refused = "SGD.param_groups: add a group with opt.add_param_group"
    extra = md.nn.init.parameter(np.ones(2), md.float64)
    for change in (
        lambda: groups.__setitem__(0, {**groups[0], "lr": float("nan")}),
        lambda: groups.append({"params": [extra], "lr": 0.5}),
        lambda: groups.extend([{"params": [extra]}]),
        lambda: groups.pop(),
        lambda: pickle.loads(pickle.dumps(opt)).param_groups.insert(0, {"params": [extra]}),
    ):
        with pytest.raises(TypeError, match=refused):
            change()
    assert len(groups) == 1 and opt.lr == 0.2


def test_param_groups_are_not_replaced_by_assignment():
    """``opt.param_groups = [...]`` would put unchecked groups in the list that
    state_dict() reads while step() went on updating the old parameters."""
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    groups = opt.param_groups
    extra = md.nn.init.parameter(np.ones(2), md.float64)
    refused = (
        r"SGD.param_groups cannot be replaced: add a group with opt.add_param_group\(.*\), "
        r"set a group's settings in place .* or make a new optimizer for other parameters"
    )
    for change in (
        lambda: setattr(opt, "param_groups", [{"params": [extra], "lr": float("nan")}]),
        lambda: setattr(opt, "param_groups", [dict(groups[0], lr=0.5)]),
        lambda: delattr(opt, "param_groups"),
    ):
        with pytest.raises(TypeError, match=refused):
            change()
    opt.param_groups = opt.param_groups  # (the same list: nothing changes)
    assert opt.param_groups is groups and opt.lr == 0.1
    opt.load_state_dict(opt.state_dict())
    revived = pickle.loads(pickle.dumps(opt))
    with pytest.raises(TypeError, match=refused):
        revived.param_groups = []
    assert revived.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_add_param_group_trains_the_new_parameters_as_torch(name, options):
    """Parameters added after a first step are updated from then on, with the group's
    settings over the constructor's; bad groups are refused as in the constructor."""
    model = make_model()
    params = model.parameters()
    opt = getattr(optim, name)(params[0::2], **options)
    with pytest.raises(ValueError, match=r"param group 1's params\[0\] is in an earlier"):
        opt.add_param_group({"params": params[2:]})
    with pytest.raises(ValueError, match="param group 1 sets \\['lrate'\\], not a setting"):
        opt.add_param_group({"params": params[1::2], "lrate": 0.5})
    if name == "SGD":
        with pytest.raises(
            ValueError, match=r"nesterov=True needs a momentum above 0 \(param group 1"
        ):
            opt.add_param_group({"params": params[1::2], "momentum": 0.0, "nesterov": True})
    assert len(opt.param_groups) == 1 and len(opt.params) == 2
    losses = [train_step(model, opt, 0)]
    opt.add_param_group({"params": params[1::2], "lr": 0.02})
    losses += [train_step(model, opt, step) for step in (1, 2)]
    assert [len(g["params"]) for g in opt.state_dict()["param_groups"]] == [2, 2]
    assert sorted(opt.state_dict()["state"]) == [0, 1, 2, 3]
    if not HAS_TORCH:
        return
    import torch

    twin = torch_twin(make_model())
    theirs = list(twin.parameters())
    ref = getattr(torch.optim, name)(theirs[0::2], **options)
    expected = [torch_step(twin, ref, 0)]
    ref.add_param_group({"params": theirs[1::2], "lr": 0.02})
    expected += [torch_step(twin, ref, step) for step in (1, 2)]
    assert losses == pytest.approx(expected, 1e-12)
    assert_same_parameters(model, twin, "after add_param_group")


def test_an_optimizer_pickled_before_param_groups_loads_with_its_settings():
    """Its settings were attributes then (lr, momentum...); they become its one group's."""
    model = make_model()
    for opt, settings in (
        (optim.SGD(model.parameters(), lr=0.1), dict(lr=0.1, momentum=0.9, weight_decay=0.0)),
        (
            optim.Adam(model.parameters()),
            dict(lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.0),
        ),  # fmt: skip
    ):
        state = {k: v for k, v in opt.__dict__.items() if k not in ("param_groups", "group_of")}
        old = type(opt).__new__(type(opt))
        old.__setstate__({**state, **settings})
        (group,) = old.param_groups
        assert {k: group[k] for k in settings} == settings and group["params"] == tuple(opt.params)
        assert not old.__dict__.keys() & settings.keys()
        train_step(model, old, 0)  # the new settings (nesterov, decoupled) at their defaults
    (copied,) = pickle.loads(pickle.dumps(old)).param_groups
    assert {**copied, "params": None} == {**group, "params": None}


# ---- state_dict ------------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_state_dict_has_torchs_layout_and_values(name, options):
    import torch

    model = make_model()
    twin = torch_twin(model)
    opt = getattr(optim, name)(two_groups(model), **options)
    ref = getattr(torch.optim, name)(two_groups(None, twin.parameters()), **options)
    for step in range(3):
        train_step(model, opt, step)
        torch_step(twin, ref, step)
    ours, theirs = opt.state_dict(), ref.state_dict()
    assert [g["params"] for g in ours["param_groups"]] == [
        g["params"] for g in theirs["param_groups"]
    ]
    assert ours["state"].keys() == theirs["state"].keys()
    for index, state in ours["state"].items():
        assert state.keys() == theirs["state"][index].keys()
        for key, value in state.items():
            want = theirs["state"][index][key]
            np.testing.assert_allclose(np.asarray(value), want.numpy(), rtol=1e-12, atol=1e-14)
            assert isinstance(value, np.ndarray) or (key == "step" and isinstance(value, int))


@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_training_resumed_from_a_state_dict_is_bit_identical(name, options):
    model = make_model()
    opt = getattr(optim, name)(two_groups(model), **options)
    for step in range(3):
        train_step(model, opt, step)
    opt.param_groups[1]["lr"] = 0.004
    saved_model, saved_opt = model.state_dict(), opt.state_dict()
    expected = [train_step(model, opt, step) for step in range(3, 6)]

    resumed = make_model(seed=1)
    resumed.load_state_dict(saved_model)
    opt2 = getattr(optim, name)(two_groups(resumed), lr=0.5)
    opt2.load_state_dict(saved_opt)
    assert opt2.param_groups[1]["lr"] == 0.004 and opt2.param_groups[0]["lr"] == 0.02
    assert [train_step(resumed, opt2, step) for step in range(3, 6)] == expected
    for p, q in zip(model.parameters(), resumed.parameters(), strict=True):
        assert p.numpy().tobytes() == q.numpy().tobytes()


@needs_torch
@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_torchs_state_dict_loads_and_training_goes_on_as_torchs(name, options):
    """The layout is PyTorch's: a torch.optim state dict (tensors, a tensor step) loads."""
    import torch

    model = make_model()
    twin = torch_twin(model)
    ref = getattr(torch.optim, name)(twin.parameters(), **options)
    for step in range(3):
        torch_step(twin, ref, step)
    model.load_state_dict({k: v.detach().numpy() for k, v in twin.state_dict().items()})
    opt = getattr(optim, name)(model.parameters(), lr=1.0)
    opt.load_state_dict(ref.state_dict())
    for step in range(3, 6):
        assert train_step(model, opt, step) == pytest.approx(torch_step(twin, ref, step), 1e-12)
        assert_same_parameters(model, twin, f"{name} step {step}")


def test_a_bad_state_dict_is_refused_and_changes_nothing():
    model = make_model()
    opt = optim.Adam(model.parameters(), lr=0.01)
    train_step(model, opt, 0)
    good = opt.state_dict()
    before = [t.numpy() for t in opt.exp_avg]

    def changed(**edits):
        sd = pickle.loads(pickle.dumps(good))
        for edit in edits.values():
            edit(sd)
        return sd

    bad = {
        "too few parameters": (changed(a=lambda sd: sd["param_groups"][0]["params"].pop()),
                               r"param groups have \[3\] parameters, this optimizer's \[4\]"),
        "a bad rate": (changed(a=lambda sd: sd["param_groups"][0].update(lr=-1.0)),
                       "Adam: lr must be >= 0"),
        "a state of the wrong shape": (
            changed(a=lambda sd: sd["state"][1].update(exp_avg=np.zeros(3))),
            r"parameter 1's 'exp_avg' is \(3,\) float64, the parameter \(6,\) float64"),
        "a state name missing": (changed(a=lambda sd: sd["state"][2].pop("exp_avg_sq")),
                                 r"parameter 2's state has \['exp_avg', 'step'\], expected"),
        "a step that is not a whole number": (
            changed(a=lambda sd: sd["state"][0].update(step=2.5)),
            r"parameter 0's step must be a whole number >= 1, got 2.5"),
        "a step of True": (changed(a=lambda sd: sd["state"][0].update(step=True)),
                           "parameter 0's step must be a whole number >= 1, got True"),
        "a step of 0": (changed(a=lambda sd: sd["state"][0].update(step=np.float32(0.0))),
                        "parameter 0's step must be a whole number >= 1, got 0.0"),
        "an unknown parameter": (changed(a=lambda sd: sd["state"].update({7: sd["state"][0]})),
                                 "state for parameter 7, which no param group has"),
        "not a state dict": ({"state": {}}, "expects a dict with 'state' and 'param_groups'"),
    }  # fmt: skip
    for what, (sd, message) in bad.items():
        with pytest.raises((ValueError, TypeError), match=message):
            opt.load_state_dict(sd)
        assert all(np.array_equal(t.numpy(), b) for t, b in zip(opt.exp_avg, before, strict=True))
        assert opt.param_groups[0]["lr"] == 0.01, what
    opt.load_state_dict(good)


def test_loaded_state_takes_its_parameters_dtype():
    p = md.tensor(np.ones(3), dtype=md.float32, requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    opt.load_state_dict({"state": {0: {"momentum_buffer": np.array([1.0, 2.0, 3.0])}},
                         "param_groups": [{"params": [0], "lr": 0.2}]})  # fmt: skip
    assert opt.momentum_buffers[0].dtype == md.float32 and opt.momentum_buffers[0].storage.constant
    assert opt.param_groups[0]["momentum"] == 0.9  # a setting the state dict lacks stays
    p.grad = md.tensor(np.zeros(3), dtype=md.float32)
    opt.step()
    np.testing.assert_allclose(p.numpy(), 1.0 - 0.2 * 0.9 * np.array([1.0, 2.0, 3.0]), rtol=1e-6)


# ---- learning-rate schedules ---------------------------------------------------------------

SCHEDULES = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("StepLR", dict(step_size=1)),
    ("CosineAnnealingLR", dict(T_max=5)),
    ("CosineAnnealingLR", dict(T_max=4, eta_min=0.001)),
]


@needs_torch
@pytest.mark.parametrize("name, options", SCHEDULES)
def test_schedules_set_torchs_rates_to_the_bit(name, options):
    """Past T_max too (the cosine comes back up), with a rate set by hand in between."""
    import torch

    model = make_model()
    opt = optim.SGD(two_groups(model), lr=0.1, momentum=0.9)
    ref = torch.optim.SGD(two_groups(None, torch_twin(model).parameters()), lr=0.1, momentum=0.9)
    ours = getattr(lr_scheduler, name)(opt, **options)
    theirs = getattr(torch.optim.lr_scheduler, name)(ref, **options)
    assert ours.get_last_lr() == theirs.get_last_lr() == [0.02, 0.1]
    for epoch in range(14):
        ref.step()  # (torch warns when its scheduler steps before its optimizer)
        if epoch == 7:
            opt.param_groups[0]["lr"] = ref.param_groups[0]["lr"] = 0.05
        ours.step()
        theirs.step()
        assert ours.get_last_lr() == theirs.get_last_lr(), epoch
        assert [g["lr"] for g in opt.param_groups] == theirs.get_last_lr()
        assert ours.last_epoch == theirs.last_epoch


@needs_torch
def test_training_with_a_schedule_matches_torch():
    import torch

    model = make_model()
    twin = torch_twin(model)
    opt = optim.AdamW(model.parameters(), lr=0.05)
    ref = torch.optim.AdamW(twin.parameters(), lr=0.05)
    ours = lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    theirs = torch.optim.lr_scheduler.CosineAnnealingLR(ref, T_max=4)
    for step in range(6):
        train_step(model, opt, step)
        torch_step(twin, ref, step)
        ours.step()
        theirs.step()
        assert_same_parameters(model, twin, f"step {step}")


def test_a_schedule_resumes_from_its_state_dict():
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    schedule = lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01)
    for _ in range(4):
        schedule.step()
    saved_opt, saved = opt.state_dict(), schedule.state_dict()
    expected = []
    for _ in range(4):
        schedule.step()
        expected.append(schedule.get_last_lr())

    opt2 = optim.SGD(model.parameters(), lr=0.7)
    opt2.load_state_dict(saved_opt)  # initial_lr with it
    schedule2 = lr_scheduler.CosineAnnealingLR(opt2, T_max=10, eta_min=0.01, last_epoch=3)
    schedule2.load_state_dict(saved)
    got = []
    for _ in range(4):
        schedule2.step()
        got.append(schedule2.get_last_lr())
    assert got == expected
    half = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * 8 / 10)) / 2  # the closed form
    assert got[-1][0] == pytest.approx(half, rel=1e-12)


@needs_torch
def test_step_lr_schedules_a_group_added_later_as_torch():
    import torch

    model = make_model()
    params, theirs = model.parameters(), list(torch_twin(model).parameters())
    opt = optim.SGD(params[0::2], lr=0.1)
    ref = torch.optim.SGD(theirs[0::2], lr=0.1)
    ours = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    reference = torch.optim.lr_scheduler.StepLR(ref, step_size=2, gamma=0.5)
    opt.add_param_group({"params": params[1::2], "lr": 0.3})
    ref.add_param_group({"params": theirs[1::2], "lr": 0.3})
    for epoch in range(6):
        ref.step()
        ours.step()
        reference.step()
        assert ours.get_last_lr() == reference.get_last_lr(), epoch
    assert len(ours.get_last_lr()) == 2


def test_cosine_refuses_to_step_past_a_group_added_later():
    """PyTorch's goes on until the bottom of the cosine (it needs each group's initial rate
    there) and fails with a bare zip() error; this one says what happened at the next step."""
    model = make_model()
    params = model.parameters()
    opt = optim.SGD(params[0::2], lr=0.1)
    schedule = lr_scheduler.CosineAnnealingLR(opt, T_max=2)
    opt.add_param_group({"params": params[1::2], "lr": 0.3})
    refused = (
        r"CosineAnnealingLR: made for 1 param group\(s\), the optimizer has 2 now "
        r"\(add_param_group after the scheduler was made\); make the scheduler after the last "
        r"add_param_group"
    )
    with pytest.raises(ValueError, match=refused):
        schedule.step()
    assert schedule.last_epoch == 0 and [g["lr"] for g in opt.param_groups] == [0.1, 0.3]
    remade = lr_scheduler.CosineAnnealingLR(opt, T_max=2)
    for _ in range(4):
        remade.step()
    assert len(remade.get_last_lr()) == 2


def test_schedule_arguments_are_checked():
    opt = optim.SGD(make_model().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="StepLR: step_size must be an int >= 1, got 0"):
        lr_scheduler.StepLR(opt, step_size=0)
    with pytest.raises(TypeError, match="CosineAnnealingLR: T_max must be an int >= 1"):
        lr_scheduler.CosineAnnealingLR(opt, T_max=2.5)
    with pytest.raises(TypeError, match="StepLR: gamma must be a finite number, got 'x'"):
        lr_scheduler.StepLR(opt, 2, gamma="x")
    with pytest.raises(TypeError, match="StepLR: expects a minidtr optimizer, got list"):
        lr_scheduler.StepLR([], 2)
    with pytest.raises(KeyError, match=r"resuming at last_epoch=3 needs param_groups\[0\]"):
        lr_scheduler.StepLR(opt, 2, last_epoch=3)
    schedule = lr_scheduler.StepLR(opt, 1, gamma=-1.0)  # a negative rate is refused when set
    with pytest.raises(ValueError, match="SGD: lr must be >= 0 and finite, got -0.1"):
        schedule.step()
