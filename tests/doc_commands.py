"""The shell commands and Python snippets of README.md, models/README.md, docs/*.md and
docs/course/*.md.

``commands()`` finds every command a reader may copy: the lines of ``sh``/``bash``
blocks, the ``$ ...`` lines of output blocks, and code spans in the text that start a
command (``minidtr ...``, ``python ...``). ``python_blocks()`` finds the ``python``
blocks. tests/test_docs_examples.py runs them (``workspace`` builds the place where they
run as written: a copy of the repository's top level with ``minidtr`` and ``python`` on
the PATH).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pages() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "models" / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "course").glob("*.md")),
    ]


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# a code span that starts a command (not one that only names a program, like `minidtr train`)
COMMAND_START = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:minidtr|python3?|pip|cd|curl|dask) ")


@dataclass(frozen=True)
class Command:
    page: str  # relative to the repository
    line: int
    text: str  # as written, without a trailing comment
    block: int | None = None  # the first line of its block (None: a command in the text)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _strip_comment(line: str) -> str:
    """The command without its trailing ``# ...`` comment."""
    return re.split(r"\s+#", line.strip(), maxsplit=1)[0]


def _block_lines(body: str) -> list[tuple[int, str]]:
    """(offset, command) for each command of a shell block; ``\\`` joins lines."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for i, raw in enumerate(body.split("\n")):
        if not pending:
            start = i
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line and not line.startswith("#"):
            out.append((start, _strip_comment(line)))
    return out


def _without_fences(text: str) -> str:
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


@dataclass(frozen=True)
class Unit:
    """Commands that run together, in one shell, in order: a shell block, the ``$``
    lines of one output block, or one command in the text."""

    page: str
    line: int
    commands: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def script(self) -> str:
        return "\n".join(self.commands) + "\n"


def units() -> list[Unit]:
    """Every unit of the docs once (the first place it is written), in page order."""
    grouped: dict[tuple, list[Command]] = {}
    for i, command in enumerate(commands()):
        key = (command.page, command.block) if command.block is not None else i
        grouped.setdefault(key, []).append(command)
    seen: dict[tuple[str, ...], Unit] = {}
    for group in grouped.values():
        key = tuple(c.text for c in group)
        seen.setdefault(key, Unit(group[0].page, group[0].line, key))
    return list(seen.values())


def commands() -> list[Command]:
    """Every command of the docs, in page order (repeats included)."""
    found: list[Command] = []
    for path in pages():
        page = str(path.relative_to(ROOT))
        text = path.read_text()
        for m in FENCE.finditer(text):
            first = text[: m.start(2)].count("\n") + 1
            if m.group(1) in ("sh", "bash"):
                for offset, line in _block_lines(m.group(2)):
                    found.append(Command(page, first + offset, line, first))
            elif m.group(1) == "":
                for offset, line in enumerate(m.group(2).split("\n")):
                    if line.startswith("$ "):
                        command = _strip_comment(line[2:])
                        found.append(Command(page, first + offset, command, first))
        prose = _without_fences(text)
        for m in re.finditer(r"`([^`]+)`", prose):
            span = " ".join(m.group(1).split()).replace("\\|", "|")  # a table's escaped |
            if COMMAND_START.match(span) and not _names_only(span):
                found.append(Command(page, prose[: m.start()].count("\n") + 1, span))
    return found


def _names_only(span: str) -> bool:
    """Whether a code span only names a command or one of its options (`minidtr train`,
    `minidtr sim --heuristics`, `python -m minidtr`) rather than being one to run: a
    ``minidtr`` command without what it needs (a model, a log, an event log)."""
    words = span.split()
    if words[:3] == ["python", "-m", "minidtr"] and len(words) == 3:
        return True
    if words[0] != "minidtr":
        return False
    if len(words) < 2 or words[1].endswith(":"):
        return True  # `minidtr`, `minidtr: interrupted`
    sub, rest = words[1], words[2:]
    positional = [w for w in rest if not w.startswith("-")]
    if sub == "train":
        return not rest or rest[0].startswith("-")
    if sub in ("explain", "plot", "animate"):
        return not positional
    if sub == "sim":
        if rest[:1] and rest[0] in SIM_WITHOUT_INPUT:
            return False  # sqrt-n, adversary: nothing needed
        return not positional[1 if rest[:1] and rest[0] in SIM_SUBCOMMANDS else 0 :] and (
            "--bundled" not in rest
        )
    return False


PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.\w+)?(,[A-Z0-9_]+)*$|\.\.\.|…|^\[|^<")


def placeholders(text: str) -> list[str]:
    """The words of a command that stand for something the reader fills in (``MODEL``,
    ``LOG``, ``[--top N]``, ``...``); a command with any is a synopsis, not run."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    return [
        w
        for w in words
        if "=" not in w.split("/")[0] and any(PLACEHOLDER.search(part) for part in w.split("/"))
    ]


def program(text: str) -> list[str]:
    """The program a command runs, as the words that ``--help`` follows: ``minidtr sim
    info``, ``python benchmarks/frontier.py``, ``python -m minidtr.sim``..."""
    words = [w for w in shlex.split(text) if not re.match(r"^[A-Z_]+=", w)]
    if words[:1] == ["minidtr"] or words[:3] == ["python", "-m", "minidtr"]:
        start = 1 if words[0] == "minidtr" else 3
        rest = words[start:]
        head = words[:start]
        if rest[:1] == ["sim"] and len(rest) > 1 and rest[1] in SIM_SUBCOMMANDS:
            return head + rest[:2]
        return head + rest[:1]
    if words[:3] == ["python", "-m", "minidtr.sim"]:
        return words[:3] + words[3:4] if words[3:4] and words[3] in SIM_SUBCOMMANDS else words[:3]
    if words[:1] == ["python"] and len(words) > 1 and words[1].endswith(".py"):
        return words[:2]
    return words[:1]


SIM_SUBCOMMANDS = ("info", "frontier", "optimal", "bound", "sqrt-n", "adversary")
SIM_WITHOUT_INPUT = ("sqrt-n", "adversary")


def options(text: str) -> list[str]:
    """The ``--options`` a command passes (before any ``|``, ``&&`` or ``;``)."""
    text = re.split(r"\s(?:\||&&|;)\s", text)[-1] if text.startswith("cd ") else text
    text = re.split(r"\s(?:\||&&|;|>)\s?", text)[0]
    return [w.split("=")[0] for w in shlex.split(text) if w.startswith("--")]


def python_blocks(page: str) -> list[tuple[int, str]]:
    """(first line, source) of each ``python`` block of a page."""
    text = (ROOT / page).read_text()
    return [
        (text[: m.start(2)].count("\n") + 1, m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == "python"
    ]


def workspace(directory: Path) -> dict[str, str]:
    """Make ``directory`` a place to run the docs' commands as written, from the top of
    the repository: ``docs``, ``models``, ``benchmarks`` and the READMEs are copied (a
    command may write there), ``minidtr``, ``minidtr_pytest`` and ``traces`` are links,
    and ``bin`` holds a ``minidtr`` and a ``python`` that run this interpreter. Returns the
    environment to run them in."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in ("docs", "models", "benchmarks", "tests"):
        shutil.copytree(ROOT / name, directory / name, ignore=ignore)
    for name in ("README.md", "pyproject.toml"):
        shutil.copy(ROOT / name, directory / name)
    (directory / "minidtr").symlink_to(ROOT / "minidtr")
    # the pytest plugin's module (what minidtr.testing.plugin and the entry point import)
    (directory / "minidtr_pytest").symlink_to(ROOT / "minidtr_pytest")
    (directory / "traces").symlink_to(ROOT / "minidtr" / "sim" / "traces")
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    for name, line in (
        ("minidtr", f'exec "{sys.executable}" -m minidtr "$@"'),
        ("python", f'exec "{sys.executable}" "$@"'),
    ):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(directory)
    env["MPLBACKEND"] = "Agg"
    # one BLAS thread, as the minidtr command and the benchmarks take by default (the
    # models/ scripts do not set it, and waiting BLAS threads spin on a busy machine)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.pop("MINIDTR_CHECK_DECISIONS", None)
    return env
