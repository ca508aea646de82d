"""What each heuristic's recomputation was for: the remat cost of a replay, split by the
storage an access asked for and the access that asked.

    python benchmarks/remat_attribution.py lstm --ratio 0.4 --heuristics dtr,belady
    python benchmarks/remat_attribution.py resnet --ratio 0.2 --steps 2

Records ``--steps`` unbounded training steps of a model (small preset, ``flops`` cost,
as ``benchmarks/frontier.py`` does), replays the trace at ``--ratio`` of its peak with
each heuristic (the live runtime's thrash guard, so a run stops where the live one
would), and groups the rematerializations by cascade: everything one access rebuilt,
its target (the storage the access needed, named by the op that made it) and the access
(the op, a read, or the orphans of a dying storage). Each row is that group's cost as a
fraction of the trace's compute; a heuristic's rows add up to its slowdown minus one.
Comparing h_DTR with the clairvoyant ``belady`` on the same trace shows which of h_DTR's
choices cost it: docs/models.md reads the LSTM's table this way.
"""

from __future__ import annotations

import argparse
from collections import Counter

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.budget_search import record_trace
from minidtr.cli_args import above_one, parse_ratio, whole_number
from minidtr.models import MODELS
from minidtr.runtime import BudgetError, ThrashError
from minidtr.sim.cli import heuristic_names
from minidtr.training import TrainConfig, measure_unbounded


def attribute(trace, options, heuristic: str) -> tuple[str, float, Counter]:
    """Replay ``trace`` with ``heuristic``; (status, slowdown so far, remat cost by
    "target <- access")."""
    replayer = sim.Replayer(
        options=options, heuristic=heuristic, trace=trace, live_guard=True, record_events=True
    )
    status = "ok"
    try:
        for ins in trace.instructions:
            replayer.step(ins)
    except ThrashError:
        status = "thrash"
    except BudgetError:
        status = "oom"
    finally:
        replayer.close()
    stats = replayer.stats
    groups: dict[int, list[dict]] = {}
    for event in replayer.runtime.events:
        if event["event"] == "remat":
            groups.setdefault(event["cascade"], []).append(event)
    by = Counter()
    for events in groups.values():
        targets = [e["op"] for e in events if e["parent"] is None]
        trigger = events[0]["trigger"].split(" ")[0]
        key = f"{targets[-1] if targets else '?'} <- {trigger}"
        # a multi-output op refills several storages in one replay, one event each
        by[key] += sum({e["replay"]: e["cost"] for e in events}.values())
    slowdown = 1.0 + stats.remat_cost / stats.compute_cost
    return status, slowdown, Counter({k: v / stats.compute_cost for k, v in by.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=list(MODELS))
    parser.add_argument("--ratio", type=parse_ratio, default=0.4)
    parser.add_argument("--heuristics", type=heuristic_names, default=["dtr", "belady"])
    parser.add_argument("--steps", type=whole_number(1), default=3)
    parser.add_argument("--max-slowdown", type=above_one, default=2.0)
    parser.add_argument("--rows", type=whole_number(1), default=12, help="largest groups shown")
    args = parser.parse_args()
    config = TrainConfig(
        args.model, size="small", steps=args.steps, cost="flops", max_slowdown=args.max_slowdown
    )
    floors = measure_unbounded(config)
    trace = record_trace(config)
    options = config.options.replace(budget=int(args.ratio * floors.peak))
    heuristics = args.heuristics
    results = {h: attribute(trace, options, h) for h in heuristics}
    print(
        f"{args.model}, {args.steps} steps, ratio {args.ratio} of the peak "
        f"{floors.peak:,} B; remat cost as a fraction of the trace's compute"
    )
    print("| rebuilt for (target <- access) | " + " | ".join(heuristics) + " |")
    print("|---" * (1 + len(heuristics)) + "|")
    total = Counter()
    for _, _, by in results.values():
        total.update(by)
    for key, _ in total.most_common(args.rows):
        cells = [f"{results[h][2].get(key, 0.0):.3f}" for h in heuristics]
        print(f"| {key} | " + " | ".join(cells) + " |")
    cells = []
    for h in heuristics:
        status, slowdown, _ = results[h]
        cells.append(f"{slowdown:.2f}x" + ("" if status == "ok" else f" ({status})"))
    print("| slowdown | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
