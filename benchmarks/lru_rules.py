"""Which of the paper's simulator's rules, and which of minidtr's own, make h_LRU thrash.

    python benchmarks/lru_rules.py [--heuristic H] [--cells trace:ratio,...]

``--as-prototype`` differs from minidtr's default in a handful of rules (docs/simulator.md's
table). This ablation switches them on in the default one at a time, with minidtr's former
staleness stamp, and replays the cells where that stamp made h_LRU thrash. The rules are put
in by patching the reference policy (``Runtime(reference=True)``) in this process only, so
it measures, it changes nothing:

- ``stamprebuilds``: minidtr's stamp before it counted only the program's uses: a rebuild
  stamps the inputs it reads when it opens them and again when it locks them, and what it
  rebuilds when its replay ends (the default: a rebuild stamps nothing);
- ``lockearly``: a rebuild locks the inputs that are resident at once, when it is opened
  (the default locks them only once its evicted inputs are back);
- ``recipeorder``: evicted inputs rebuilt in the order the recipe reads them (the default:
  the one whose rebuild needs the most memory first);
- ``lastties``: the last of equal scores goes (the default: the first);
- ``noorphan``: ``rebuild_orphans=False``; ``keepdead``: ``keep_dead_remats=True``.

Slowdown = (compute + recompute) / compute; "thrash" = passed 2x, "oom" = the budget could not
be met.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr import sim
from minidtr.cli_args import names, parse_heuristic, parse_ratio
from minidtr.runtime import eviction, victims
from minidtr.runtime.options import RuntimeOptions
from minidtr.runtime.remat import Frame, Rematerializer

CELLS = "resnet:0.4,transformer:0.6,transformer:0.5,transformer:0.4,unet:0.4,mlp:0.6,treelstm:0.6"
VARIANTS = (
    (),
    ("stamprebuilds",),
    ("stamprebuilds", "lockearly"),
    ("stamprebuilds", "lastties"),
    ("stamprebuilds", "lockearly", "lastties"),
    ("lockearly",),
    ("recipeorder",),
    ("lastties",),
    ("noorphan",),
    ("keepdead",),
)

RULES: set[str] = set()
_lock_one = Rematerializer.lock_one
_refill = Rematerializer.refill
_frame = Rematerializer.frame
_choose = victims.choose_victim


def lock_one(self: Rematerializer, storage: Any, locked: list) -> None:
    _lock_one(self, storage, locked)
    if "stamprebuilds" in RULES:
        storage.last_access = self.allocator.clock


def refill(self: Rematerializer, storage: Any, result: Any, recipe: Any, link: Any) -> None:
    _refill(self, storage, result, recipe, link)
    if "stamprebuilds" in RULES:
        storage.last_access = self.allocator.clock


def frame(self: Rematerializer, recipe: Any, inputs: Any) -> Frame:
    opened = _frame(self, recipe, inputs)
    if "stamprebuilds" in RULES and recipe is not None:
        for storage in inputs:
            if storage.allocator is self.allocator:
                storage.last_access = self.allocator.clock
    if "lockearly" in RULES:
        for storage in opened.deferred:
            self.lock_one(storage, opened.locked)
        opened.deferred = []
    if "recipeorder" in RULES:
        order = {storage: i for i, storage in enumerate(inputs)}
        opened.evicted.sort(key=lambda storage: -order[storage])  # pop() gives the first
    return opened


def choose_victim(pooled: list, heuristic: Any, context: Any, record: bool) -> victims.Choice:
    """The default's choice, or with ``lastties`` the last of equal scores."""
    if "lastties" not in RULES:
        return _choose(pooled, heuristic, context, record)
    best, best_score, scored = None, math.inf, 0
    for storage in pooled:
        if storage.locks:
            continue
        value = heuristic.score(storage, context)
        scored += 1
        if best is None or value <= best_score:
            best, best_score = storage, value
    return victims.Choice(best, best_score, None, None, scored)


def patch() -> None:
    Rematerializer.lock_one = lock_one
    Rematerializer.refill = refill
    Rematerializer.frame = frame
    eviction.choose_victim = choose_victim


def replay(trace: Any, ratio: float, heuristic: str, rules: tuple[str, ...]) -> str:
    RULES.clear()
    RULES.update(rules)
    options = RuntimeOptions(
        reference=True,  # the patched policy: the accelerator would not see the patches
        rebuild_orphans="noorphan" not in rules,
        keep_dead_remats="keepdead" in rules,
    )
    result = sim.simulate(trace, ratio=ratio, heuristic=heuristic, options=options)
    return f"{result.slowdown:.3f}" if result.status == "ok" else result.status


def trace_cells(text: str) -> list[tuple[str, float]]:
    """``--cells``: comma-separated TRACE:RATIO, a bundled trace's name and a ratio in (0, 1]."""
    bundled = [path.name.removesuffix(".log.gz") for path in sim.bundled_traces()]
    cells = []
    for item in names(text):
        name, colon, ratio = item.partition(":")
        if not colon or name not in bundled:
            raise argparse.ArgumentTypeError(
                f"expected TRACE:RATIO, TRACE one of {', '.join(bundled)}, got {item!r}"
            )
        cells.append((name, parse_ratio(ratio)))
    return cells


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heuristic", type=parse_heuristic, default="lru")
    p.add_argument(
        "--cells", type=trace_cells, default=CELLS, help="trace:ratio,... (bundled traces)"
    )
    args = p.parse_args()
    cells = args.cells
    traces = {name: sim.load_log(sim.bundled_traces([name])[0]) for name, _ in cells}
    patch()
    print(f"{args.heuristic}: " + "  ".join(f"{n} {r:g}" for n, r in cells))
    for rules in VARIANTS:
        row = [replay(traces[n], r, args.heuristic, rules) for n, r in cells]
        print(f"  {'+'.join(rules) or 'default':<50} " + " ".join(f"{v:>7}" for v in row))
    prototype = RuntimeOptions(as_prototype=True)
    row = []
    for n, r in cells:
        result = sim.simulate(traces[n], ratio=r, heuristic=args.heuristic, options=prototype)
        row.append(f"{result.slowdown:.3f}" if result.status == "ok" else result.status)
    print(f"  {'--as-prototype':<50} " + " ".join(f"{v:>7}" for v in row))


if __name__ == "__main__":
    main()
