"""What the reference policy costs: the bundled traces replayed with the accelerator and with
``reference=True`` (the plain loop, e* walked at every score), same decisions.

    python benchmarks/reference_speed.py [--ratios 0.5,0.3] [--heuristics dtr,dtr_eq]

For each trace, ratio and heuristic: the eviction decisions made (the same both ways, or
the script stops), the decisions per second of search time (``search_time``: only the
choosing) and the whole replay's seconds, with the accelerator and with the reference.
Wall times depend on the machine and its load; the decision counts do not.
"""

from __future__ import annotations

import argparse

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.cli_args import ratios, runtime_heuristics


def rate(decisions: int, result: sim.SimResult) -> str:
    """Decisions per second of search time."""
    if not decisions or result.search_time <= 0:
        return "-"
    return f"{decisions / result.search_time:,.0f}"


def replay(trace, ratio: float, heuristic: str, reference: bool) -> sim.SimResult:
    return sim.simulate(trace, ratio=ratio, heuristic=heuristic, reference=reference)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ratios", type=ratios, default=[0.5, 0.3])
    p.add_argument("--heuristics", type=runtime_heuristics, default=["dtr", "dtr_eq", "msps"])
    args = p.parse_args()
    print(
        f"{'trace':<12}{'ratio':>6}{'heuristic':>10}{'decisions':>10}"
        f"{'fast /s':>11}{'ref /s':>10}{'fast s':>8}{'ref s':>8}{'ref/fast':>9}"
    )
    for path in sim.bundled_traces():
        trace = sim.load_log(path)
        for ratio in args.ratios:
            for heuristic in args.heuristics:
                fast = replay(trace, ratio, heuristic, reference=False)
                ref = replay(trace, ratio, heuristic, reference=True)
                if (fast.evictions, fast.remats, fast.status) != (
                    ref.evictions,
                    ref.remats,
                    ref.status,
                ):
                    raise SystemExit(f"{trace.name} {ratio} {heuristic}: the two decided apart")
                decisions = fast.evictions - fast.dead_evictions
                print(
                    f"{trace.name:<12}{ratio:>6}{heuristic:>10}{decisions:>10,}"
                    f"{rate(decisions, fast):>11}{rate(decisions, ref):>10}"
                    f"{fast.replay_time:>8.2f}{ref.replay_time:>8.2f}"
                    f"{ref.replay_time / fast.replay_time:>9.1f}"
                )


if __name__ == "__main__":
    main()
