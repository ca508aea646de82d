"""``Optimizer``: PyTorch's param groups, ``zero_grad``, ``state_dict`` and the
copy-on-write update.

Every update computes a parameter's new value with minidtr ops under
``no_grad`` and ``as_constants`` and rebinds the parameter's handle to it
(``Tensor.assign``). Nothing is written in place, so a recipe that read the
old value (an activation still alive, evicted or not) recomputes exactly what
it computed before the step. New values and optimizer state are constants:
they keep no recipe, so no chain of recipes grows from step to step.

The built-in optimizers update several parameters with one op (``update_group``):
the parameters of each param group are packed into groups (``update_groups``) no
larger together than the largest parameter, so a step never needs more room at once than the largest
parameter's own update did, while a network of many small tensors (a ResNet's
batch-norm scales and shifts) pays the per-op bookkeeping once per group.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..autograd import no_grad
from ..nn.init import parameter
from ..ops.op import as_constants
from ..tensor import Tensor


@contextlib.contextmanager
def updating() -> Iterator[None]:
    """The mode every optimizer update runs in: no graph, constant results."""
    with no_grad(), as_constants():
        yield


def hyperparameter(where: str, what: str, value, below: float | None = None) -> float:
    """``value`` as a float, if it is a finite number >= 0 (and < ``below`` when given),
    else an error naming the optimizer and the argument (NaN is refused, as by PyTorch)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{where}: {what} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{where}: {what} must be >= 0 and finite, got {value}")
    if below is not None and not value < below:
        raise ValueError(f"{where}: {what} must be in [0, {below:g}), got {value}")
    return value


class Hyperparameter:
    """An optimizer's setting. Each param group holds its own value
    (``opt.param_groups[i]["lr"]``, as PyTorch's), checked by ``check`` whenever it is
    set there: in the constructor, by a schedule that changes it mid-training (NaN there
    turned every weight NaN, a string failed inside the update op). ``opt.lr`` reads the
    value every group shares and sets it in every group."""

    def __init__(self, below: float | None = None):
        self.below = below

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def check(self, where: str, value: Any) -> Any:
        return hyperparameter(where, self.name, value, self.below)

    def __get__(self, optimizer: Any, owner: type | None = None) -> Any:
        if optimizer is None:
            return self
        values = [group[self.name] for group in optimizer.param_groups]
        if any(v != values[0] for v in values[1:]):
            raise ValueError(
                f"{type(optimizer).__name__}.{self.name}: the param groups differ "
                f"({values}); read opt.param_groups[i][{self.name!r}]"
            )
        return values[0]

    def __set__(self, optimizer: Any, value: Any) -> None:
        for group in optimizer.param_groups:
            group[self.name] = value


class Flag(Hyperparameter):
    """A setting that is True or False (SGD's ``nesterov``)."""

    def check(self, where: str, value: Any) -> bool:
        if not isinstance(value, bool | np.bool_):
            raise TypeError(f"{where}: {self.name} must be True or False, got {value!r}")
        return bool(value)


def is_neutral(value: Any, neutral: Any) -> bool:
    """Whether ``value`` is PyTorch's option at the value that changes nothing (False,
    None or 0, as ``neutral``; True and 1, or 0 and False, are not taken for each other)."""
    if neutral is None:
        return value is None
    if isinstance(neutral, bool):
        return isinstance(value, bool | np.bool_) and not value
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == neutral


class ParamGroup(dict):
    """One of ``optimizer.param_groups``, as PyTorch's: its parameters (``"params"``, a
    tuple fixed when the optimizer is made) and its settings, each checked by the
    optimizer's ``Hyperparameter`` of that name whenever it is set. PyTorch's options
    that minidtr does not run (``maximize``, ``dampening``...: the optimizer's
    ``neutral_options``) are kept at the value that changes nothing and refused at any
    other, so a ``torch.optim`` state dict loads and one that asks for more does not.
    Other keys (a scheduler's ``"initial_lr"``) are kept as given, as PyTorch keeps them."""

    def __init__(self, kind: type, settings: Mapping[str, Any]):
        super().__init__()
        self.kind = kind  # the optimizer's class, whose Hyperparameters check the settings
        for key, value in settings.items():
            self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "params" and "params" in self:
            raise TypeError(
                f"{self.kind.__name__}: a param group's params are fixed when the "
                "optimizer is made; make a new optimizer for other parameters"
            )
        rule = getattr(self.kind, key, None) if isinstance(key, str) else None
        if isinstance(rule, Hyperparameter):
            value = rule.check(self.kind.__name__, value)
        neutral_options = getattr(self.kind, "neutral_options", {})
        if key in neutral_options and not is_neutral(value, neutral_options[key]):
            raise ValueError(
                f"{self.kind.__name__}: PyTorch's option {key}={value!r} is not supported "
                f"(minidtr runs {key}={neutral_options[key]!r} only)"
            )
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Mapping[str, Any]) -> ParamGroup:
        self.update(other)
        return self

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __delitem__(self, key: str) -> None:
        self.pop(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key == "params" or isinstance(getattr(self.kind, str(key), None), Hyperparameter):
            raise TypeError(
                f"{self.kind.__name__}: a param group's {key!r} cannot be removed (set it instead)"
            )
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        raise TypeError(f"{self.kind.__name__}: a param group's settings cannot be removed")

    def clear(self) -> None:
        self.popitem()

    def __reduce__(self):
        return (ParamGroup, (self.kind, dict(self)))


class ParamGroups(list):
    """``optimizer.param_groups``: a list of ``ParamGroup``s that only
    ``Optimizer.add_param_group`` adds to (as PyTorch's, which checks the group and
    makes its parameters part of every step; a group appended or put in a group's
    place would be listed by ``state_dict`` and skipped by ``step``, its settings
    unchecked)."""

    def __init__(self, kind: type, groups: Iterable[ParamGroup] = ()):
        super().__init__(groups)
        self.kind = kind

    def refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            f"{self.kind.__name__}.param_groups: add a group with "
            "opt.add_param_group({'params': [...], ...}) and set a group's settings in "
            "place (param_groups[0]['lr'] = 0.01); groups are not replaced or removed"
        )

    def __setitem__(self, index: Any, group: Any) -> None:
        if not (isinstance(index, int) and group is self[index]):  # (``groups[0] |= {...}``
            self.refuse()  # puts the group it changed back in its place)

    __delitem__ = __iadd__ = __imul__ = refuse
    append = extend = insert = pop = remove = clear = sort = reverse = refuse

    def __reduce__(self):
        return (ParamGroups, (self.kind, list(self)))


class ParamGroupsSlot:
    """``Optimizer.param_groups``, read as any attribute; assigning a list to it is
    refused (its groups would be unchecked, and ``step`` would go on updating the old
    ones: the parameters, their indices and their state are the optimizer's own). The
    optimizer sets it in its ``__dict__``."""

    def __get__(self, optimizer: Any, owner: type | None = None) -> Any:
        if optimizer is None:
            return self
        return optimizer.__dict__["param_groups"]

    def __set__(self, optimizer: Any, groups: Any) -> None:
        if groups is not optimizer.__dict__.get("param_groups"):
            self.refuse(optimizer)

    def __delete__(self, optimizer: Any) -> None:
        self.refuse(optimizer)

    @staticmethod
    def refuse(optimizer: Any) -> None:
        raise TypeError(
            f"{type(optimizer).__name__}.param_groups cannot be replaced: add a group with "
            "opt.add_param_group({'params': [...], ...}), set a group's settings in place "
            "(param_groups[0]['lr'] = 0.01), or make a new optimizer for other parameters"
        )


def update_groups(params: list[Tensor]) -> list[list[int]]:
    """The parameters' indices packed into groups that one op updates: same device and
    dtype, at most as many bytes together as the largest parameter (first fit, largest
    first; each group in parameter order). Deterministic: it depends on the shapes only."""
    capacity = max(p.nbytes for p in params)
    order = sorted(range(len(params)), key=lambda i: -params[i].nbytes)  # stable: ties by index
    groups: list[list[int]] = []
    room: list[int] = []
    kinds: list[tuple] = []
    for i in order:
        p = params[i]
        kind = (p.device, p.dtype)
        for g, group in enumerate(groups):
            if kinds[g] == kind and room[g] >= p.nbytes:
                group.append(i)
                room[g] -= p.nbytes
                break
        else:
            groups.append([i])
            room.append(capacity - p.nbytes)
            kinds.append(kind)
    for group in groups:
        group.sort()
    groups.sort(key=lambda group: group[0])
    return groups


class Optimizer:
    """The base of the optimizers: PyTorch's ``param_groups``, ``zero_grad``, ``step``,
    ``state_dict`` and ``load_state_dict``. A subclass declares its settings as
    ``Hyperparameter``s and defines ``update_group`` (or ``update``), ``param_state`` and
    ``load_param_state``; its state is kept per parameter index, in ``self.params``'s
    order (each group's parameters in turn)."""

    lr = Hyperparameter()
    param_groups = ParamGroupsSlot()
    # PyTorch's options that minidtr runs at one value only, the one that changes nothing
    neutral_options: Mapping[str, Any] = {
        "maximize": False,
        "foreach": None,
        "capturable": False,
        "differentiable": False,
        "fused": None,
    }

    def __init__(self, params: Iterable[Any], defaults: Mapping[str, Any]):
        self.defaults = dict(defaults)  # a group's settings unless it sets its own
        self.__dict__["param_groups"] = ParamGroups(type(self), self._make_groups(params))
        self.params = [p for group in self.param_groups for p in group["params"]]
        self.group_of = [g for g, group in enumerate(self.param_groups) for _ in group["params"]]
        self.groups = self._update_groups()
        # parameter index -> the gradient it was updated with by a step that an error
        # stopped part-way: the step run again skips it while that gradient is the same
        self.stopped_step: dict[int, Tensor] = {}

    def _make_groups(self, params: Iterable[Any]) -> list[ParamGroup]:
        """The param groups: one of ``params`` (Tensors), or one per dict of ``params``
        (PyTorch's ``[{"params": [...], "lr": 0.01}, ...]``), each dict's settings over
        ``defaults``."""
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(
                f"{name}: params must be an iterable of Tensors (e.g. "
                "model.parameters()), got a single Tensor"
            )
        items = list(params)
        if not items:
            raise ValueError(f"{name}: got an empty parameter list")
        specs = items if isinstance(items[0], Mapping) else [{"params": items}]
        seen: set[int] = set()
        return [self._make_group(spec, g, len(specs) > 1, seen) for g, spec in enumerate(specs)]

    def _make_group(self, spec: Any, g: int, several: bool, seen: set[int]) -> ParamGroup:
        """Param group ``g`` of ``spec`` (a dict with ``"params"``), its parameters in no
        group yet (``seen``, their ids, to which it adds them)."""
        name, defaults = type(self).__name__, self.defaults
        if not isinstance(spec, Mapping) or "params" not in spec:
            raise TypeError(
                f"{name}: params must be Tensors or dicts with 'params', as "
                f"[{{'params': [...], 'lr': 0.01}}, ...]; item {g} is {type(spec).__name__}"
            )
        unknown = [
            k for k in spec if k != "params" and k not in defaults and k not in self.neutral_options
        ]
        if unknown:
            raise ValueError(
                f"{name}: param group {g} sets {unknown}, not a setting of {name} "
                f"(its settings: {', '.join(defaults)})"
            )
        where = f"param group {g}'s params" if several else "params"
        group_params = self._check_params(spec["params"], where)
        shared = [i for i, p in enumerate(group_params) if id(p) in seen]
        if shared:
            raise ValueError(
                f"{name}: {where}[{shared[0]}] is in an earlier param group too; "
                "each parameter belongs to one group"
            )
        group = ParamGroup(type(self), {**defaults, **spec, "params": tuple(group_params)})
        self.check_group(group, f" (param group {g})" if several else "")
        seen.update(id(p) for p in group_params)
        return group

    def check_group(self, group: ParamGroup, where: str) -> None:
        """Refuse settings of a new param group that are wrong together (``where`` names
        the group when there are several)."""

    def add_param_group(self, param_group: Mapping[str, Any]) -> None:
        """Add a param group, as PyTorch's: ``{"params": [...]}`` and its own settings
        (the constructor's for the rest, ``defaults``), its parameters in no group yet; the
        next step updates them too, from no state."""
        seen = {id(p) for p in self.params}
        group = self._make_group(param_group, len(self.param_groups), True, seen)
        list.append(self.param_groups, group)
        self.params += group["params"]
        self.group_of += [len(self.param_groups) - 1] * len(group["params"])
        self.add_param_state(len(group["params"]))
        self.groups = self._update_groups()

    def add_param_state(self, count: int) -> None:
        """Room for the state of ``count`` parameters just added (none before their first
        step)."""

    def _check_params(self, params: Iterable[Any], where: str) -> list[Tensor]:
        name = type(self).__name__
        if isinstance(params, Tensor):
            params = [params]  # (a group's single Tensor, as PyTorch takes it)
        out: list[Tensor] = []
        seen: set[int] = set()
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: {where}[{i}] is a {type(p).__name__}, not a Tensor")
            if p.grad_fn is not None or p.dtype.kind != "f":
                raise ValueError(
                    f"{name}: {where}[{i}] (shape {p.shape}, {p.dtype}) must be a leaf "
                    "floating-point tensor (a parameter, not a value computed from one)"
                )
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        if not out:
            raise ValueError(f"{name}: got an empty parameter list ({where})")
        return out

    def _update_groups(self) -> list[list[int]]:
        """The parameters' indices packed for the fused updates (``update_groups``) within
        each param group, whose settings they share."""
        packs = []
        for g in range(len(self.param_groups)):
            indices = [i for i, of in enumerate(self.group_of) if of == g]
            packs += [
                [indices[k] for k in pack]
                for pack in update_groups([self.params[i] for i in indices])
            ]
        packs.sort(key=lambda pack: pack[0])
        return packs

    def settings(self, index: int) -> ParamGroup:
        """The param group of parameter ``index``."""
        return self.param_groups[self.group_of[index]]

    def __setstate__(self, state: dict) -> None:
        """A checkpoint from before param groups kept its settings as attributes (and one
        from before ``stopped_step`` had none; one from before ``defaults``, its first
        group's settings stand for them)."""
        if "param_groups" not in state:
            kind = type(self)
            settings = {
                k: state.pop(k)
                for k in list(state)
                if isinstance(getattr(kind, k, None), Hyperparameter)
            }
            state["param_groups"] = [
                ParamGroup(kind, {**settings, "params": tuple(state["params"])})
            ]
            state["group_of"] = [0] * len(state["params"])
        state["param_groups"] = ParamGroups(type(self), state["param_groups"])
        first = state["param_groups"][0]
        state.setdefault("defaults", {k: v for k, v in first.items() if k != "params"})
        self.__dict__.update(state)
        self.__dict__.setdefault("stopped_step", {})

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (the next backward starts from nothing)."""
        for p in self.params:
            p._grad = None  # (the slot behind ``Tensor.grad``: parameters are leaves)
        self.stopped_step.clear()

    def step(self) -> None:
        """Update every parameter that has a gradient; skip those whose grad is None (a
        parameter frozen with ``requires_grad = False`` gets none, as in PyTorch).
        Within a group, parameters whose state differs (a first step, say) are updated
        by separate ops, one per kind of state (``state_key``).

        Groups are updated one after another, each freeing its old values before the
        next runs, so a step needs no more room than its largest group. A step that an
        error stops part-way (a ``BudgetError``, Ctrl-C) leaves the groups it finished
        updated; run again (with a larger budget, say) on the same gradients, it updates
        only the rest, so that no parameter takes one gradient twice."""
        params, done = self.params, self.stopped_step
        with updating():
            for group in self.groups:
                by_state: dict = {}
                for index in group:
                    grad = params[index]._grad
                    if grad is not None and done.get(index) is not grad:
                        by_state.setdefault(self.state_key(index), []).append(index)
                for indices in by_state.values():
                    new = self.update_group(indices)
                    for index, value in zip(indices, new, strict=True):
                        done[index] = params[index]._grad
                        params[index].assign(value)
        done.clear()

    def state_key(self, index: int) -> object:
        """Parameters of one group with equal keys are updated by one op."""
        return index

    def update_group(self, indices: list[int]) -> list[Tensor]:
        """The new values of the parameters at ``indices`` (equal ``state_key``s), in
        order; by default one ``update`` each (runs inside ``updating()``)."""
        return [self.update(i, self.params[i], self.params[i]._grad) for i in indices]

    def update(self, index: int, p: Tensor, grad: Tensor) -> Tensor:
        """The new value of parameter ``index`` (runs inside ``updating()``)."""
        raise NotImplementedError

    # ---- saving and loading -------------------------------------------------------------

    def param_state(self, index: int) -> dict[str, Any]:
        """Parameter ``index``'s state, by PyTorch's names (empty before its first step)."""
        return {}

    def load_param_state(self, index: int, state: dict[str, Any]) -> None:
        """Set parameter ``index``'s state from ``param_state``'s names (checked values)."""

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: ``{"state": {index: {name: value}}, "param_groups": [{settings,
        "params": [indices]}]}``, a parameter's index its place in ``self.params``; tensors
        as host copies (NumPy arrays, as ``Module.state_dict``), step counts as ints."""
        state = {}
        for index in range(len(self.params)):
            values = self.param_state(index)
            if values:
                state[index] = {
                    k: v.numpy() if isinstance(v, Tensor) else v for k, v in values.items()
                }
        groups, start = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            groups.append(
                {
                    **{k: v for k, v in group.items() if k != "params"},
                    "params": list(range(start, start + count)),
                }
            )
            start += count
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Take the settings and state of ``state_dict`` (``state_dict()``'s layout, for an
        optimizer of the same kind over parameters of the same shapes, grouped alike).
        State values are cast to their parameter's dtype and device, as in PyTorch, and
        become new constants (copy-on-write). Checks everything before changing anything."""
        name = type(self).__name__
        if not isinstance(state_dict, Mapping) or set(state_dict) != {"state", "param_groups"}:
            raise ValueError(
                f"{name}.load_state_dict: expects a dict with 'state' and "
                "'param_groups', as state_dict() gives"
            )
        saved_groups = list(state_dict["param_groups"])
        sizes = [len(g["params"]) for g in self.param_groups]
        saved_sizes = [len(g.get("params", ())) for g in saved_groups]
        if saved_sizes != sizes:
            raise ValueError(
                f"{name}.load_state_dict: the state dict's param groups have "
                f"{saved_sizes} parameters, this optimizer's {sizes}"
            )
        groups = [  # a setting the state dict lacks keeps its value here
            ParamGroup(type(self), {**group, **saved, "params": group["params"]})
            for saved, group in zip(saved_groups, self.param_groups, strict=True)
        ]
        saved_ids = [i for saved in saved_groups for i in saved["params"]]
        ours = {saved_id: index for index, saved_id in enumerate(saved_ids)}
        if len(ours) != len(saved_ids):
            raise ValueError(
                f"{name}.load_state_dict: the param groups' 'params' number a parameter "
                f"twice: {saved_ids}"
            )
        states = {}
        for saved_id, values in dict(state_dict["state"]).items():
            if saved_id not in ours:
                raise ValueError(
                    f"{name}.load_state_dict: state for parameter {saved_id!r}, which no "
                    "param group has"
                )
            states[ours[saved_id]] = self.checked_state(ours[saved_id], values)
        for index in range(len(self.params)):
            self.load_param_state(index, states.get(index, {}))
        self.__dict__["param_groups"] = ParamGroups(type(self), groups)
        self.stopped_step.clear()

    def checked_state(self, index: int, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` as parameter ``index``'s state: tensors of its shape, dtype and device
        (constants), ints for step counts; the names ``param_state`` gives, all of them."""
        name, p = type(self).__name__, self.params[index]
        want = set(self.state_names())
        if set(values) != want:
            raise ValueError(
                f"{name}.load_state_dict: parameter {index}'s state has "
                f"{sorted(values)}, expected {sorted(want)}"
            )
        out: dict[str, Any] = {}
        for key, value in values.items():
            if key == "step":  # an int, or PyTorch's float tensor of a whole number
                step = value.item() if hasattr(value, "item") else value
                whole = isinstance(step, numbers.Real) and not isinstance(step, bool | np.bool_)
                if not (whole and float(step).is_integer() and step >= 1):
                    raise ValueError(
                        f"{name}.load_state_dict: parameter {index}'s step must be a whole "
                        f"number >= 1, got {step!r}"
                    )
                out[key] = int(step)
                continue
            array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            if array.shape != p.shape or array.dtype.kind not in "biuf":
                raise ValueError(
                    f"{name}.load_state_dict: parameter {index}'s {key!r} is "
                    f"{array.shape} {array.dtype}, the parameter {p.shape} {p.dtype}"
                )
            out[key] = parameter(array, p.dtype, p.device, requires_grad=False, name=key)
        return out

    def state_names(self) -> tuple[str, ...]:
        """The names of a parameter's state once it has some (``param_state``'s keys)."""
        return ()

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.param_groups[0].items() if k != "params")
        groups = f", {len(self.param_groups)} param groups" if len(self.param_groups) > 1 else ""
        return f"{type(self).__name__}({len(self.params)} tensors{groups}, {settings})"
