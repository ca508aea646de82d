"""The paper's simulator's slowdowns on traces, for tests/data/simrd_expected.json.

    python benchmarks/simrd_expected.py --simrd PATH [TRACE ...] [--check | --write]

PATH is the ``simrd`` folder of a checkout of the DTR prototype's repository
(github.com/uwsampl/dtr-prototype; its Python package ``simrd`` and its dependency
``attrs``): the authors' simulator, run here as an oracle, as PyTorch is for the ops;
none of its code is in minidtr. Each TRACE (a bundled trace's file name, as
``resnet.log.gz``, or a path; by default every trace the JSON holds, of kind
``bundled``) is read with minidtr's reader and driven into the simulator's eager runtime
(``RuntimeV2EagerOptimized``) under the rules the JSON's ``about`` states; each of its
heuristics at ratios 0.9 to 0.2 gives (compute + recompute) / compute, or ``oom`` /
``thrash``. ``--check`` compares the figures with the JSON's and prints each cell that
differs (exit 1 if any); ``--write`` puts them into the JSON (after a re-recorded trace:
``tests/test_prototype_mode.py`` then checks ``--as-prototype`` against them).
The prototype's own logs (``resnet32-56.log``, ``unet-6.log``) are the simulator's own
input and are not redone here.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.sim import instructions as ins

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXPECTED = ROOT / "tests" / "data" / "simrd_expected.json"
RATIOS = ("0.9", "0.8", "0.7", "0.6", "0.5", "0.4", "0.3", "0.2")
# minidtr's names for the simulator's heuristics (its ablation grid's in the JSON's about)
HEURISTICS = {
    "dtr": "DTR",
    "dtr_eq": "DTREqClass",
    "dtr_local": "DTRLocal",
    "msps": "MSPS",
    "lru": "LRU",
    "size": "LargestStorage",
    "estar+size+nostale": "AbESize",
    "estar+nosize+stale": "AbEStale",
    "estar+nosize+nostale": "AbE",
    "eq+size+nostale": "AbEqSize",
    "eq+nosize+stale": "AbEqStale",
    "eq+nosize+nostale": "AbEq",
    "local+size+nostale": "AbLocalSize",
    "local+nosize+stale": "AbLocalStale",
    "local+nosize+nostale": "AbLocal",
    "none+size+stale": "AbSizeStale",
    "none+nosize+stale": "AbStale",
}


def drive(trace: sim.Trace, simulator):
    """A function of a simulator runtime that replays ``trace`` in it."""
    operator = simulator["Operator"]

    def run(rt) -> None:
        names: dict = {}  # a trace's name -> the simulator's tensor it refers to
        order: list[str] = []  # names in the order they were defined (the outputs' pins)

        def define(name, tensor):
            names[name] = tensor
            order.append(name)

        def pin(tensor):
            if not tensor.defined:
                rt.rematerialize(tensor)
            rt.pin(tensor)

        for step in trace.instructions:
            kind = type(step)
            if kind is ins.Constant:
                (tensor,) = rt.compute([], operator(0, (step.nbytes,), (-1,), "constant"))
                define(step.name, tensor)
                rt.pin(tensor)
            elif kind is ins.Call:
                args = [names[a] for a in step.args]
                sizes = [0 if r.alias >= 0 else r.nbytes for r in step.results]
                aliases = [r.alias for r in step.results]
                if not step.results:  # an access: a 0-byte op released at once
                    sizes, aliases = [0], [-1]
                op = operator(step.time, tuple(sizes), tuple(aliases), step.op)
                op.workspace = step.workspace  # reserved with the outputs, each time it runs
                op.total_size += step.workspace
                out = rt.compute(args, op)
                for result, tensor in zip(step.results, out, strict=False):
                    define(result.name, tensor)
                    if step.constant:
                        rt.pin(tensor)
                if not step.results:
                    rt.release(out[0])
            elif kind is ins.Mutate:
                args = [names[a] for a in step.args]
                sizes = tuple(args[m].storage.size for m in step.mutate)
                op = operator(step.time, sizes, (-1,) * len(sizes), step.op)
                out = rt.compute(args, op)
                for m, tensor in zip(step.mutate, out, strict=True):
                    old = names[step.args[m]]
                    define(step.args[m], tensor)
                    rt.release(old)
            elif kind is ins.Copy:
                define(step.dst, rt.get(names[step.src]))
            elif kind is ins.CopyFrom:
                old = names[step.dst]
                define(step.dst, rt.get(names[step.src]))
                rt.release(old)
            elif kind is ins.Release:
                if step.name in names:
                    rt.release(names.pop(step.name))
            elif kind is ins.MakeConstant:
                tensor = names[step.name]
                if tensor.defined or not step.if_resident:
                    pin(tensor)
        held = dict.fromkeys(n for n in order if n in names)
        for name in held:
            pin(names[name])

    return run


def load_simulator(path: pathlib.Path) -> dict:
    sys.path.insert(0, str(path))
    from simrd.heuristic import ablation, dtr, etc  # noqa: F401 (registers them)
    from simrd.heuristic.heuristic import Heuristic
    from simrd.runtime import runtime as base
    from simrd.runtime import v1, v2
    from simrd.tensor import Operator

    def releasing_workspace(runtime: type) -> type:
        """``runtime`` releasing an op's workspace (counted in its ``total_size``, so that
        room is made for it and the peak sees it) as soon as the op has run."""

        class WithWorkspace(runtime):
            def _compute(self, t, rematerialize=True):
                result = super()._compute(t, rematerialize=rematerialize)
                self.memory_usage -= getattr(t.op, "workspace", 0)
                return result

        return WithWorkspace

    heuristics = {**vars(dtr), **vars(etc), **vars(ablation)}
    return {
        "Operator": Operator,
        "Heuristic": Heuristic,
        "V1": releasing_workspace(v1.RuntimeV1),
        "Eager": releasing_workspace(v2.RuntimeV2EagerOptimized),
        "RematExceeded": base.RematExceededError,
        "heuristics": {ours: heuristics[theirs] for ours, theirs in HEURISTICS.items()},
    }


def figures(trace: sim.Trace, simulator: dict) -> dict:
    """The baseline (peak, compute) and every heuristic's slowdown at every ratio."""
    run = drive(trace, simulator)
    baseline = simulator["V1"](math.inf, simulator["Heuristic"](), stats=False, trace=False)
    run(baseline)
    peak = baseline.telemetry.summary["max_memory"]
    compute = baseline.telemetry.summary["model_compute"]
    cells: dict = {}
    for ours, heuristic in simulator["heuristics"].items():
        row = cells[ours] = {}
        for ratio in RATIOS:
            rt = simulator["Eager"](
                int(float(ratio) * peak),
                heuristic(),
                remat_limit=compute,
                stats=False,
                trace=False,
            )
            try:
                run(rt)
                row[ratio] = round(rt.clock / compute, 6)
            except MemoryError:
                row[ratio] = "oom"
            except simulator["RematExceeded"]:
                row[ratio] = "thrash"
    return {"kind": "bundled", "peak": peak, "compute": compute, "cells": cells}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simrd", required=True, type=pathlib.Path, help="its simrd folder")
    parser.add_argument("traces", nargs="*", help="bundled trace names or paths")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true", help="compare with the JSON (default)")
    what.add_argument("--write", action="store_true", help="write the figures into the JSON")
    args = parser.parse_args()
    if not (args.simrd / "simrd" / "runtime").is_dir():
        parser.error(f"--simrd {args.simrd}: no simrd package there (its simrd/ folder)")
    expected = json.loads(EXPECTED.read_text())
    names = args.traces or [n for n, t in expected["traces"].items() if t["kind"] == "bundled"]
    simulator = load_simulator(args.simrd)
    differ = 0
    for name in names:
        path = pathlib.Path(name)
        if not path.exists():
            path = sim.bundled_traces([name.removesuffix(".log.gz")])[0]
        got = figures(sim.load_log(path), simulator)
        want = expected["traces"].get(path.name)
        if args.write:
            expected["traces"][path.name] = got
            print(f"{path.name}: peak {got['peak']:,}, compute {got['compute']:,}: written")
            continue
        if want is None:
            print(f"{path.name}: not in {EXPECTED.name}")
            differ += 1
            continue
        cells = [(h, r) for h in got["cells"] for r in RATIOS]
        wrong = [c for c in cells if got["cells"][c[0]][c[1]] != want["cells"][c[0]][c[1]]]
        for h, r in wrong:
            print(f"{path.name} {h} {r}: {got['cells'][h][r]} against {want['cells'][h][r]}")
        base = (got["peak"], got["compute"]) == (want["peak"], want["compute"])
        print(f"{path.name}: {len(cells) - len(wrong)} of {len(cells)} cells equal, "
              f"baseline {'equal' if base else 'different'}")  # fmt: skip
        differ += len(wrong) + (not base)
    if args.write:
        EXPECTED.write_text(json.dumps(expected, indent=1) + "\n")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
