"""``Module``: parameters, buffers and sub-modules registered by attribute assignment.

Assigning a ``Module`` registers a sub-module; assigning a leaf Tensor with
``requires_grad=True`` registers a parameter (``Parameter(data)``, PyTorch's
spelling, makes one); ``register_buffer`` registers a tensor that is state but not
trained (running statistics). Everything else is a plain attribute. Registration
order is the iteration order, so ``parameters()`` is deterministic: a module's own
parameters first, then each sub-module's, depth first, as in PyTorch.

Values are never written in place: ``load_state_dict`` (and optimizers,
running statistics) rebind a tensor handle to a new storage with
``Tensor.assign``, so recipes that read the old value still replay exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..tensor import Tensor, zeros
from .init import parameter

PARAMETER, BUFFER, MODULE = "parameter", "buffer", "module"


def Parameter(data: Tensor | None = None, requires_grad: bool = True) -> Tensor:
    """PyTorch's ``nn.Parameter(data)``: a leaf tensor over ``data``'s value (shared, as
    there: values never change in place) that requires grad, so that a Module it is
    assigned to registers it as a parameter (``requires_grad=False`` is refused: a
    tensor kept but not trained is a buffer, ``register_buffer``). No data: an empty
    float32 tensor.

    A tensor is a parameter here by being a leaf that requires grad; there is no
    Parameter class (``isinstance`` cannot test for one), and a parameter that is not
    trained is a buffer (``register_buffer``)."""
    if data is None:
        data = zeros(0)
    if not isinstance(data, Tensor):
        raise TypeError(
            f"Parameter: data must be a Tensor, got {type(data).__name__} (make one with "
            "md.tensor(...))"
        )
    if requires_grad is not True:
        raise ValueError(
            f"Parameter(requires_grad={requires_grad!r}): a module registers a tensor as a "
            "parameter because it requires grad; keep a tensor that is not trained with "
            "module.register_buffer(name, tensor), or freeze a parameter later with "
            "p.requires_grad_(False)"
        )
    return data.detach().requires_grad_(True)


class Module:
    training: bool
    # keys of PyTorch's state dicts that this module holds nothing for: loaded, and ignored
    ignored_state: tuple[str, ...] = ()

    def __init__(self) -> None:
        object.__setattr__(self, "_registry", {})  # name -> PARAMETER | BUFFER | MODULE
        object.__setattr__(self, "training", True)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ---- registration -------------------------------------------------------------------

    def _registry_or_fail(self) -> dict[str, str]:
        registry = self.__dict__.get("_registry")
        if registry is None:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes"
            )
        return registry

    def __setattr__(self, name: str, value: Any) -> None:
        registry = self._registry_or_fail()
        kind = registry.get(name)
        if isinstance(value, Module):
            new = MODULE
        elif kind == BUFFER and (value is None or isinstance(value, Tensor)):
            new = BUFFER
        elif isinstance(value, Tensor) and value.requires_grad and value.grad_fn is None:
            new = PARAMETER
        else:
            new = None
        if new != kind:
            registry.pop(name, None)
            if new is not None:
                registry[name] = new
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._registry_or_fail().pop(name, None)
        object.__delattr__(self, name)

    def register_buffer(self, name: str, value: Tensor | None) -> None:
        """Register non-trained state (saved in ``state_dict``, never given to an optimizer)."""
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(
                f"register_buffer({name!r}): expected a Tensor or None, got {type(value).__name__}"
            )
        registry = self._registry_or_fail()
        registry.pop(name, None)
        registry[name] = BUFFER
        object.__setattr__(self, name, value)

    def _own(self, kind: str) -> Iterator[tuple[str, Any]]:
        for name, k in self._registry.items():
            if k == kind:
                value = self.__dict__[name]
                if value is not None:
                    yield name, value

    # ---- traversal -----------------------------------------------------------------------

    def named_children(self) -> list[tuple[str, Module]]:
        """Each direct sub-module once, under its first name (as PyTorch's), so that
        ``apply`` visits a module registered twice once. ``ModuleList`` and ``Sequential``
        iterate over every registration instead: a layer given twice runs twice."""
        out: list[tuple[str, Module]] = []
        seen: set[int] = set()
        for name, module in self._own(MODULE):
            if id(module) not in seen:
                seen.add(id(module))
                out.append((name, module))
        return out

    def children(self) -> list[Module]:
        return [m for _, m in self.named_children()]

    def named_modules(
        self, prefix: str = "", remove_duplicate: bool = True
    ) -> list[tuple[str, Module]]:
        """This module and every sub-module, depth first in registration order: each once,
        under its first name, or (``remove_duplicate=False``, as PyTorch's) under every
        name it is registered by."""
        out: list[tuple[str, Module]] = []
        seen: set[int] = set()
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if remove_duplicate and id(module) in seen:
                continue
            seen.add(id(module))
            out.append((name, module))
            children = [(f"{name}.{n}" if name else n, m) for n, m in module._own(MODULE)]
            stack.extend(reversed(children))
        return out

    def modules(self) -> list[Module]:
        return [m for _, m in self.named_modules()]

    def _named_tensors(self, kind: str) -> list[tuple[str, Tensor]]:
        out: list[tuple[str, Tensor]] = []
        seen: set[int] = set()
        for prefix, module in self.named_modules():
            for name, t in module._own(kind):
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append((f"{prefix}.{name}" if prefix else name, t))
        return out

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        """(dotted name, tensor) for every parameter, each once (shared ones under their
        first name), in registration order."""
        return self._named_tensors(PARAMETER)

    def parameters(self) -> list[Tensor]:
        return [t for _, t in self._named_tensors(PARAMETER)]

    def named_buffers(self) -> list[tuple[str, Tensor]]:
        return self._named_tensors(BUFFER)

    def buffers(self) -> list[Tensor]:
        return [t for _, t in self._named_tensors(BUFFER)]

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    # ---- modes and gradients ----------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p._grad = None  # (the slot behind ``Tensor.grad``: parameters are leaves)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` of every parameter (``False`` freezes the module: its
        parameters get no gradient, and an optimizer given them leaves them as they are)."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every submodule, children before their parent, then on this one
        (as PyTorch's: for an initialization of one's own, say)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---- saving and loading -----------------------------------------------------------------

    def _state_tensors(self) -> dict[str, Tensor]:
        """Every parameter and buffer by dotted name: per module its parameters, then its
        buffers (PyTorch's state_dict order and keys, but BatchNorm's count of batches: a
        module registered twice is saved under both names)."""
        out: dict[str, Tensor] = {}
        for prefix, module in self.named_modules(remove_duplicate=False):
            for kind in (PARAMETER, BUFFER):
                for name, t in module._own(kind):
                    out[f"{prefix}.{name}" if prefix else name] = t
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Host copies of every parameter and buffer, by dotted name."""
        return {name: t.numpy() for name, t in self._state_tensors().items()}

    def load_state_dict(
        self, state: Mapping[str, Any], strict: bool = True
    ) -> tuple[list[str], list[str]]:
        """Set parameters and buffers from arrays (NumPy arrays, Tensors, anything
        ``np.asarray`` takes), cast to each tensor's dtype. Each tensor is rebound to a
        new storage (copy-on-write); the old values stay intact for any recipe that read
        them. Checks everything before changing anything. Returns (missing, unexpected)
        key lists; with ``strict`` either being non-empty is an error. A key of a
        module's ``ignored_state`` (BatchNorm2d's ``num_batches_tracked``, which
        PyTorch saves) is neither: it is taken and ignored."""
        own = self._state_tensors()
        ignored = {
            f"{prefix}.{name}" if prefix else name
            for prefix, module in self.named_modules(remove_duplicate=False)
            for name in module.ignored_state
        }
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own and k not in ignored]
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict into {type(self).__name__}: missing keys "
                f"{missing}, unexpected keys {unexpected}"
            )
        loaded: dict[str, Tensor] = {}
        for name, t in own.items():
            if name not in state:
                continue
            value = state[name]
            array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            if array.shape != t.shape:
                raise ValueError(
                    f"load_state_dict: {name!r} has shape {array.shape} in the "
                    f"state dict but {t.shape} in the module"
                )
            if array.dtype.kind not in "biuf":  # None became NaN, complex lost its imaginary part
                raise TypeError(
                    f"load_state_dict: {name!r} holds {array.dtype} values, not real numbers"
                )
            loaded[name] = parameter(array, t.dtype, t.device, requires_grad=False, name=name)
        for name, value in loaded.items():
            own[name].assign(value)
        return missing, unexpected

    # ---- printing ----------------------------------------------------------------------------

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        children = list(self._own(MODULE))
        if not children:
            return f"{type(self).__name__}({extra})"
        lines = [extra] if extra else []
        lines += [f"({name}): " + repr(module).replace("\n", "\n  ") for name, module in children]
        body = "\n  ".join(lines)
        return f"{type(self).__name__}(\n  {body}\n)"


class ModuleList(Module):
    """A list of sub-modules (registered as "0", "1", ..., so their parameters are found)."""

    def __init__(self, modules: Iterable[Module] = ()):
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(
                f"{type(self).__name__}: expected a Module, got {type(module).__name__}"
            )
        names = [int(name) for name, _ in self._own(MODULE) if name.isdigit()]
        setattr(self, str(max(names) + 1 if names else 0), module)  # after a slice's "1", "2"
        return self

    def __len__(self) -> int:
        return sum(1 for _ in self._own(MODULE))

    def __iter__(self) -> Iterator[Module]:
        return iter([m for _, m in self._own(MODULE)])

    def __getitem__(self, index: int | slice) -> Any:
        modules = list(self)
        if isinstance(index, slice):
            return type(self)(modules[index])
        return modules[index]


class Sequential(ModuleList):
    """Modules applied in order, each to the previous one's output."""

    def __init__(self, *modules: Module):
        first = modules[0] if len(modules) == 1 else None
        if isinstance(first, Mapping):  # Sequential(OrderedDict(fc=...)): named, as PyTorch's
            super().__init__()
            for name, module in first.items():
                self._add_named(name, module)
            return
        if isinstance(first, Iterable) and not isinstance(first, Module):  # Sequential([a, b])
            modules = tuple(first)
        super().__init__(modules)

    def _add_named(self, name: Any, module: Any) -> None:
        named = isinstance(name, str) and (name.isidentifier() or name.isdigit())
        if not named or hasattr(self, name):
            raise ValueError(
                f"Sequential: a module's name must be a Python name or a number, not "
                f"already an attribute, got {name!r}"
            )
        if not isinstance(module, Module):
            raise TypeError(f"Sequential: {name!r} is a {type(module).__name__}, not a Module")
        setattr(self, name, module)

    def __getitem__(self, index: int | slice) -> Any:
        """A module, or for a slice a ``Sequential`` of those modules under their names
        here (``model[1:]`` has "1", "2", ...: PyTorch's, so its state dict's keys are
        the whole model's)."""
        if not isinstance(index, slice):
            return super().__getitem__(index)
        part = type(self)()
        for name, module in list(self._own(MODULE))[index]:
            setattr(part, name, module)
        return part

    def forward(self, x: Any) -> Any:
        for module in self:
            x = module(x)
        return x
