"""The ``minidtr`` command (also ``python -m minidtr``).

    minidtr train MODEL [--budget BYTES | --ratio R] [--heuristic H] [--steps N] ...
    minidtr demo
    minidtr explain EVENTS.jsonl [--html OUT.html]
    minidtr plot EVENTS.jsonl OUT.png
    minidtr models
    minidtr sim ...          (the trace simulator, minidtr.sim.cli)

See docs/cli.md for every option.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

from .explain import (
    ORPHAN_NOTE,
    clock_unit,
    explain,
    human_bytes,
    load_events,
    runtime_header,
    summarize,
    write_event_log,
)
from .runtime.heuristics import HEURISTIC_NAMES, make_heuristic
from .runtime.options import (
    COST_MODELS,
    DEALLOC_POLICIES,
    DEFAULT_MAX_SLOWDOWN,
    DEFAULT_MAX_WALL_SLOWDOWN,
    MAX_BUDGET,
    OPTION_NAMES,
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

DEMO_MODEL = "resnet"
# The paper's headline budget. The small ResNet-32 is in the paper's memory regime
# (constants 5% of its peak, floor 0.12): at 0.3 it costs about 1.25x recomputation.
DEMO_RATIO = 0.3
DEMO_STEPS = 40
DEMO_PERCENT = round(100 * DEMO_RATIO)
FIND_BUDGET_SLOWDOWN = 2.0  # the paper's thrashing line
FIND_BUDGET_STEPS = 3
UNSET = object()  # an option left at its default, which depends on other options


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2): the
    command and the problem, without the usage block (``--help`` shows that)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def usage_error(prog: str, message: str):
    """Report a usage error found after parsing, as the parser reports its own (one line,
    exit status 2)."""
    print(f"{prog}: {message} (see {prog} --help)", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def parse_bytes(text: str) -> int:
    """``123456``, ``512K``, ``1.5M``, ``2G`` (powers of 1024) -> bytes: finite, >= 0
    and at most 2**63 - 1 (what an int64 holds)."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    given = text
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a byte count: {given!r} (use e.g. 3000000, 512K, 1.5M)"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite byte count: {given!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget cannot be negative: {given!r}")
    if value > MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"at most {MAX_BUDGET:,} bytes (2**63 - 1), got {given!r}")
    return int(value)


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


def whole_number(minimum: int):
    """An argparse type: a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


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
    try:
        make_heuristic(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


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
            help=f"eviction heuristic: {', '.join(HEURISTIC_NAMES)} or an ablation name "
            "like eq+size+nostale (default dtr)",
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
            "candidates (the paper's simulator; with --no-orphan-rebuild it replays as the "
            "prototype did)",
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


def add_runtime_arguments(target, names: Sequence[str]) -> None:
    """Add the arguments of the settings ``names`` (RuntimeOptions fields, in this order)
    to ``target``, a parser or an argument group."""
    for name in names:
        flag, spec = RUNTIME_ARGUMENTS[name]
        target.add_argument(flag, dest=name, **spec)


def runtime_options(args: argparse.Namespace, **given: Any) -> RuntimeOptions:
    """The RuntimeOptions of parsed ``args``: every field the command has an argument for
    (its dest is the field's name: ``--seed`` and ``--device`` count too), the others at
    their defaults, and ``given`` over both."""
    parsed = {name: getattr(args, name) for name in OPTION_NAMES if hasattr(args, name)}
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


def check_outputs(prog: str, paths: dict[str, str | None]) -> None:
    """Usage error (exit 2) naming the option (or argument) of the first output path that
    cannot be written."""
    for option, path in paths.items():
        if path is None:
            continue
        problem = check_output(path)
        if problem is not None:
            usage_error(prog, f"{option}: {problem}")


def check_input(prog: str, path: str) -> None:
    """Usage error (exit 2) when an input file cannot be opened for reading."""
    if os.path.isdir(path):
        usage_error(prog, f"{path} is a directory, not a file")
    if not os.path.exists(path):
        usage_error(prog, f"{path}: no such file")
    if not os.access(path, os.R_OK):
        usage_error(prog, f"cannot read {path}: permission denied")


def build_parser() -> argparse.ArgumentParser:
    from .models.tasks import MODELS, SIZES

    parser = UsageParser(
        prog="minidtr",
        description="Train models under a memory budget with Dynamic Tensor Rematerialization, "
        "and see what the runtime evicted and recomputed.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="train a model under a memory budget",
        description="Train a model under a memory budget and print a summary.",
    )
    train.add_argument(
        "model",
        choices=sorted(MODELS),
        metavar="MODEL",
        help="one of: " + ", ".join(sorted(MODELS)),
    )
    add_train_options(train, SIZES)
    train.add_argument(
        "--find-budget",
        action="store_true",
        help="instead of training: search the lowest budget ratio that trains within "
        f"--max-slowdown (default {FIND_BUDGET_SLOWDOWN}), probing {FIND_BUDGET_STEPS} steps "
        "(or --steps) per ratio, and print the table of probes",
    )

    demo = sub.add_parser(
        "demo",
        help=f"train {DEMO_MODEL} at {DEMO_PERCENT}%% of its memory",
        description=f"Train the small {DEMO_MODEL} on the digits for "
        f"{DEMO_STEPS} steps under {DEMO_PERCENT}% of the memory "
        "it needs without a budget, then explain what happened.",
    )
    demo.add_argument("--plot", metavar="FILE", help="also write the memory timeline as a PNG")

    ex = sub.add_parser(
        "explain",
        help="tell in plain words what an event log shows",
        description="Summarize an event log written by `minidtr train --events` "
        "or Runtime.export_events.",
    )
    ex.add_argument("events", metavar="EVENTS.jsonl")
    ex.add_argument(
        "--top", type=whole_number(1), default=5, help="how many ops to list (default 5)"
    )
    ex.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write a self-contained page to explore the log in a browser: the memory "
        "timeline, each eviction's candidates and scores, each remat's cascade",
    )

    plot = sub.add_parser("plot", help="memory timeline PNG from an event log")
    plot.add_argument("events", metavar="EVENTS.jsonl")
    plot.add_argument("out", metavar="OUT.png")
    plot.add_argument(
        "--budget",
        type=parse_bytes,
        default=None,
        help="budget line (default: from the log's header, if any)",
    )

    sub.add_parser("models", help="list the models, their data and parameter counts")
    sub.add_parser(
        "sim", help="replay traces in the simulator (minidtr sim --help)", add_help=False
    )
    return parser


def add_train_options(p: argparse.ArgumentParser, sizes: Sequence[str]) -> None:
    limit = p.add_mutually_exclusive_group()
    add_runtime_arguments(limit, ["budget"])
    limit.add_argument(
        "--ratio",
        type=parse_ratio,
        metavar="R",
        help="budget as a fraction of the unbounded peak (of the first two training steps, "
        "measured first on a fresh copy of the model)",
    )
    add_runtime_arguments(
        p,
        ["heuristic", "dealloc", "rebuild_orphans", "cost", "max_slowdown", "max_wall_slowdown"],
    )
    p.add_argument("--size", default="small", choices=sizes, help="model size (default small)")
    p.add_argument(
        "--steps",
        type=whole_number(1),
        default=None,
        help="training steps (default 50; 3 per probe with --find-budget)",
    )
    p.add_argument(
        "--batch", type=whole_number(1), default=None, help="batch size (default: per model)"
    )
    p.add_argument(
        "--seed", type=whole_number(0), default=0, help="seed for data, init and order (>= 0)"
    )
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--events", metavar="FILE", help="write the event log (JSON lines)")
    p.add_argument("--trace", metavar="FILE", help="record a simulator trace (DTR log format)")
    p.add_argument("--plot", metavar="FILE", help="write the memory timeline as a PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


class Progress:
    """The progress line on a terminal: a tqdm bar over the steps whose postfix shows the
    loss and, once anything was recomputed or searched for, the slowdown (cost model, and
    wall time when eviction work shows there), the remats and the search time. While a
    step runs it is refreshed every second, so a run that grinds shows it as it goes.
    Nothing is shown without tqdm or off a terminal (the summary is printed either way)."""

    REFRESH_SECONDS = 1.0

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled
        self.bar = None
        self.loss: float | None = None

    def steps(self, steps):
        if not self.enabled:
            return steps
        try:
            from tqdm import tqdm
        except ImportError:
            return steps
        self.bar = tqdm(
            steps, total=self.total, unit="step", leave=False, disable=None, dynamic_ncols=True
        )
        return self.bar

    def on_loss(self, bar, loss: float) -> None:
        self.loss = loss

    @contextmanager
    def watch(self, runtime):
        """Refresh the postfix from ``runtime``'s statistics every second (a daemon
        thread: it only reads counters)."""
        if self.bar is None or getattr(self.bar, "disable", True):
            yield
            return
        stop = threading.Event()

        def refresh() -> None:
            while not stop.wait(self.REFRESH_SECONDS):
                self.show(runtime)

        thread = threading.Thread(target=refresh, name="minidtr-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def show(self, runtime) -> None:
        self.bar.set_postfix_str(progress_text(runtime, self.loss), refresh=True)


def progress_text(runtime, loss: float | None) -> str:
    """``loss 0.4131 | slowdown 1.52x (wall 2.1x), 490 remats, search 3.1 s``."""
    parts = [] if loss is None else [f"loss {loss:.4f}"]
    s = runtime.stats_
    if s.remats or s.searches:
        wall = runtime.wall_slowdown()
        wall_text = f" (wall {wall:.1f}x)" if wall >= 1.5 else ""
        parts.append(
            f"slowdown {s.slowdown:.2f}x{wall_text}, {s.remats:,} remats, "
            f"search {s.search_time:.1f} s"
        )
    return " | ".join(parts)


def run_train(args: argparse.Namespace) -> int:
    from .runtime import BudgetError, ThrashError
    from .training import ConfigError, TrainConfig, measure_unbounded, train

    prog = "minidtr train"
    if args.steps is None:
        args.steps = FIND_BUDGET_STEPS if args.find_budget else 50
    if args.find_budget and (args.budget is not None or args.ratio is not None):
        usage_error(prog, "--find-budget searches the budget; drop --budget/--ratio")
    if args.device != "cpu":
        from . import backend

        try:
            backend.xp_for(args.device)
        except RuntimeError as e:
            usage_error(prog, str(e))
    check_outputs(prog, {"--events": args.events, "--trace": args.trace, "--plot": args.plot})
    trace = None
    if args.trace:
        trace = trace_recorder(args.trace)
        if trace is None:
            return EXIT_USAGE
    if args.plot:
        from .plots import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as e:
            usage_error(prog, f"--plot: {e}")
    options = runtime_options(
        args, max_slowdown=max_slowdown(args), record_events=bool(args.events or args.plot)
    )
    config = TrainConfig(
        args.model, args.size, args.steps, args.batch, ratio=args.ratio, options=options
    )
    if args.find_budget:
        return run_find_budget(config, args)
    progress = Progress(args.steps, not args.no_progress)
    try:
        unbounded = measure_unbounded(config)
    except ConfigError as e:
        usage_error(prog, str(e))
    try:
        result = train(
            config,
            progress=progress.steps,
            on_loss=progress.on_loss,
            trace=trace,
            watch=progress.watch,
            unbounded=unbounded,
        )
    except ConfigError as e:
        usage_error(prog, str(e))
    except ThrashError as e:
        print(
            f"{prog}: stopped {args.model}, it was thrashing: {e} In this command: "
            "--budget/--ratio, --max-slowdown, --max-wall-slowdown.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except BudgetError as e:
        print(
            f"{prog}: the budget is too small to train {args.model}: {e} "
            f"({floor_verdict(e.budget, unbounded)})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(summary_table(result))
    finish_outputs(result, args.events, args.plot, args.trace)
    return 0


def floor_text(floors) -> str:
    return (
        f"{human_bytes(floors.floor)} = {floors.floor_ratio:.3f} x unbounded peak "
        f"{human_bytes(floors.peak)} (constants {floors.constant_ratio:.3f}, "
        f"largest op {floors.floor_op})"
    )


def floor_verdict(budget: int, floors) -> str:
    """What a failed budget means against the model's floor."""
    where = f"the model's floor of {human_bytes(floors.floor)} ({floors.floor_ratio:.3f} of peak)"
    if budget < floors.floor:
        return f"this budget is below {where}: no policy can fit it"
    return (
        f"this budget is above {where}: the heuristic ran out of evictable memory; "
        "a larger budget (or another heuristic) may fit"
    )


def max_slowdown(args: argparse.Namespace) -> float | None:
    """The thrash limit in force: as given, else the paper's 2x for --find-budget (its
    probes look for the lowest ratio that does not thrash) and the guard's default when
    training."""
    if args.max_slowdown is not UNSET:
        return args.max_slowdown
    return FIND_BUDGET_SLOWDOWN if args.find_budget else DEFAULT_MAX_SLOWDOWN


def run_find_budget(config, args: argparse.Namespace) -> int:
    from .budget_search import find_budget

    search = find_budget(config, max_slowdown=max_slowdown(args))
    print(frontier_table(search))
    return 0


def frontier_table(search) -> str:
    c, u = search.config, search.unbounded
    rows = [
        f"minidtr train {c.model} --size {c.size} --find-budget --max-slowdown "
        f"{search.max_slowdown:g} ({c.steps} steps per probe, heuristic {c.heuristic}, "
        f"cost {c.cost})",
        f"floor: {floor_text(u)}",
        "",
        f"{'ratio':>6}{'budget':>12}  {'status':<12}{'slowdown':>9}{'remats':>8}{'s/step':>8}",
    ]
    for p in search.probes:
        ran = p.status == "ok"
        rows.append(
            (
                f"{p.ratio:>6.2f}{human_bytes(p.budget):>12}  {p.status:<12}"
                + (f"{p.slowdown:>8.3f}x{p.remats:>8,}{p.seconds_per_step:>8.2f}" if ran else "")
            ).rstrip()
        )
    best = search.lowest
    rows.append("")
    if best is None:
        rows.append(f"no probed ratio trains within {search.max_slowdown:g}x")
    else:
        rows.append(
            f"lowest ratio within {search.max_slowdown:g}x: {best.ratio:.2f} "
            f"({human_bytes(best.budget)}, {best.slowdown:.3f}x), "
            f"{best.budget / u.floor:.2f} x the floor"
        )
    return "\n".join(rows)


def trace_recorder(path: str):
    from . import sim

    record = getattr(sim, "record", None)
    if record is None:
        print(
            "minidtr train: --trace needs minidtr.sim.record, which this version of minidtr "
            "does not have yet",
            file=sys.stderr,
        )
        return None
    return record(path)


def finish_outputs(
    result, events_path: str | None, plot_path: str | None, trace_path: str | None = None
) -> None:
    if events_path:
        write_event_log(
            events_path, result.runtime, model=result.config.model, size=result.config.size
        )
        print(
            f"event log: {events_path} ({len(result.runtime.events):,} events; "
            f"minidtr explain {events_path})"
        )
    if plot_path:
        from .plots import memory_timeline

        memory_timeline(
            result.runtime.events,
            plot_path,
            result.budget,
            title=f"{result.config.model} ({result.config.size}), {result.config.steps} steps",
            cost=result.config.cost,
        )
        print(f"memory timeline: {plot_path}")
    if trace_path:
        print(f"trace: {trace_path}")


def summary_table(result) -> str:
    c, s = result.config, result.stats
    task = result.task
    rows = [
        f"minidtr train {c.model} --size {c.size} --steps {c.steps} --batch "
        f"{task.batch_size} --seed {c.seed} ({task.model.num_parameters():,} parameters)"
    ]
    if result.budget is None:
        rows.append(f"budget: none (heuristic {c.heuristic}, dealloc {c.dealloc}, cost {c.cost})")
    else:
        ratio = (
            f" = {result.budget / result.unbounded_peak:.2f} x unbounded peak "
            f"{human_bytes(result.unbounded_peak)}"
            if result.unbounded_peak
            else ""
        )
        rows.append(
            f"budget: {human_bytes(result.budget)}{ratio} "
            f"(heuristic {c.heuristic}, dealloc {c.dealloc}, cost {c.cost})"
        )
    if result.floors is not None:
        rows.append(f"floor: {floor_text(result.floors)}")
    tail = min(10, len(result.losses))
    end_loss = sum(result.losses[-tail:]) / tail
    width = 22
    rows.append("")
    rows.append(f"{'':<{width}}{'start':>12}{'end':>12}")
    rows.append(
        f"{'loss':<{width}}{result.losses[0]:>12.4f}{end_loss:>12.4f}"
        f"   (end: mean of the last {tail} steps)"
    )
    rows.append(
        f"{'test ' + task.metric:<{width}}{result.accuracy_start:>12.1%}"
        f"{result.accuracy_end:>12.1%}"
    )
    rows.append("")
    peak = s["peak_memory"]
    of_budget = f" ({peak / result.budget:.0%} of the budget)" if result.budget else ""
    rows.append(
        f"{'steps/s':<{width}}{result.steps_per_second:.2f}"
        f"  ({result.seconds:.1f} s for {len(result.losses)} steps)"
    )
    rows.append(f"{'peak memory':<{width}}{human_bytes(peak)}{of_budget}")
    forced = s["evictions"] - s["dead_evictions"]
    rows.append(
        f"{'evictions':<{width}}{s['evictions']:,}  ({forced:,} forced by the budget, "
        f"{s['dead_evictions']:,} of dead tensors)"
    )
    remats = f"{'remats':<{width}}{s['remats']:,}"
    if s.get("orphan_remats"):
        remats += f"  ({s['orphan_remats']:,} of them rebuilt orphans, see below)"
    rows.append(remats)
    rows.append(
        f"{'slowdown':<{width}}{s['slowdown']:.3f}x  ((compute {s['compute_cost']:.3g} + "
        f"remat {s['remat_cost']:.3g}) / compute, in clock units, see below)"
    )
    rows.append(
        f"{'eviction search':<{width}}{s['search_time']:.2f} s over {s['searches']:,} searches"
    )
    rows.append("")
    rows.append(f"The clock counts {clock_unit(c.cost)}.")
    if s.get("orphan_remats"):
        rows.append(f"Orphans: {ORPHAN_NOTE}.")
    return "\n".join(rows)


def demo_report(
    steps: int = DEMO_STEPS,
    progress: Progress | None = None,
    size: str = "small",
    ratio: float = DEMO_RATIO,
):
    """Train the demo (by default; tests take a smaller one) and return (the result, its
    text: the summary table and the peak, eviction and recomputation sections of
    ``explain``)."""
    from .training import TrainConfig, train

    config = TrainConfig(
        DEMO_MODEL, size=size, steps=steps, ratio=ratio, cost="flops", record_events=True
    )
    progress = progress or Progress(steps, False)
    result = train(config, progress=progress.steps, on_loss=progress.on_loss, watch=progress.watch)
    summary = summarize([runtime_header(result.runtime), *result.runtime.events])
    text = explain(summary, top=3)
    return result, summary_table(result) + "\n\n" + text[text.index("The peak") :]


def run_demo(args: argparse.Namespace) -> int:
    check_outputs("minidtr demo", {"--plot": args.plot})
    if args.plot:
        from .plots import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as e:
            usage_error("minidtr demo", f"--plot: {e}")
    print(
        f"Training the small {DEMO_MODEL} on the 8x8 digits under {DEMO_RATIO:.0%} of the "
        "memory it needs without a budget (the peak of two unbounded steps, measured "
        "first).\n"
    )
    result, text = demo_report(DEMO_STEPS, Progress(DEMO_STEPS, True))
    print(text)
    finish_outputs(result, None, args.plot)
    print(
        "\nNext: minidtr train MODEL --ratio 0.5 --events ev.jsonl; minidtr explain ev.jsonl; "
        "minidtr models"
    )
    return 0


def run_explain(args: argparse.Namespace) -> int:
    check_input("minidtr explain", args.events)
    check_outputs("minidtr explain", {"--html": args.html})
    events = load_events(args.events)
    print(explain(summarize(events), top=args.top))
    if args.html:
        from .explorer import write_html

        size = write_html(events, args.html, title=args.events)
        print(f"\nexplorer page: {args.html} ({human_bytes(size)}; open it in a browser)")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from .plots import memory_timeline, require_matplotlib

    check_input("minidtr plot", args.events)
    check_outputs("minidtr plot", {"OUT.png": args.out})
    try:
        require_matplotlib()
    except ImportError as e:
        usage_error("minidtr plot", str(e))
    events = load_events(args.events)
    budget = args.budget if args.budget is not None else summarize(events).budget
    memory_timeline(events, args.out, budget, title=args.events)
    print(f"memory timeline: {args.out}")
    return 0


def run_models(args: argparse.Namespace) -> int:
    from .models.tasks import MODELS, SIZES, build_model

    print(f"{'model':<13}{'parameters (' + '/'.join(SIZES) + ')':<32}data and task")
    for name, (_, description) in MODELS.items():
        counts = "/".join(f"{build_model(name, size).num_parameters():,}" for size in SIZES)
        print(f"{name:<13}{counts:<32}{description}")
    return 0


def run_sim(argv: Sequence[str]) -> int:
    try:
        from .sim.cli import main as sim_main
    except ImportError as e:
        print(
            f"minidtr sim: the simulator's command line is not available in this version ({e})",
            file=sys.stderr,
        )
        return 2
    return sim_main(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; returns its exit status (usage errors raise ``SystemExit(2)``, as
    argparse does, after a one-line message). A reader that stops reading the output
    (``minidtr explain ev.jsonl | head``) ends the command quietly."""
    try:
        status = run_command(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # here, not at the interpreter's exit, where an error is only shown
        return status
    except BrokenPipeError:
        # what is left to print goes nowhere, not into an error at the interpreter's exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def run_command(argv: list[str]) -> int:
    from ._startup import release_import_guard

    release_import_guard()  # the imports are done: interrupts are this function's now
    if argv and argv[0] == "sim":
        return run_sim(argv[1:])
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:  # named by the subcommand, whose --help lists its options
            usage_error(f"minidtr {args.command}", f"unrecognized arguments: {' '.join(unknown)}")
    except KeyboardInterrupt:
        print("minidtr: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    handlers = {
        "train": run_train,
        "demo": run_demo,
        "explain": run_explain,
        "plot": run_plot,
        "models": run_models,
    }
    from .runtime.registry import deferred_interrupts

    try:
        with deferred_interrupts():
            return handlers[args.command](args)
    except KeyboardInterrupt:
        print(f"minidtr {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise
    except (ValueError, ImportError, OSError) as e:
        print(f"minidtr {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILED
