"""Which evicted neighbourhood reproduces the prototype? h_DTR with minidtr's e* (connected
components of evicted storages, parents and children alike) against a directional e*
(evicted ancestors reachable through evicted parents, plus evicted descendants reachable
through evicted children: what the paper's definition and the prototype's simulator use).

The directional term is added here through the heuristics' extension point
(``COST_TERMS``) by a brute-force walk, as an experiment; it is not part of the library.

    python benchmarks/sim_estar_direction.py [TRACES_DIR]
"""

from __future__ import annotations

import pathlib
import sys

from minidtr import sim
from minidtr.runtime import heuristics

RATIOS = (0.9, 0.7, 0.5, 0.4, 0.3, 0.2, 0.1)
REFERENCE = {
    "resnet32-56": "0.5: 1.11, 0.4: 1.14, 0.3: 1.18, 0.2: 1.37",
    "unet-6": "0.5: 1.16, 0.4: OOM",
}


def _walk(start, step) -> float:
    total, seen = 0.0, set()
    stack = [s for s in step(start) if s.buffer is None]
    while stack:
        s = stack.pop()
        if id(s) not in seen:
            seen.add(id(s))
            total += s.cost
            stack.extend(n for n in step(s) if n.buffer is None)
    return total


def directional(storage, allocator) -> float:
    return (
        storage.cost
        + _walk(storage, lambda s: s.parents())
        + _walk(storage, lambda s: s.live_children())
    )


def main() -> None:
    heuristics.COST_TERMS["directional"] = directional
    default = pathlib.Path(__file__).resolve().parents[2] / "shared" / "traces"
    folder = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else default)
    for path in sorted(folder.glob("*.log")):
        trace = sim.load_log(path)
        print(f"\n{trace.name} (DTR.md, h_DTR: {REFERENCE.get(trace.name, '-')})")
        print(f"{'':26}" + "".join(f"{r:>8g}" for r in RATIOS))
        for label, name in (
            ("dtr (components)", "dtr"),
            ("dtr (directional e*)", "directional+size+stale"),
        ):
            cells = []
            for ratio in RATIOS:
                r = sim.simulate(trace, ratio=ratio, heuristic=name)
                cells.append(f"{r.slowdown:.2f}" if r.status == "ok" else r.status)
            print(f"{label:26}" + "".join(f"{c:>8}" for c in cells))


if __name__ == "__main__":
    main()
