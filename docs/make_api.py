"""Write docs/api.md, the reference of minidtr's public API, from the code itself.

    python docs/make_api.py           # rewrite docs/api.md
    python docs/make_api.py --check   # exit 1 if docs/api.md is not what the code says

Each entry is a name, its signature and the first sentence of its docstring; the
sections follow the package's own ``__all__`` lists, so a name added to one appears
here (``tests/test_api_doc.py`` fails until the page is rewritten).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

import minidtr as md

PAGE = Path(__file__).resolve().parent / "api.md"

MAKERS = ["tensor", "zeros", "ones", "full", "arange", "zeros_like", "ones_like", "randn", "rand"]
DTYPES = ["bool_", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
AUTOGRAD = ["grad", "no_grad", "manual_seed", "current_runtime"]
SKIPPED_OPS = {"Tensor", "Op", "apply", "DTypeError", "ShapeError", "as_constants", "rand", "randn"}


def first_sentence(thing: object) -> str:
    """The docstring's first sentence, on one line (empty when there is none)."""
    doc = inspect.getdoc(thing) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    match = re.match(r"(.+?\.)(\s|$)", paragraph)
    sentence = match.group(1) if match else paragraph
    if sentence.endswith(":"):  # (a list or a formula follows in the docstring)
        sentence = sentence[:-1] + "."
    return sentence.replace("``", "`")


class Shown:
    """An annotation or a default as the page shows it (``repr`` is what inspect prints)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def shown_default(value: object) -> object:
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return Shown(f"md.{np.dtype(value).name}")
    if inspect.isclass(value):
        return Shown(value.__name__)
    return value


def signature(thing: object, drop_first: bool = False) -> str:
    """``thing``'s signature with annotations unquoted (``from __future__ import
    annotations`` keeps them as strings), dtypes as ``md.float32``, and the first
    parameter dropped for a method (``self``, or the tensor of an op used as one)."""
    try:
        sig = inspect.signature(thing)
    except (TypeError, ValueError):
        return "(...)"
    parameters = []
    for parameter in list(sig.parameters.values())[1 if drop_first else 0 :]:
        if isinstance(parameter.annotation, str):
            parameter = parameter.replace(annotation=Shown(parameter.annotation))
        if parameter.default is not inspect.Parameter.empty:
            parameter = parameter.replace(default=shown_default(parameter.default))
        parameters.append(parameter)
    returned = sig.return_annotation
    if isinstance(returned, str):
        returned = Shown(returned)
    text = str(sig.replace(parameters=parameters, return_annotation=returned))
    text = re.sub(r" at 0x[0-9a-f]+", "", text)  # a default's id would change per run
    return text


def described(head: str, thing: object) -> str:
    sentence = first_sentence(thing)
    return f"{head}: {sentence}" if sentence else head


def entry(prefix: str, name: str, thing: object) -> str:
    if inspect.isclass(thing) and issubclass(thing, BaseException):
        return described(f"- `{prefix}{name}`", thing)
    if inspect.isclass(thing):
        made = "" if thing.__init__ is object.__init__ else signature(thing.__init__, True)
        if re.fullmatch(r"\(\*args(: \w+)?, \*\*kwargs(: \w+)?\)", made):  # (__new__ makes it)
            made = ""
        return described(f"- `{prefix}{name}{made}`", thing)
    if callable(thing):
        return described(f"- `{prefix}{name}{signature(thing)}`", thing)
    return f"- `{prefix}{name} = {thing!r}`"


def public_members(cls: type) -> list[tuple[str, object]]:
    """The class's own public methods and properties (inherited ones from minidtr's own
    bases are listed there)."""
    members = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or isinstance(value, property):
            members.append((name, value))
    return sorted(members)


def member_line(cls: type, name: str, value: object, indent: str) -> str:
    if isinstance(value, property):
        return described(f"{indent}- `.{name}`", value)
    drop = not isinstance(inspect.getattr_static(cls, name), staticmethod)
    return described(f"{indent}- `.{name}{signature(value, drop_first=drop)}`", value)


def class_block(prefix: str, name: str, cls: type) -> list[str]:
    """The class's entry, its members listed under it."""
    return [entry(prefix, name, cls)] + [
        member_line(cls, n, v, "  ") for n, v in public_members(cls)
    ]


def section(title: str, intro: str, lines: list[str]) -> list[str]:
    return [f"## {title}", "", *([intro, ""] if intro else []), *lines, ""]


def op_families() -> list[str]:
    lines = []
    families: dict[str, list[str]] = {}
    for name in sorted(md.ops.__all__):
        if name in SKIPPED_OPS:
            continue
        thing = getattr(md.ops, name)
        module = thing.__module__.rsplit(".", 1)[-1]
        families.setdefault(module, []).append(entry("md.", name, thing))
    for module in sorted(families):
        lines += [f"### {module}", "", *families[module], ""]
    return lines


def runtime_options() -> list[str]:
    lines = []
    for field in dataclasses.fields(md.RuntimeOptions):
        default = field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        lines.append(f"  - `{field.name}={default!r}`")
    return lines


def module_names(module: ModuleType, prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:  # the module's own functions and classes
        own = module.__name__
        names = [n for n, v in vars(module).items() if getattr(v, "__module__", None) == own]
    lines = []
    for name in sorted(names, key=str.lower):
        thing = getattr(module, name)
        if name in skip or name.startswith("_") or isinstance(thing, ModuleType):
            continue
        lines.append(entry(prefix, name, thing))
    return lines


def page() -> str:
    out = [
        "# API reference",
        "",
        "Every public name of minidtr, its signature and the first sentence of its",
        "docstring, written by `python docs/make_api.py` from the code (a test checks that",
        "this page is what the code says). The guides explain how the pieces work",
        "together: [tutorial.md](tutorial.md) (a budget, step by step), [ops.md](ops.md)",
        "(dtypes, promotion, gradient conventions), [design.md](design.md) (the runtime),",
        "[heuristics.md](heuristics.md), [simulator.md](simulator.md),",
        "[testing.md](testing.md) and [cli.md](cli.md) (the `minidtr` command).",
        "",
    ]
    out += section(
        "Making tensors",
        "`import minidtr as md`. Python data defaults to float32 (floats), int64 (ints).",
        [entry("md.", n, getattr(md, n)) for n in MAKERS]
        + [f"- dtypes: {', '.join(f'`md.{n}`' for n in DTYPES)}"],
    )
    out += section(
        "Tensor",
        "Methods and properties of `md.Tensor` (operators `+ - * / ** @`, comparisons, "
        "indexing and `len` work as on arrays).",
        [member_line(md.Tensor, n, v, "") for n, v in public_members(md.Tensor)],
    )
    out += section(
        "Autograd, seeds, the active runtime",
        "",
        [entry("md.", n, getattr(md, n)) for n in AUTOGRAD],
    )
    out += section(
        "Ops",
        "The functional API, by family (each also a name of `md` and of `md.ops`).",
        op_families(),
    )
    out += section(
        "Ops of your own",
        "An op is a class with `infer`, `forward` and `backward` ([ops.md](ops.md)).",
        class_block("md.ops.", "Op", md.ops.Op)
        + [entry("md.ops.", n, getattr(md.ops, n)) for n in ("apply", "as_constants")]
        + [entry("md.", n, getattr(md, n)) for n in ("DTypeError", "ShapeError")],
    )
    out += section(
        "The runtime",
        "A budget and a policy, active inside a `with` ([design.md](design.md)).",
        class_block("md.", "Runtime", md.Runtime)
        + ["- `md.RuntimeOptions`: the runtime's settings and their defaults:"]
        + runtime_options()
        + module_names(md.runtime, "md.runtime.", skip=("Runtime", "RuntimeOptions")),
    )
    out += section(
        "Layers: md.nn",
        "Modules as PyTorch's (`parameters()`, `state_dict()`, `train()`/`eval()`).",
        class_block("md.nn.", "Module", md.nn.Module)
        + module_names(md.nn, "md.nn.", skip=("Module",))
        + module_names(md.nn.init, "md.nn.init.")
        + module_names(md.nn.utils, "md.nn.utils."),
    )
    out += section(
        "Optimizers: md.optim",
        "",
        class_block("md.optim.", "Optimizer", md.optim.Optimizer)
        + module_names(md.optim, "md.optim.", skip=("Optimizer",))
        + module_names(md.optim.lr_scheduler, "md.optim.lr_scheduler."),
    )
    out += section(
        "The simulator: md.sim",
        "Replays traces of ops against any budget and policy ([simulator.md](simulator.md)).",
        module_names(md.sim, "md.sim."),
    )
    out += section(
        "Testing: md.testing",
        "Property checks of rematerialization and gradients ([testing.md](testing.md)).",
        module_names(md.testing, "md.testing."),
    )
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/api.md from the code.")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = parser.parse_args(argv)
    text = page()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE} is stale: run python docs/make_api.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
