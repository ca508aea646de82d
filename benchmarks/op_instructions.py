"""Instructions per op on 1-element tensors, counted by callgrind: a load-independent
measure of the per-op bookkeeping (wall-clock figures on a shared machine are not).

    python benchmarks/op_instructions.py [--chain N] [kinds ...]   # needs valgrind
    python benchmarks/op_instructions.py --calls [kinds ...]       # Python calls per op

Runs itself under ``valgrind --tool=callgrind``, collecting only inside each measured
chain (the chain runs inside ``functools.reduce``, which callgrind toggles on), and
prints the instructions per op of each kind: ``add``/``tanh`` chains with autograd off
(``nog``) and on (``g``), forward with grad plus backward (``fwdbw``), the backward
alone (``bw``: the chain is built outside the count, which covers ``backward()`` and
dropping what is left of the chain after it, as benchmarks/performance.py times it),
and autograd off under a generous budget (``budget``: nothing is evicted; the runtime
is entered outside the count). Kinds are OP-MODE; the default list covers add and tanh,
and ``OPS`` names the other chains (``python benchmarks/op_instructions.py --chain 500
relu-g relu-bw``). Each chain is run once uncounted first, and dropped at the end of
the measurement, so the count includes freeing what the chain made.

The cycle collector's work depends on everything allocated before, so compare two
versions with the same list of kinds, in the same order.

``--calls`` counts Python function calls per op instead (a ``sys.setprofile`` hook on
the same chains, no valgrind): how many frames the bookkeeping runs through.
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

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr.cli_args import whole_number

# chains y = f(y) of 1-element tensors; mul, matmul and linear by a constant, mean over
# a kept axis of size 1, stack of one tensor and then [0]; muls and rsubs: y * 0.5, 1.0 - y
OPS = (
    "add", "mul", "tanh", "sigmoid", "relu", "exp", "mean", "matmul", "linear", "stack",
    "muls", "rsubs",
)  # fmt: skip
KINDS = [
    "add-nog",
    "add-g",
    "tanh-nog",
    "tanh-g",
    "add-fwdbw",
    "tanh-fwdbw",
    "add-bw",
    "tanh-bw",
    "add-budget",
]


def chains(n: int, kinds: list[str]):
    """(kind, run, runtime) for each kind: ``run()`` builds and drops one chain (for
    ``bw``, runs backward on one built beforehand by ``run.build``); the runtime (None
    when unbudgeted) is to be entered around it."""
    import numpy as np

    import minidtr as md

    one = np.ones(1, np.float32)
    one_md = md.tensor(one)
    w = md.tensor(np.ones((1, 1), np.float32))
    steps = {
        "add": lambda y: y + one_md,
        "mul": lambda y: y * one_md,
        "tanh": md.tanh,
        "sigmoid": md.sigmoid,
        "relu": md.relu,
        "exp": md.exp,
        "mean": lambda y: md.mean(y, axis=0, keepdims=True),
        "matmul": lambda y: md.matmul(y, w),
        "linear": lambda y: md.linear(y, w),
        "stack": lambda y: md.stack([y], axis=0)[0],
        "muls": lambda y: y * 0.5,  # a Python scalar operand (ops/scalar.py)
        "rsubs": lambda y: 1.0 - y,
    }
    built: list = []

    def make(kind: str):
        op, mode = kind.split("-")
        step = steps[op]
        start = np.ones((1, 1), np.float32) if op in ("matmul", "linear") else one

        def build():
            y = md.tensor(start, requires_grad=mode in ("g", "fwdbw", "bw"))
            for _ in range(n):
                y = step(y)
            return y

        def run():
            y = built.pop() if mode == "bw" else build()
            if mode in ("fwdbw", "bw"):
                y.backward()
            del y

        run.build = (lambda: built.append(build())) if mode == "bw" else (lambda: None)
        return run

    for kind in kinds:
        budget = md.Runtime(budget=1 << 40) if kind.endswith("-budget") else None
        yield kind, make(kind), budget


def measure(n: int, kinds: list[str]) -> None:
    """The measured process: each chain inside ``functools.reduce``."""
    for _, run, budget in chains(n, kinds):
        if budget is not None:
            budget.__enter__()
        run.build()  # outside the count
        run()
        run.build()
        functools.reduce(lambda acc, f: f(), [run], None)
        if budget is not None:
            budget.__exit__(None, None, None)


def count_calls(n: int, kinds: list[str]) -> None:
    """Python function calls per op in each kind's chain (run once uncounted first)."""
    import collections

    print(f"Python calls per op, chains of {n} 1-element float32 tensors")
    calls: collections.Counter[str] = collections.Counter()

    def hook(frame, event, arg):
        if event == "call":
            calls[frame.f_code.co_qualname] += 1

    for kind, run, budget in chains(n, kinds):
        if budget is not None:
            budget.__enter__()
        run.build()
        run()
        run.build()
        calls.clear()
        sys.setprofile(hook)
        run()
        sys.setprofile(None)
        if budget is not None:
            budget.__exit__(None, None, None)
        total = sum(calls.values()) - calls["chains.<locals>.make.<locals>.run"]
        print(f"{kind:12}{total / n:10.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kinds", nargs="*", default=KINDS, help=f"default: {' '.join(KINDS)}")
    p.add_argument(
        "--chain", type=whole_number(1), default=2000, help="ops per chain (default 2000)"
    )
    p.add_argument("--calls", action="store_true", help="count Python calls per op instead")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    for kind in args.kinds:
        op, _, mode = kind.partition("-")
        if op not in OPS or mode not in ("nog", "g", "fwdbw", "bw", "budget"):
            p.error(f"unknown kind {kind!r}: OP-MODE, OP one of {' '.join(OPS)}")
    if args.inside:
        measure(args.chain, args.kinds)
        return
    if args.calls:
        count_calls(args.chain, args.kinds)
        return
    if shutil.which("valgrind") is None:
        sys.exit("op_instructions: valgrind is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "cg.out"
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--vgdb=no",  # no gdb pipes, which an interrupted run leaves in /tmp
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
        for op in OPS:
            if f"{op}-fwdbw" in counts and f"{op}-g" in counts:
                node = counts[f"{op}-fwdbw"] - counts[f"{op}-g"]
                print(f"{op + ' fwdbw - g':16}{node:10,.0f}  (backward per node, with the freeing)")


if __name__ == "__main__":
    main()
