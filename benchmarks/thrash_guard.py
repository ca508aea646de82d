"""The thrash guard's defaults against real runs: what trainable runs cost, and how fast
too-tight runs are stopped.

    python benchmarks/thrash_guard.py                 # both tables (tens of minutes)
    python benchmarks/thrash_guard.py --only tight    # the time to failure only
    python benchmarks/thrash_guard.py --only trainable --steps 3

*Trainable*: each model at the lowest ratio at which docs/models.md says it trains,
with both guards off: the cost model's slowdown at the end and the highest it was
after any rematerialization (what ``max_slowdown`` compares with its limit), and
the wall-time slowdown (what ``max_wall_slowdown`` compares). The defaults (4 and
10) must sit above these.

*Tight*: ``minidtr train MODEL --ratio R`` with the default guards, as a user would
run it (a fresh process each): the seconds until it exits (the unbounded measurement
and the first accuracy evaluation included), its exit status and its message.

Each run is in a fresh process, so that nothing one leaves resident counts in the next.
Wall times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import time

import interrupts  # Ctrl-C: one line, not a traceback; pool workers leave quietly

from minidtr.cli_args import positive_seconds, whole_number

TRAINABLE = (  # each model's lowest ratio in docs/models.md's frontier table
    ("resnet", 0.2, 10),
    ("densenet", 0.27, 10),
    ("unet", 0.2, 10),
    ("lstm", 0.22, 10),
    ("transformer", 0.19, 10),
    ("treelstm", 0.25, 5),
    ("mlp", 0.17, 10),
)
TIGHT = (("lstm", 0.2), ("unet", 0.15), ("densenet", 0.2), ("treelstm", 0.15))


def _trainable(model: str, ratio: float, steps: int) -> dict:
    from minidtr.runtime.remat import Rematerializer
    from minidtr.training import TrainConfig, train

    highest = [1.0]
    replay = Rematerializer.replay

    def noting(self, recipe, *args, **kwargs):
        replay(self, recipe, *args, **kwargs)
        highest[0] = max(highest[0], self.allocator.stats.slowdown)

    Rematerializer.replay = noting
    config = TrainConfig(model, steps=steps, ratio=ratio, max_slowdown=None, max_wall_slowdown=None)
    result = train(config)
    return {
        "slowdown": result.stats["slowdown"],
        "highest": highest[0],
        "wall": result.runtime.wall_slowdown(),
        "remats": result.stats["remats"],
        "seconds": result.seconds,
    }


def trainable(steps: int | None) -> None:
    print("trainable runs, both guards off")
    print(f"{'run':<28}{'slowdown':>10}{'highest':>10}{'wall':>8}{'remats':>9}{'s':>8}")
    for model, ratio, default_steps in TRAINABLE:
        n = steps or default_steps
        with multiprocessing.get_context("spawn").Pool(1, interrupts.quiet_worker) as pool:
            try:
                r = pool.apply(_trainable, (model, ratio, n))
            except MemoryError as error:  # a BudgetError: the table's ratio no longer fits
                print(f"{f'{model} {ratio}, {n} steps':<28}  {type(error).__name__}: {error}")
                continue
        print(
            f"{f'{model} {ratio}, {n} steps':<28}{r['slowdown']:>9.2f}x{r['highest']:>9.2f}x"
            f"{r['wall']:>7.1f}x{r['remats']:>9,}{r['seconds']:>8.1f}",
            flush=True,
        )


def tight(limit: float) -> None:
    print("\ntoo-tight runs, default guards: minidtr train MODEL --ratio R --no-progress")
    for model, ratio in TIGHT:
        argv = [sys.executable, "-m", "minidtr", "train", model, "--ratio", str(ratio)]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [*argv, "--no-progress"], capture_output=True, text=True, timeout=limit
            )
            status, message = str(done.returncode), done.stderr.strip() or "(trained)"
        except subprocess.TimeoutExpired:
            status, message = "-", f"still running after {limit:.0f} s"
        seconds = time.perf_counter() - started
        print(f"{model} --ratio {ratio}: {seconds:.1f} s, exit {status}: {message[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("trainable", "tight"), default=None)
    parser.add_argument(
        "--steps", type=whole_number(1), default=None, help="steps per trainable run"
    )
    parser.add_argument(
        "--limit", type=positive_seconds, default=600.0, help="seconds per tight run"
    )
    args = parser.parse_args()
    if args.only != "tight":
        trainable(args.steps)
    if args.only != "trainable":
        tight(args.limit)


if __name__ == "__main__":
    main()
