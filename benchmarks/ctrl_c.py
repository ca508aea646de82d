"""Ctrl-C at random moments of a budgeted training loop: how many runs end clean.

    python benchmarks/ctrl_c.py                      # 100 runs, minidtr's handler
    python benchmarks/ctrl_c.py --python-handler     # the same with Python's own

Each run is a process that trains a small tanh network under a budget inside
``with md.Runtime(...)`` until a real SIGINT, sent after a random delay, stops it; it
then checks the allocator: counted memory equal to the resident storages' bytes,
nothing left locked or busy, Python's handler back. A run is *clean* when that holds,
*miscounted* when it does not, *crashed* when the loop died of another error, *lost*
when the Ctrl-C did not stop it within 10 s. ``--python-handler`` puts Python's own
handler back inside the runtime, as before minidtr answered Ctrl-C itself
(``minidtr/runtime/interrupts.py``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr.cli_args import positive_seconds, whole_number

LOOP = """
import gc, signal, sys
import numpy as np
import minidtr as md
from minidtr.runtime import allocator_for
from minidtr.runtime.storage import Storage

rng = np.random.default_rng(0)
w = [md.tensor(rng.standard_normal((64, 64)).astype(np.float32), requires_grad=True)
     for _ in range(4)]
allocator = allocator_for("cpu")
print("ready", flush=True)
try:
    with md.Runtime(budget=200_000, max_slowdown=None, max_wall_slowdown=None):
        if sys.argv[1] == "python":
            signal.signal(signal.SIGINT, signal.default_int_handler)
        while True:
            x = md.tensor(rng.standard_normal((32, 64)).astype(np.float32))
            for i in range(12):
                x = md.tanh(x @ w[i % 4])
            (x * x).sum().backward()
            for p in w:
                p.grad = None
except KeyboardInterrupt:
    pass
gc.collect()
storages = [o for o in gc.get_objects() if isinstance(o, Storage) and o.allocator is allocator]
resident = sum(s.nbytes for s in storages if s.buffer is not None)
clean = (allocator.memory == resident and not allocator.busy and len(allocator.runtimes) == 1
         and not [s for s in storages if s.locks])
print("clean" if clean else "miscounted", flush=True)
"""


def one_run(handler: str, delay: float) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen(
        [sys.executable, "-c", LOOP, handler],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        if process.stdout.readline() != "ready\n":
            process.kill()
            return "crashed"
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return "lost"
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return last if last in ("clean", "miscounted") else "crashed"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=whole_number(1), default=100, help="processes to interrupt")
    p.add_argument(
        "--max-delay", type=positive_seconds, default=0.6, help="the latest a SIGINT is sent"
    )
    p.add_argument("--seed", type=whole_number(0), default=0, help="of the delays")
    p.add_argument(
        "--python-handler", action="store_true", help="Python's own handler inside the runtime"
    )
    args = p.parse_args()
    handler = "python" if args.python_handler else "minidtr"
    delays = random.Random(args.seed)
    counts: Counter[str] = Counter()
    for run in range(args.runs):
        counts[one_run(handler, delays.uniform(0.05, args.max_delay))] += 1
        print(f"\r{run + 1}/{args.runs}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    kinds = ("clean", "miscounted", "crashed", "lost")
    shown = ", ".join(f"{kind} {counts[kind]}" for kind in kinds)
    print(f"{handler}'s handler, {args.runs} runs: {shown}")


if __name__ == "__main__":
    main()
