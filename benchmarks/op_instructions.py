"""Instructions per op on 1-element tensors, counted by callgrind: a load-independent
measure of the per-op bookkeeping (wall-clock figures on a shared machine are not).

    python benchmarks/op_instructions.py [--chain N] [kinds ...]   # needs valgrind

Runs itself under ``valgrind --tool=callgrind``, collecting only inside each measured
chain (the chain runs inside ``functools.reduce``, which callgrind toggles on), and
prints the instructions per op of each kind: ``add``/``tanh`` chains with autograd off
(``nog``) and on (``g``), forward with grad plus backward (``fwdbw``; backward per
node is the difference to ``g``), and autograd off under a generous budget (``budget``:
nothing is evicted; the runtime is entered outside the count). Each chain is run once
uncounted first, and dropped at the end of the measurement, so the count includes
freeing what the chain made.

The cycle collector's work depends on everything allocated before, so compare two
versions with the same list of kinds, in the same order.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

KINDS = ["add-nog", "add-g", "tanh-nog", "tanh-g", "add-fwdbw", "tanh-fwdbw", "add-budget"]


def measure(n: int, kinds: list[str]) -> None:
    """The measured process: each chain inside ``functools.reduce``."""
    import numpy as np

    import minidtr as md

    one = np.ones(1, np.float32)
    one_md = md.tensor(one)

    def make(kind: str):
        op, mode = kind.split("-")
        step = (lambda y: y + one_md) if op == "add" else md.tanh

        def run():
            y = md.tensor(one, requires_grad=mode in ("g", "fwdbw"))
            for _ in range(n):
                y = step(y)
            if mode == "fwdbw":
                y.backward()
            del y

        return run

    for kind in kinds:
        run = make(kind)
        budget = md.Runtime(budget=1 << 40) if kind.endswith("-budget") else None
        if budget is not None:
            budget.__enter__()
        run()
        functools.reduce(lambda acc, f: f(), [run], None)
        if budget is not None:
            budget.__exit__(None, None, None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kinds", nargs="*", default=KINDS, help=f"default: {' '.join(KINDS)}")
    p.add_argument("--chain", type=int, default=2000, help="ops per chain (default 2000)")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    for kind in args.kinds:
        op, _, mode = kind.partition("-")
        if op not in ("add", "tanh") or mode not in ("nog", "g", "fwdbw", "budget"):
            p.error(f"unknown kind {kind!r} (known: {' '.join(KINDS)})")
    if args.inside:
        measure(args.chain, args.kinds)
        return
    if shutil.which("valgrind") is None:
        sys.exit("op_instructions: valgrind is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "cg.out"
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=functools_reduce",
            "--dump-after=functools_reduce",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--inside",
            "--chain",
            str(args.chain),
            *args.kinds,
        ]
        subprocess.run(command, env=env, check=True, capture_output=True)
        print(f"instructions per op, chains of {args.chain} 1-element float32 tensors")
        counts = {}
        for i, kind in enumerate(args.kinds, start=1):
            lines = pathlib.Path(f"{out}.{i}").read_text().splitlines()
            total = next(int(line.split()[1]) for line in lines if line.startswith("summary:"))
            counts[kind] = total / args.chain
            print(f"{kind:12}{counts[kind]:10,.0f}")
        for op in ("add", "tanh"):
            if f"{op}-fwdbw" in counts and f"{op}-g" in counts:
                node = counts[f"{op}-fwdbw"] - counts[f"{op}-g"]
                print(f"{op + ' backward':12}{node:10,.0f}  (per node: fwdbw - g)")


if __name__ == "__main__":
    main()
