"""The argument parsing and checks that ``minidtr`` and ``minidtr sim`` share: a parser
whose usage errors are one line, the argument types (byte counts, ratios, slowdowns,
heuristic names, comma-separated lists of them), the runtime's settings as arguments
(``RUNTIME_ARGUMENTS``, each defined once), input and output paths checked before any
work, and the exit statuses. The scripts in benchmarks/ take their options' types and
checks from here too.

Nothing here imports a command: the front door (``minidtr.cli``) and the simulator's
command line (``minidtr.sim.cli``) both import this module, never each other.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any, NoReturn

from .runtime.heuristics import HEURISTIC_NAMES, make_heuristic
from .runtime.options import (
    COST_MODELS,
    DEALLOC_POLICIES,
    DEFAULT_MAX_SLOWDOWN,
    DEFAULT_MAX_WALL_SLOWDOWN,
    FITS,
    MAX_BUDGET,
    OPTION_NAMES,
    PLACEMENTS,
    RuntimeOptions,
)
from .runtime.runtime import WALL_GUARD_AFTER

# Exit statuses (docs/cli.md): 0 done; 1 the work failed (the budget is too small, the run
# thrashed, an input file is malformed); 2 a usage error (a bad option value, an input
# file that cannot be opened, an output path that cannot be written), reported before any
# work starts; 130 interrupted (Ctrl-C).
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, the status of a tool its reader stopped

FIND_BUDGET_SLOWDOWN = 2.0  # the paper's thrashing line, the limit of --find-budget's probes
MAX_SEED = 2**64 - 1  # what manual_seed takes (PyTorch's range)
UNSET = object()  # an option left at its default, which depends on other options


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2): the
    command and the problem, without the usage block (``--help`` shows that)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def usage_error(prog: str, message: str) -> NoReturn:
    """Report a usage error found after parsing, as the parser reports its own (one line,
    exit status 2)."""
    print(f"{prog}: {message} (see {prog} --help)", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def parse_bytes(text: str) -> int:
    """``123456``, ``512K``, ``1.5M``, ``2G`` (powers of 1024) -> bytes: finite, >= 0
    and at most 2**63 - 1 (what an int64 holds). A whole number is read exactly (as a
    float, 2**63 - 1 would round up to 2**63); a decimal one is truncated to bytes."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    given = text
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        value = _int_or_float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a byte count: {given!r} (use e.g. 3000000, 512K, 1.5M)"
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite byte count: {given!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget cannot be negative: {given!r}")
    if value > MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"at most {MAX_BUDGET:,} bytes (2**63 - 1), got {given!r}")
    if 0 < value < 1:  # as Runtime(budget=0.3): a ratio given where bytes were meant
        raise argparse.ArgumentTypeError(
            f"{given!r} is less than a byte: for a fraction of the peak, use --ratio"
        )
    return int(value)


def _int_or_float(text: str) -> int | float:
    """``text`` as a number: a whole number as an int (exact at any size), else a float."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def number(accept: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse type: a number that ``accept`` takes, else the error ``must be
    {expected}, got {text!r}``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value

    parse.__name__ = expected
    return parse


parse_ratio = number(lambda value: 0.0 < value <= 1.0, "a number in (0, 1]")
fraction = number(lambda value: 0.0 <= value < 1.0, "a fraction in [0, 1)")
positive_seconds = number(
    lambda value: value > 0 and math.isfinite(value), "a number of seconds > 0"
)


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum`` (and <= ``maximum``, if given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {value:,}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def floats(text: str) -> list[float]:
    """An argparse type: comma-separated numbers, at least one."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def ratios(text: str) -> list[float]:
    """Budget ratios in (0, 1], each once (a repeat would be replayed again)."""
    values = floats(text)
    bad = [v for v in values if not 0.0 < v <= 1.0]
    if bad:
        raise argparse.ArgumentTypeError(f"budget ratios must be in (0, 1], got {bad[0]:g}")
    return list(dict.fromkeys(values))


def whole_numbers(minimum: int, most: int | None = None) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated whole numbers from ``minimum`` (to ``most``, if
    given), in the order given."""
    expected = f"from {minimum} to {most:,}" if most is not None else f">= {minimum}"

    def parse(text: str) -> list[int]:
        values = floats(text)
        bad = [
            v
            for v in values
            if not (v.is_integer() and minimum <= v and (most is None or v <= most))
        ]
        if bad:
            raise argparse.ArgumentTypeError(f"expected whole numbers {expected}, got {bad[0]:g}")
        return [int(v) for v in values]

    parse.__name__ = f"whole numbers {expected}"
    return parse


def names(text: str) -> list[str]:
    """An argparse type: comma-separated names, at least one."""
    values = [x.strip() for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError("expected at least one name")
    return values


def names_from(known: Collection[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of ``known`` (``what`` names
    them in the error, e.g. ``models``), each once."""

    def parse(text: str) -> list[str]:
        given = names(text)
        unknown = [name for name in given if name not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(map(repr, unknown))} (the {what}: {', '.join(known)})"
            )
        return list(dict.fromkeys(given))

    parse.__name__ = what
    return parse


above_one = number(lambda value: value > 1, "a slowdown > 1")


def parse_slowdown(text: str) -> float | None:
    """A thrash limit: a number > 1, or ``none`` (no limit)."""
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a slowdown > 1 (e.g. 2 for twice as slow) or 'none', got {text!r}"
        ) from None
    if math.isnan(value) or value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"must be > 1 (a slowdown: 2 means twice as slow), or 'none' to disable, got {text}"
        )
    return value


def parse_heuristic(text: str) -> str:
    """A heuristic name the runtime knows (one of ``HEURISTIC_NAMES`` or an ablation name)."""
    try:
        make_heuristic(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def runtime_heuristics(text: str) -> list[str]:
    """Comma-separated heuristic names, each as ``parse_heuristic`` takes it, each once."""
    return list(dict.fromkeys(parse_heuristic(name) for name in names(text)))


# The command-line arguments of the runtime's settings (RuntimeOptions fields), defined once
# for every command: a command adds those it offers with ``add_runtime_arguments`` and
# builds its RuntimeOptions with ``runtime_options``. Each argument's dest is its field.
RUNTIME_ARGUMENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "budget": (
        "--budget",
        dict(
            type=parse_bytes,
            metavar="BYTES",
            help="memory budget in bytes (K, M, G suffixes allowed)",
        ),
    ),
    "heuristic": (
        "--heuristic",
        dict(
            default="dtr",
            type=parse_heuristic,
            metavar="H",
            help=f"eviction heuristic: {', '.join(HEURISTIC_NAMES)}, an ablation name "
            "like eq+size+nostale, or window (with --fit contiguous; default dtr)",
        ),
    ),
    "dealloc": (
        "--dealloc",
        dict(
            default="eager",
            choices=DEALLOC_POLICIES,
            help="what happens when a tensor's last reference dies (default eager)",
        ),
    ),
    "rebuild_orphans": (
        "--no-orphan-rebuild",
        dict(
            action="store_false",
            help="plain eager eviction, as the paper's prototype: do not rebuild the evicted, "
            "still-referenced children of a dead tensor before evicting it",
        ),
    ),
    "keep_dead_remats": (
        "--keep-dead-remats",
        dict(
            action="store_true",
            help="keep rematerialized tensors nobody references resident as ordinary "
            "candidates, one of the paper's simulator's rules (--as-prototype replays with "
            "all of them)",
        ),
    ),
    "as_prototype": (
        "--as-prototype",
        dict(
            action="store_true",
            help="replay as the paper's simulator (simrd) does, rule by rule: its staleness "
            "stamp, locking, tie-breaking and eager eviction; budgets relative to its peak "
            "(docs/simulator.md)",
        ),
    ),
    "reference": (
        "--reference",
        dict(
            action="store_true",
            help="run the reference policy only (the plain code docs/design.md walks "
            "through, without the accelerator): the same decisions, slower; for reading "
            "and stepping through in a debugger",
        ),
    ),
    "fit": (
        "--fit",
        dict(
            default="bytes",
            choices=FITS,
            help="when a new value fits: bytes (the resident bytes stay within the budget, "
            "default) or contiguous (one free block of a budget-sized arena holds it; "
            "fragmentation is measured)",
        ),
    ),
    "placement": (
        "--placement",
        dict(
            default="split",
            choices=PLACEMENTS,
            help="with --fit contiguous, the free block a value takes: split (small values from "
            "the top end, the rest best-fit from the bottom; default), best (the smallest "
            "that holds it) or first (the lowest address)",
        ),
    ),
    "measure_real": (
        "--measure-real",
        dict(
            action="store_true",
            help="measure real memory beside the counted bytes (tracemalloc on NumPy, the "
            "memory pool on CuPy) and print both peaks; slower",
        ),
    ),
    "cost": (
        "--cost",
        dict(
            default="flops",
            choices=COST_MODELS,
            help="op cost: flops (deterministic estimate, default) or time (measured)",
        ),
    ),
    "sample": ("--sample", dict(action="store_true", help="score about sqrt(n) candidates")),
    "min_size": (
        "--min-size",
        dict(
            type=fraction,
            default=0.0,
            help="skip candidates smaller than this fraction of the mean size",
        ),
    ),
    "max_slowdown": (
        "--max-slowdown",
        dict(
            type=parse_slowdown,
            default=UNSET,
            metavar="X",
            help="the thrash guard: stop with an error rather than recompute past X times the "
            "run's compute in the cost model (the paper calls a run past 2 thrashing; default "
            f"{DEFAULT_MAX_SLOWDOWN:g}, {FIND_BUDGET_SLOWDOWN:g} with --find-budget; 'none' "
            "disables it)",
        ),
    ),
    "max_wall_slowdown": (
        "--max-wall-slowdown",
        dict(
            type=parse_slowdown,
            default=DEFAULT_MAX_WALL_SLOWDOWN,
            metavar="X",
            help="the thrash guard in wall time: stop with an error once eviction work "
            "(searching for victims, evicting, recomputing) makes the run X times slower than "
            f"the rest, judged after {WALL_GUARD_AFTER:g} s (default "
            f"{DEFAULT_MAX_WALL_SLOWDOWN:g}; 'none' disables it)",
        ),
    ),
}


def add_runtime_arguments(
    target: argparse.ArgumentParser | argparse._ArgumentGroup, names: Sequence[str]
) -> None:
    """Add the arguments of the settings ``names`` (RuntimeOptions fields, in this order)
    to ``target``, a parser or an argument group."""
    for name in names:
        flag, spec = RUNTIME_ARGUMENTS[name]
        target.add_argument(flag, dest=name, **spec)


def runtime_options(args: argparse.Namespace, **given: Any) -> RuntimeOptions:
    """The RuntimeOptions of parsed ``args``: every field the command has an argument for
    (its dest is the field's name: ``--seed`` and ``--device`` count too), the others at
    their defaults (as are those left ``UNSET``), and ``given`` over both."""
    parsed = {
        name: value for name in OPTION_NAMES if (value := getattr(args, name, UNSET)) is not UNSET
    }
    return RuntimeOptions(**{**parsed, **given})


def check_output(path: str) -> str | None:
    """Why ``path`` cannot be written (None when it can): checked before any work, so a
    long run does not end by failing to save what it made."""
    if not path:
        return "an empty path"
    if os.path.isdir(path):
        return f"{path} is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot write {path}: the folder {folder} does not exist"
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            return f"cannot write {path}: permission denied"
    elif not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write {path}: the folder {folder} is not writable"
    return None


def os_error_text(error: OSError) -> str:
    """An ``OSError`` as its one line says it (``x.csv: No such file or directory``), for
    a file that passed ``check_output`` and still could not be written or read (a
    special file system, a full disk)."""
    if error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return str(error)


def check_outputs(prog: str, paths: dict[str, str | None], inputs: Sequence[str] = ()) -> None:
    """Usage error (exit 2) naming the option (or argument) of the first output path that
    cannot be written, or that is another output's path or an input's (``inputs``):
    writing it would overwrite what was just written, or what the command reads."""
    given = {option: path for option, path in paths.items() if path is not None}
    for option, path in given.items():
        problem = check_output(path)
        if problem is not None:
            usage_error(prog, f"{option}: {problem}")
    taken = {file_key(path): f"the input {path}" for path in inputs}
    for option, path in given.items():
        where = file_key(path)
        if where in taken:
            usage_error(prog, f"{option}: {path} is {taken[where]} too: give another path")
        taken[where] = f"the path of {option}"


def file_key(path: str) -> tuple:
    """What identifies the file at ``path``: its device and inode when it exists (a hard
    link or a symbolic one is the same file), else its resolved path."""
    try:
        status = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", status.st_dev, status.st_ino)


def plot_path(text: str) -> str:
    """A plot's file as matplotlib writes it: a name without an extension gets ``.png``,
    after its trailing dots (``x.`` -> ``x.png``), so that the output checks and the
    messages name the file that is written. A directory, or a path ending in a
    separator, is refused: matplotlib would write a hidden ``.png`` in it."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    if not os.path.basename(text) or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} names a directory: give the file to write")
    if os.path.splitext(text)[1].removeprefix("."):
        return text
    named = text.rstrip(".") + ".png"
    if not os.path.splitext(named)[1]:  # the name was dots only: '...' -> '.png'
        raise argparse.ArgumentTypeError(f"{text!r} is not a file name")
    return named


def require_plotting(prog: str, option: str | None, path: str) -> None:
    """Usage error (exit 2), before any work, unless matplotlib is installed and can
    write ``path`` in the format its extension names (none: PNG). ``option`` names the
    output in the message (None: the message is matplotlib's alone)."""
    from .plots import require_matplotlib

    label = "" if option is None else f"{option}: "
    try:
        require_matplotlib()
    except ImportError as e:
        usage_error(prog, f"{label}{e}")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    extension = os.path.splitext(path)[1].removeprefix(".").lower()
    if extension and extension not in formats:
        usage_error(
            prog,
            f"{label or f'{path}: '}matplotlib cannot write a .{extension} file "
            f"(it writes {', '.join(sorted(formats))}; no extension: PNG)",
        )


def unreadable(path: str, folder: bool = False) -> str | None:
    """Why the input file at ``path`` (a folder, with ``folder``) cannot be read (None
    when it can): checked before any work."""
    if not folder and os.path.isdir(path):
        return f"{path} is a directory, not a file"
    if not os.path.exists(path):
        return f"{path}: no such {'folder' if folder else 'file'}"
    if folder and not os.path.isdir(path):
        return f"{path} is not a folder"
    if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
        return f"cannot read {path}: permission denied"
    return None


def input_file(text: str) -> str:
    """An argparse type: the path of a file that can be read."""
    return _readable(text, folder=False)


def input_folder(text: str) -> str:
    """An argparse type: the path of a folder that can be read."""
    return _readable(text, folder=True)


def input_path(text: str) -> str:
    """An argparse type: the path of a file or a folder that can be read."""
    return _readable(text, folder=os.path.isdir(text))


def output_folder(text: str) -> str:
    """An argparse type: a folder to write into, existing or to be made (its nearest
    existing parent a writable folder); checked before any work."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    existing = os.path.abspath(text)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise argparse.ArgumentTypeError(f"cannot make {text}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {existing}: permission denied")
    return text


def _readable(path: str, folder: bool) -> str:
    problem = unreadable(path, folder)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return path


def check_input(prog: str, path: str) -> None:
    """Usage error (exit 2) when an input file cannot be opened for reading."""
    problem = unreadable(path)
    if problem is not None:
        usage_error(prog, problem)
