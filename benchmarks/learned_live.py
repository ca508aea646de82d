"""``learned`` against h_DTR, live, over several training steps of each bundled model.

    python benchmarks/learned_live.py                        # 7 models, 3 steps, 0.3 and 0.2
    python benchmarks/learned_live.py --models resnet,lstm --steps 4 --ratios 0.4,0.3

For each model (small size): an unbounded run of ``--steps`` training steps is recorded
as a trace; then each ratio of the unbounded peak is trained live with ``dtr`` and with
``learned`` (each in a fresh process), giving the slowdown in the cost model
((compute + recompute) / compute), or thrash (past the thrash guard, 4x) or oom. Last,
the lowest ratio at which each heuristic replays the trace within 2x
(``minidtr.sim.frontier``, to 0.01). ``learned`` learns from the step before, so its
first step is h_DTR's. (That a replay makes the live run's decisions exactly, learned's
included, is tests/test_sim_replay.py's; a trace recorded by ``train`` starts after the
model's parameters exist, so replays of it count them from their first use, and near
the floor decide a little differently from the live run.)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile

import interrupts  # Ctrl-C: one line, not a traceback; pool workers leave quietly

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from minidtr import sim  # noqa: E402
from minidtr.cli_args import names_from, ratios, runtime_heuristics, whole_number  # noqa: E402
from minidtr.models import MODELS  # noqa: E402
from minidtr.runtime import BudgetError, ThrashError  # noqa: E402
from minidtr.sim.frontier import frontier  # noqa: E402
from minidtr.training import TrainConfig, train  # noqa: E402


def live(model: str, steps: int, ratio: float, heuristic: str) -> dict:
    config = TrainConfig(model, steps=steps, ratio=ratio, heuristic=heuristic, evaluate=False)
    try:
        result = train(config)
    except ThrashError:
        return {"status": "thrash"}
    except BudgetError:
        return {"status": "oom"}
    stats = result.stats
    return {
        "status": "ok",
        "budget": result.budget,
        "slowdown": stats["slowdown"],
        "remats": stats["remats"],
        "evictions": stats["evictions"],
    }


def isolated(fn, *args):
    with multiprocessing.get_context("spawn").Pool(1, interrupts.quiet_worker) as pool:
        return pool.apply(fn, args)


def record(model: str, steps: int, path: str) -> None:
    train(TrainConfig(model, steps=steps, evaluate=False), trace=sim.record(path))


def cell(run: dict) -> str:
    return f"{run['slowdown']:.3f}" if run["status"] == "ok" else run["status"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=names_from(MODELS, "models"), default=list(MODELS))
    parser.add_argument("--steps", type=whole_number(1), default=3)
    parser.add_argument("--ratios", type=ratios, default=[0.3, 0.2])
    parser.add_argument("--heuristics", type=runtime_heuristics, default=["dtr", "learned"])
    parser.add_argument("--no-frontier", action="store_true", help="skip the lowest ratios")
    args = parser.parse_args()
    heuristics = args.heuristics
    columns = [f"{h} {r}" for r in args.ratios for h in heuristics]
    head = "| model | " + " | ".join(columns) + " |"
    if not args.no_frontier:
        head += f" lowest ratio within 2x: {' / '.join(heuristics)} |"
    print(f"{args.steps} training steps, slowdown in the cost model (flops)")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            path = os.path.join(tmp, f"{model}.log")
            isolated(record, model, args.steps, path)
            trace = sim.load_log(path)
            cells = [
                cell(isolated(live, model, args.steps, ratio, heuristic))
                for ratio in args.ratios
                for heuristic in heuristics
            ]
            row = f"| {model} | " + " | ".join(cells) + " |"
            if not args.no_frontier:
                lowest = [
                    frontier(trace, 2.0, heuristic, tolerance=0.01).lowest
                    for heuristic in heuristics
                ]
                row += " " + " / ".join("-" if p is None else f"{p.ratio:.2f}" for p in lowest)
                row += " |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
