"""Rewrite the measured figures of the docs from the scripts that measure them.

    python docs/refresh_figures.py                    # the quick figures (about a minute)
    python docs/refresh_figures.py --all              # and the slow ones (about 25 minutes)
    python docs/refresh_figures.py optimal train      # only these
    python docs/refresh_figures.py --check [NAME ...] # compare only; exit 1 if a page is stale
    python docs/refresh_figures.py --list             # the figures, their pages and commands

Each figure is a block of a page between ``<!-- figures:NAME -->`` and
``<!-- /figures -->``: what a command prints, or a table made from what it prints.
Refreshing runs the command, from the top of the repository, and rewrites the block
(docs/tutorial.md's output blocks have their own script, docs/refresh_tutorial.py, which
the figure ``tutorial`` runs). Reread the prose around a block after refreshing it.

Most figures come from the ``flops`` cost model and the simulator, the same on every
machine. Some parts of a block are not: wall-clock times, whatever a time-limited solver
reached, and losses and accuracies after training (they depend on the processor's
floating-point kernels). ``--check`` and tests/test_doc_figures.py compare everything
else exactly and leave those parts out (each figure's ``varies`` says which).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(command: str, cwd: Path = ROOT) -> str:
    """What ``command`` prints (stdout), run by the shell from ``cwd`` with this
    interpreter as ``python`` and ``python -m minidtr`` as ``minidtr``."""
    return run_timed(command, cwd)[0]


def run_timed(command: str, cwd: Path = ROOT) -> tuple[str, float]:
    """``run``, and the processor seconds the command took (its processes together)."""
    with tempfile.TemporaryDirectory() as bin_dir, tempfile.TemporaryFile("w+") as stderr:
        for name, line in (
            ("minidtr", f'exec "{sys.executable}" -m minidtr "$@"'),
            ("python", f'exec "{sys.executable}" "$@"'),
        ):
            path = Path(bin_dir) / name
            path.write_text(f"#!/bin/sh\n{line}\n")
            path.chmod(0o755)
        env = dict(os.environ)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["MPLBACKEND"] = "Agg"
        env.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the minidtr command and benchmarks
        process = subprocess.Popen(
            ["bash", "-c", "set -e\n" + command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        out = process.stdout.read()
        process.stdout.close()
        _, status, usage = os.wait4(process.pid, 0)  # the usage of bash and what it waited for
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            stderr.seek(0)
            raise RuntimeError(
                f"{command} exited with {process.returncode}:\n{stderr.read()[-3000:]}"
            )
    return out, usage.ru_utime + usage.ru_stime


def fenced(text: str) -> str:
    return "```\n" + text.rstrip("\n") + "\n```"


def in_scratch(*commands: str) -> list[str]:
    """The output of each command, run in order in one fresh directory (so that what one
    writes, such as a trace, the next can read; the repository's ``traces`` is linked)."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "traces").symlink_to(ROOT / "minidtr" / "sim" / "traces")
        return [run(command, cwd=Path(scratch)) for command in commands]


@dataclass(frozen=True)
class Figure:
    name: str
    page: str  # relative to the repository
    command: str  # what measures it (for --list and the docs)
    measure: Callable[[], str]  # the block's new text
    varies: tuple[str, ...] = ()  # regexes: the groups of each match are left out of --check
    slow: bool = False


# ---- the figures --------------------------------------------------------------------------


def train_sample() -> str:
    return fenced(run("minidtr train resnet --ratio 0.3 --steps 40 --no-progress"))


def find_budget() -> str:
    return fenced(run("minidtr train resnet --find-budget --no-progress"))


TRANSFORMER_TRACE = "minidtr train transformer --steps 3 --trace transformer.log --no-progress"


def sim_info() -> str:
    command = "minidtr sim info transformer.log"
    _, out = in_scratch(TRANSFORMER_TRACE, command)
    return fenced(f"$ {TRANSFORMER_TRACE}\n$ {command}\n{out}")


def sim_frontier() -> str:
    command = "minidtr sim frontier transformer.log --max-slowdown 1.5"
    _, out = in_scratch(TRANSFORMER_TRACE, command)
    return fenced(f"$ {command}\n{out}")


FIGURE2 = ("resnet", "densenet", "transformer", "unet")
FIGURE2_RATIOS = "0.9,0.8,0.7,0.6,0.5,0.4,0.3,0.2"
NAMES = {"resnet": "ResNet-32", "densenet": "DenseNet", "transformer": "Transformer"}
NAMES |= {"unet": "U-Net", "mlp": "MLP", "lstm": "LSTM", "treelstm": "Tree-LSTM"}


def figure2_tables() -> str:
    """The bundled traces' Figure 2 as tables: every heuristic on ResNet-32, h_DTR on the
    others (``minidtr sim``'s CSV, the same replays as ``docs/make_figures.py --only
    figure2``)."""
    import csv

    traces = " ".join(f"traces/{name}.log.gz" for name in FIGURE2)
    (out,) = in_scratch(
        f"minidtr sim {traces} --ratios {FIGURE2_RATIOS} --csv figure2.csv >/dev/null"
        " && cat figure2.csv"
    )
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for row in csv.DictReader(out.splitlines()):
        cell = f"{float(row['slowdown']):.2f}" if row["status"] == "ok" else row["status"]
        cell = "OOM" if cell == "oom" else cell
        cells.setdefault((row["trace"], row["heuristic"]), {})[row["ratio"]] = cell
    ratios = FIGURE2_RATIOS.split(",")

    def table(title: str, keys: list[tuple[str, str]], label: Callable) -> str:
        lines = [f"| {title} | " + " | ".join(ratios) + " |", "|---" * (len(ratios) + 1) + "|"]
        for key in keys:
            row = cells[key]
            lines.append(f"| {label(key)} | " + " | ".join(row[r] for r in ratios) + " |")
        return "\n".join(lines)

    heuristics = list(dict.fromkeys(h for t, h in cells if t == "resnet"))
    first = table("ResNet-32", [("resnet", h) for h in heuristics], lambda k: k[1])
    others = [(t, "dtr") for t in FIGURE2[1:]]
    return first + "\n\n" + table("h_DTR on", others, lambda k: NAMES[k[0]])


FIT_RULES = (
    ("bytes", "--fit bytes"),
    ("best", "--fit contiguous --placement best"),
    ("first", "--fit contiguous --placement first"),
)
FIT_COMMAND = "minidtr sim --bundled --ratios 0.5,0.3 --heuristics dtr {flags} --csv {name}.csv"


def fit_table() -> str:
    """The byte rule against the contiguous fit, best-fit and first-fit, on every bundled
    trace under h_DTR at 0.5 and 0.3 (docs/memory.md): the slowdown or the failure, the
    evictions the budget forced (not the dead values') in brackets, and for the
    contiguous fits the extra evictions (and best-fit's mean fragmentation)."""
    import csv

    outputs = in_scratch(
        *(
            FIT_COMMAND.format(flags=flags, name=name) + f" >/dev/null && cat {name}.csv"
            for name, flags in FIT_RULES
        )
    )
    runs = {
        name: {(r["trace"], r["ratio"]): r for r in csv.DictReader(out.splitlines())}
        for (name, _), out in zip(FIT_RULES, outputs, strict=True)
    }

    def outcome(row: dict[str, str]) -> str:
        status = row["status"]
        shown = f"{float(row['slowdown']):.2f}" if status == "ok" else status
        forced = int(row["evictions"]) - int(row["dead_evictions"])
        return f"{'OOM' if shown == 'oom' else shown} ({forced})"

    lines = [
        "| trace | ratio | bytes | contiguous, best-fit | extra | fragmentation"
        " | first-fit | extra |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(runs["bytes"], key=lambda k: (k[0], -float(k[1]))):
        best, first = runs["best"][key], runs["first"][key]
        lines.append(
            f"| {key[0]} | {key[1]} | {outcome(runs['bytes'][key])} | {outcome(best)} "
            f"| {best['extra_evictions']} | {float(best['fragmentation']):.2f} "
            f"| {outcome(first)} | {first['extra_evictions']} |"
        )
    return "\n".join(lines)


SQRT_N = (100, 400, 1600, 2000)
SQRT_N_HEURISTICS = ("dtr", "dtr_eq", "dtr_local", "msps", "lru", "size", "random")


def sqrt_n_table() -> str:
    """Theorem 3.1's chain (docs/simulator.md): extra ops / N per heuristic, next to Chen's
    sqrt(N) checkpointing, revolve and the paper's h_DTR."""
    from minidtr.sim.experiments import sqrt_n_rows

    def shown(value: object) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    names = " | ".join(SQRT_N_HEURISTICS)
    lines = [
        f"| N | budget | {names} | Chen √N | revolve (B−3 slots) | paper's h_DTR |",
        "|---" * (len(SQRT_N_HEURISTICS) + 5) + "|",
    ]
    for row in sqrt_n_rows(list(SQRT_N), list(SQRT_N_HEURISTICS)):
        cells = [shown(row[h]) for h in SQRT_N_HEURISTICS]
        cells += [shown(row["chen"]), shown(row["revolve"])]
        paper = row["reference_dtr"]
        cells.append("–" if paper is None else f"{paper:.2f}")
        lines.append(f"| {row['N']} | {row['budget']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


ADVERSARY = (  # (heuristic, budget B, path lengths N)
    ("dtr", 8, (200, 400, 800, 1600)),
    ("dtr", 4, (800,)),
    ("dtr", 16, (800,)),
    ("lru", 8, (1600,)),
    ("msps", 8, (1600,)),
)


def adversary_table() -> str:
    """Theorem 3.2's adversary (docs/simulator.md): DTR's ops against a static plan's."""
    from minidtr.sim.experiments import adversary_rows

    lines = [
        "| heuristic | N | B | DTR ops | static ops | ratio | N/B |",
        "|---|---|---|---|---|---|---|",
    ]
    for heuristic, budget, ns in ADVERSARY:
        for row in adversary_rows(list(ns), budget, None, [heuristic]):
            ratio = f"{row['ratio']:.1f}" if row["status"] == "ok" else row["status"]
            lines.append(
                f"| {heuristic} | {row['N']} | {budget} | {row['dtr_ops']:,.0f} "
                f"| {row['static_ops']:,.0f} | {ratio} | {row['N/B']:g} |"
            )
    return "\n".join(lines)


def explorer_load() -> str:
    return fenced(run("python benchmarks/explorer_load.py"))


MODEL_SCRIPTS = ("mlp", "resnet", "densenet", "unet", "lstm", "transformer", "treelstm")


def models_readme() -> str:
    """Each script of models/ for 3 steps at its default ratio: the slowdown it prints,
    and the processor time of the whole run (steadier than its wall time on a machine
    that does other work). The scripts run side by side, one per processor."""
    from concurrent.futures import ThreadPoolExecutor

    def measure(name: str) -> str:
        usage = run(f"python models/{name}.py --help")
        ratio = re.search(r"unbounded\s+peak\s+\(default\s+([\d.]+)\)", usage).group(1)
        out, took = run_timed(f"python models/{name}.py --steps 3")
        slowdown = re.search(r"slowdown\s+([\d.]+)x", out).group(1)
        return f"| [{name}.py]({name}.py) | {ratio} | {slowdown}× | {took:.1f} s |"

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        rows = list(pool.map(measure, MODEL_SCRIPTS))
    head = "| script | default `--ratio` | slowdown, 3 steps | CPU time of the run |"
    return "\n".join([head, "|---|---|---|---|", *rows])


def optimal() -> str:
    return run("python benchmarks/sim_optimal.py --markdown").rstrip("\n")


def bound() -> str:
    out = run("python benchmarks/sim_bound.py")
    return "\n".join(line for line in out.splitlines() if line.startswith("|"))


def frontier() -> str:
    out = run("python benchmarks/frontier.py")
    return "\n".join(line for line in out.splitlines() if line.startswith("|"))


def real_memory() -> str:
    return run("python benchmarks/real_memory.py").rstrip("\n")


COURSE_STEP7 = {
    "resnet": ("dtr", "dtr_eq", "dtr_local", "msps", "lru", "size"),
    "densenet": ("dtr", "msps", "lru"),
    "lstm": ("dtr", "dtr_eq", "lru"),
    "transformer": ("dtr", "dtr_local"),
}
COURSE_STEP7_RATIOS = (0.9, 0.7, 0.5, 0.4, 0.3, 0.2)


def course_step7() -> str:
    """The table of the course's step 7, as its reference solution computes it."""
    from minidtr import sim
    from minidtr.course.solutions.step7_figure2 import lowest_ratio, slowdowns

    header = " | ".join(str(r) for r in COURSE_STEP7_RATIOS)
    lines = [
        f"| trace | heuristic | {header} | lowest within 2× |",
        "|---" * (len(COURSE_STEP7_RATIOS) + 3) + "|",
    ]
    for name, heuristics in COURSE_STEP7.items():
        trace = sim.load_log(sim.bundled_traces([name])[0])
        for heuristic in heuristics:
            curve = slowdowns(trace, heuristic, COURSE_STEP7_RATIOS)
            cells = " | ".join("-" if s is None else f"{s:.3f}" for s in curve.values())
            lines.append(f"| {name} | {heuristic} | {cells} | {lowest_ratio(curve)} |")
    return "\n".join(lines)


def tutorial() -> str:
    """docs/refresh_tutorial.py rewrites its own blocks; nothing to put here."""
    run("python docs/refresh_tutorial.py")
    return ""


FIGURES = [
    Figure(
        "train",
        "docs/cli.md",
        "minidtr train resnet --ratio 0.3 --steps 40",
        train_sample,
        varies=(
            r"(?m)^loss +(\S+) +(\S+)",  # after 40 steps: depends on the processor's kernels
            r"(?m)^test accuracy +(\S+) +(\S+)",
            r"(?m)^steps/s +(\S+) +\((\S+) s",
            r"(?m)^eviction search +(\S+) s",
        ),
    ),
    Figure(
        "find-budget",
        "docs/cli.md",
        "minidtr train resnet --find-budget",
        find_budget,
        varies=(r"(?m)^ +[\d.]+ +[\d.]+ \w+B +ok +\S+ +\d+ +(\S+)$",),  # s/step
    ),
    Figure(
        "explorer-load",
        "docs/cli.md",
        "python benchmarks/explorer_load.py",
        explorer_load,
        varies=(
            r"written in (\S+) s",
            r"(?m)^(?:navigation|  of which|open a tab).*? ([\d.]+) s \(",
            r"(?m)^(?:full redraw|zoom in|select an?).*? ([\d.]+) ms",
        ),
        slow=True,
    ),
    Figure(
        "fit",
        "docs/memory.md",
        FIT_COMMAND.format(flags="--fit bytes|contiguous --placement best|first", name="RULE"),
        fit_table,
    ),
    Figure(
        "sqrt-n",
        "docs/simulator.md",
        "minidtr sim sqrt-n --n 100,400,1600,2000 --heuristics " + ",".join(SQRT_N_HEURISTICS),
        sqrt_n_table,
        slow=True,
    ),
    Figure(
        "adversary",
        "docs/simulator.md",
        "minidtr sim adversary --budget B --n N --heuristics H, for each row",
        adversary_table,
        slow=True,
    ),
    Figure("sim-info", "docs/simulator.md", "minidtr sim info transformer.log", sim_info),
    Figure(
        "sim-frontier",
        "docs/simulator.md",
        "minidtr sim frontier transformer.log --max-slowdown 1.5",
        sim_frontier,
    ),
    Figure(
        "figure2",
        "docs/simulator.md",
        f"minidtr sim traces/{{resnet,densenet,transformer,unet}}.log.gz --ratios {FIGURE2_RATIOS}",
        figure2_tables,
    ),
    Figure(
        "models-readme",
        "models/README.md",
        "python models/NAME.py --steps 3, for each script",
        models_readme,
        varies=(r"(?m)\| ([\d.]+ s) \|$",),
    ),
    Figure(
        "optimal",
        "docs/simulator.md",
        "python benchmarks/sim_optimal.py --markdown",
        optimal,
        # the solver's seconds, and what it reached where it did not prove the optimum
        varies=(
            r"(?m)^\|.*\| ([\d.]+) \|$",
            r"(?m)^\|(?=.*\| (?:[\d.]+\*|none|infeasible) \|).*\| ([^|]+ \| [^|]+) \| [^|]+ \|$",
        ),
        slow=True,
    ),
    Figure(
        "bound",
        "docs/simulator.md",
        "python benchmarks/sim_bound.py",
        bound,
        varies=(r"(?m)\| ([\d.]+) \|$",),  # the LP's seconds
        slow=True,
    ),
    Figure(
        "frontier",
        "docs/models.md",
        "python benchmarks/frontier.py",
        frontier,
        varies=(r"(?m)\| ([\d.]+%(?: \([\w ]+\))?) \|$",),  # accuracy after 40 steps
        slow=True,
    ),
    Figure(
        "real-memory",
        "docs/memory.md",
        "python benchmarks/real_memory.py",
        real_memory,
        # what the Python objects take: the interpreter's allocations vary a little
        varies=(
            r"(?m)^\| \w+ \| [\d.]+ \|(?: [^|]+ \|){4} ([\d.]+) \| ([\d.]+) \|",
            r"(?m)^\| \w+ \| [\d,]+ \| ([\d.]+) \| ([\d,]+) \|$",
        ),
        slow=True,
    ),
    Figure(
        "course-step7",
        "docs/course/step7_figure2.md",
        "step 7's figure2 (minidtr.course.solutions) on four bundled traces",
        course_step7,
    ),
]
BY_NAME = {f.name: f for f in FIGURES}

BLOCK = r"(<!-- figures:{name} -->\n)(.*?)(\n<!-- /figures -->)"


def shown(figure: Figure) -> str:
    """The figure's block as its page has it."""
    text = (ROOT / figure.page).read_text()
    found = re.findall(BLOCK.format(name=re.escape(figure.name)), text, flags=re.S)
    if len(found) != 1:
        raise SystemExit(f"{figure.page} has {len(found)} blocks named {figure.name!r}, not 1")
    return found[0][1]


def write(figure: Figure, body: str) -> None:
    path = ROOT / figure.page
    pattern = re.compile(BLOCK.format(name=re.escape(figure.name)), flags=re.S)
    shown(figure)  # exactly one block
    path.write_text(pattern.sub(lambda m: m.group(1) + body + m.group(3), path.read_text()))


def comparable(figure: Figure, text: str) -> str:
    """``text`` with the parts that vary from run to run replaced by ``…``."""
    for pattern in figure.varies:
        spans = [
            m.span(g)
            for m in re.finditer(pattern, text)
            for g in range(1, (m.re.groups or 0) + 1)
            if m.span(g) != (-1, -1)
        ]
        for start, end in sorted(spans, reverse=True):
            text = text[:start] + "…" + text[end:]
    return text


def stale(figure: Figure, body: str) -> str | None:
    """None when the page shows ``body`` (but for what varies), else a diff."""
    import difflib

    old, new = comparable(figure, shown(figure)), comparable(figure, body)
    if old == new:
        return None
    diff = difflib.unified_diff(
        old.splitlines(),
        new.splitlines(),
        f"{figure.page} ({figure.name})",
        "measured now",
        lineterm="",
    )
    return "\n".join(diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="figures to refresh")
    parser.add_argument("--all", action="store_true", help="the slow figures too")
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    parser.add_argument("--list", action="store_true", help="list the figures")
    args = parser.parse_args(argv)
    names = [*BY_NAME, "tutorial"]
    if args.list:
        for f in FIGURES:
            print(f"{f.name:14} {f.page:18} {'slow ' if f.slow else '     '} {f.command}")
        print(f"{'tutorial':14} {'docs/tutorial.md':18}       python docs/refresh_tutorial.py")
        return 0
    unknown = [n for n in args.names if n not in names]
    if unknown:
        parser.error(f"unknown figure {unknown[0]!r}; expected one of {', '.join(names)}")
    chosen = args.names or [f.name for f in FIGURES if args.all or not f.slow] + ["tutorial"]
    status = 0
    for name in chosen:
        if name == "tutorial":
            if not args.check:  # tests/test_tutorial_page.py checks it
                tutorial()
                print("tutorial: docs/tutorial.md refreshed (docs/refresh_tutorial.py)")
            continue
        figure = BY_NAME[name]
        try:
            body = figure.measure()
        except RuntimeError as e:  # a command failed (Chromium missing, ...): the next one
            print(f"{name}: not measured: {e}", file=sys.stderr)
            status = 1
            continue
        if args.check:
            diff = stale(figure, body)
            print(f"{name}: {'stale' if diff else 'as measured'} ({figure.page})")
            if diff:
                print(diff)
                status = 1
        else:
            write(figure, body)
            print(f"{name}: {figure.page} refreshed")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
