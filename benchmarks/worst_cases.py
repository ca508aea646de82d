"""Worst cases per heuristic, searched by hypothesis: programs and budgets that make the
longest cascades of recomputation and the most recomputation.

    python benchmarks/worst_cases.py [--examples N] [--heuristics dtr,lru,...] [--max-ops N]

For each heuristic, hypothesis draws random programs (``minidtr.testing.strategies.
random_programs``) and a budget between each program's floor (``budget_floor``, the
smallest budget the simulator replays it under) and its peak, runs it under that budget
with the event log on, and steers its search with ``hypothesis.target`` towards the
largest *cascade* (the replays one access needed: an op whose inputs were evicted, whose
inputs' inputs were, ...) and the largest *recompute ratio* (ops replayed per op run).
A budget above the floor that the heuristic still cannot meet is skipped: feasibility is
not monotonic in the budget (``minidtr.testing.floor``). Every run is also checked bit
for bit against the unbounded run, under the audit. Prints, per heuristic, the worst of
each found and the program that made it.
"""

from __future__ import annotations

import argparse
import collections
import os

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from minidtr.cli_args import runtime_heuristics, whole_number  # noqa: E402
from minidtr.runtime.heuristics import HEURISTIC_NAMES  # noqa: E402


def measure(program, heuristic: str, fraction: float) -> dict | None:
    """The run of ``program`` under a budget ``fraction`` of the way from its floor to its
    peak: its longest cascade and recompute ratio (None if no budget below the peak runs)."""
    import minidtr as md
    from minidtr.testing import assert_remat_equivalent, budget_floor, run_under

    floor = budget_floor(program, heuristic)
    if floor.minimal is None:
        return None
    budget = int(floor.minimal + fraction * (floor.peak - floor.minimal))
    reports = assert_remat_equivalent(
        program, budgets=[budget], heuristics=[heuristic], on_budget_error="record"
    )
    if reports[0]["status"] == "infeasible":
        return None  # above the floor, and yet it fails: feasibility is not monotonic
    runtime = md.Runtime(
        budget=budget, heuristic=heuristic, cost="flops", record_events=True, max_slowdown=None
    )
    run_under(program, runtime)
    cascades = collections.Counter(e["cascade"] for e in runtime.events if e["event"] == "remat")
    stats = runtime.stats()
    return {
        "cascade": max(cascades.values(), default=0),
        "recompute": stats["remats"] / max(stats["ops"], 1),
        "ratio": budget / floor.peak,
        "ops": len(program.instructions),
    }


def search(heuristic: str, examples: int, max_ops: int) -> dict[str, dict]:
    from hypothesis import HealthCheck, Phase, given, settings, target
    from hypothesis import strategies as st

    from minidtr.testing.strategies import budget_fractions, random_programs

    worst: dict[str, dict] = {}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.target],
        suppress_health_check=list(HealthCheck),
    )
    @given(random_programs(max_ops=max_ops), budget_fractions(), st.just(heuristic))
    def run(program, fraction, name):
        found = measure(program, name, fraction)
        if found is None:
            return
        target(float(found["cascade"]), label="cascade")
        target(found["recompute"], label="recompute")
        for key in ("cascade", "recompute"):
            if key not in worst or found[key] > worst[key][key]:
                worst[key] = found

    run()
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--examples", type=whole_number(1), default=100, help="programs per heuristic"
    )
    parser.add_argument("--heuristics", type=runtime_heuristics, default=list(HEURISTIC_NAMES))
    parser.add_argument(
        "--max-ops", type=whole_number(1), default=16, help="ops per program at most"
    )
    args = parser.parse_args()
    print(
        "| heuristic | longest cascade (replays) | at ratio | ops | most recompute "
        "(replays per op) | at ratio | ops |"
    )
    print("|---|---|---|---|---|---|---|")
    for heuristic in args.heuristics:
        worst = search(heuristic, args.examples, args.max_ops)
        c, r = worst.get("cascade"), worst.get("recompute")
        if c is None:
            print(f"| {heuristic} | - | | | - | | |")
            continue
        print(
            f"| {heuristic} | {c['cascade']} | {c['ratio']:.2f} | {c['ops']} | "
            f"{r['recompute']:.2f} | {r['ratio']:.2f} | {r['ops']} |"
        )


if __name__ == "__main__":
    main()
