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
import sys
from collections.abc import Sequence

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
from .runtime.heuristics import HEURISTIC_NAMES
from .runtime.runtime import COST_MODELS, DEALLOC_POLICIES

DEMO_MODEL = "resnet"
# The paper's headline budget. The small ResNet-32 is in the paper's memory regime
# (constants 5% of its peak, floor 0.12): at 0.3 it costs about 1.25x recomputation.
DEMO_RATIO = 0.3
DEMO_STEPS = 40
DEMO_PERCENT = round(100 * DEMO_RATIO)
FIND_BUDGET_SLOWDOWN = 2.0  # the paper's thrashing line
FIND_BUDGET_STEPS = 3


def parse_bytes(text: str) -> int:
    """``123456``, ``512K``, ``1.5M``, ``2G`` (powers of 1024) -> bytes."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a byte count: {text!r} (use e.g. 3000000, 512K, 1.5M)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget cannot be negative: {text!r}")
    return int(value)


def parse_ratio(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"--ratio must be in (0, 1], got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from .models.tasks import MODELS, SIZES

    parser = argparse.ArgumentParser(
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
    ex.add_argument("--top", type=int, default=5, help="how many ops to list (default 5)")
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
    limit.add_argument(
        "--budget",
        type=parse_bytes,
        metavar="BYTES",
        help="memory budget in bytes (K, M, G suffixes allowed)",
    )
    limit.add_argument(
        "--ratio",
        type=parse_ratio,
        metavar="R",
        help="budget as a fraction of the unbounded peak (of the first two training steps, "
        "measured first on a fresh copy of the model)",
    )
    p.add_argument(
        "--heuristic",
        default="dtr",
        metavar="H",
        help=f"eviction heuristic: {', '.join(HEURISTIC_NAMES)} or an ablation name "
        "like eq+size+nostale (default dtr)",
    )
    p.add_argument(
        "--dealloc",
        default="eager",
        choices=DEALLOC_POLICIES,
        help="what happens when a tensor's last reference dies (default eager)",
    )
    p.add_argument(
        "--no-orphan-rebuild",
        action="store_true",
        help="plain eager eviction, as the paper's prototype: do not rebuild the evicted, "
        "still-referenced children of a dead tensor before evicting it",
    )
    p.add_argument(
        "--cost",
        default="flops",
        choices=COST_MODELS,
        help="op cost: flops (deterministic estimate, default) or time (measured)",
    )
    p.add_argument(
        "--max-slowdown",
        type=float,
        default=None,
        metavar="X",
        help="stop once recomputation makes the run X times slower than without it (the "
        "paper calls a run past 2 thrashing; default: never stop)",
    )
    p.add_argument("--size", default="small", choices=sizes, help="model size (default small)")
    p.add_argument(
        "--steps", type=int, default=None, help="training steps (default 50; 3 per probe)"
    )
    p.add_argument("--batch", type=int, default=None, help="batch size (default: per model)")
    p.add_argument("--seed", type=int, default=0, help="seed for data, init and order")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--events", metavar="FILE", help="write the event log (JSON lines)")
    p.add_argument("--trace", metavar="FILE", help="record a simulator trace (DTR log format)")
    p.add_argument("--plot", metavar="FILE", help="write the memory timeline as a PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def progress_bar(total: int, enabled: bool):
    """A tqdm bar over the steps when tqdm is installed and stderr is a terminal; None
    otherwise (the summary is printed either way)."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return lambda steps: tqdm(
        steps, total=total, unit="step", leave=False, disable=None, dynamic_ncols=True
    )


def show_loss(bar, loss: float) -> None:
    if hasattr(bar, "set_postfix_str"):
        bar.set_postfix_str(f"loss {loss:.4f}", refresh=False)


def run_train(args: argparse.Namespace) -> int:
    from .runtime import BudgetError, ThrashError
    from .training import TrainConfig, measure_unbounded, train

    if args.steps is None:
        args.steps = FIND_BUDGET_STEPS if args.find_budget else 50
    if args.steps < 1:
        print("minidtr train: --steps must be at least 1", file=sys.stderr)
        return 2
    if args.find_budget and (args.budget is not None or args.ratio is not None):
        print(
            "minidtr train: --find-budget searches the budget; drop --budget/--ratio",
            file=sys.stderr,
        )
        return 2
    if args.device != "cpu":
        from . import backend

        try:
            backend.xp_for(args.device)
        except RuntimeError as e:
            print(f"minidtr train: {e}", file=sys.stderr)
            return 2
    trace = None
    if args.trace:
        trace = trace_recorder(args.trace)
        if trace is None:
            return 2
    if args.plot:
        from .plots import require_matplotlib

        require_matplotlib()
    config = TrainConfig(
        args.model,
        size=args.size,
        steps=args.steps,
        batch=args.batch,
        seed=args.seed,
        device=args.device,
        budget=args.budget,
        ratio=args.ratio,
        heuristic=args.heuristic,
        dealloc=args.dealloc,
        rebuild_orphans=not args.no_orphan_rebuild,
        cost=args.cost,
        record_events=bool(args.events or args.plot),
        max_slowdown=args.max_slowdown,
    )
    if args.find_budget:
        return run_find_budget(config, args)
    unbounded = measure_unbounded(config)
    try:
        result = train(
            config,
            progress=progress_bar(args.steps, not args.no_progress),
            on_loss=show_loss,
            trace=trace,
            unbounded=unbounded,
        )
    except BudgetError as e:
        print(
            f"minidtr train: the budget is too small to train {args.model}:\n  {e}", file=sys.stderr
        )
        if not isinstance(e, ThrashError):
            print(f"  {floor_verdict(e.budget, unbounded)}", file=sys.stderr)
        return 1
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


def run_find_budget(config, args: argparse.Namespace) -> int:
    from .budget_search import find_budget

    limit = args.max_slowdown if args.max_slowdown is not None else FIND_BUDGET_SLOWDOWN
    search = find_budget(config, max_slowdown=limit)
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


def run_demo(args: argparse.Namespace) -> int:
    from .training import TrainConfig, train

    print(
        f"Training the small {DEMO_MODEL} on the 8x8 digits under {DEMO_RATIO:.0%} of the "
        "memory it needs without a budget (the peak of two unbounded steps, measured "
        "first).\n"
    )
    config = TrainConfig(
        DEMO_MODEL, steps=DEMO_STEPS, ratio=DEMO_RATIO, cost="flops", record_events=True
    )
    result = train(config, progress=progress_bar(DEMO_STEPS, True), on_loss=show_loss)
    print(summary_table(result))
    print()
    summary = summarize([runtime_header(result.runtime), *result.runtime.events])
    text = explain(summary, top=3)
    print(text[text.index("The peak") :])
    finish_outputs(result, None, args.plot)
    print(
        "\nNext: minidtr train MODEL --ratio 0.5 --events ev.jsonl; minidtr explain ev.jsonl; "
        "minidtr models"
    )
    return 0


def run_explain(args: argparse.Namespace) -> int:
    events = load_events(args.events)
    print(explain(summarize(events), top=args.top))
    if args.html:
        from .explorer import write_html

        size = write_html(events, args.html, title=args.events)
        print(f"\nexplorer page: {args.html} ({human_bytes(size)}; open it in a browser)")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from .plots import memory_timeline

    events = load_events(args.events)
    budget = args.budget if args.budget is not None else summarize(events).budget
    memory_timeline(events, args.out, budget, title=args.events)
    print(f"memory timeline: {args.out}")
    return 0


def run_models(args: argparse.Namespace) -> int:
    from .models.tasks import MODELS, SIZES, make_task

    print(f"{'model':<13}{'parameters (' + '/'.join(SIZES) + ')':<32}data and task")
    for name, (_, description) in MODELS.items():
        counts = "/".join(f"{make_task(name, size).model.num_parameters():,}" for size in SIZES)
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sim":
        return run_sim(argv[1:])
    args = build_parser().parse_args(argv)
    handlers = {
        "train": run_train,
        "demo": run_demo,
        "explain": run_explain,
        "plot": run_plot,
        "models": run_models,
    }
    try:
        return handlers[args.command](args)
    except (ValueError, ImportError, OSError) as e:
        print(f"minidtr {args.command}: {e}", file=sys.stderr)
        return 1
