"""Time and memory of the ``minidtr`` command on crafted files: the figures of
docs/cli.md's "Limits on what a file may hold".

Writes into a temporary folder (or ``--keep DIR``) gzip bombs of ``--gib`` GiB (default
10) made of concatenated gzip members, so they take seconds to write: zero bytes (one
endless line), one valid trace line repeated, and blank lines; and an event log of one
line of ``--line-mb`` MB (default 1,000). Runs ``minidtr sim info`` on each bomb
(the valid-line one twice: with the defaults, then without the ratio limit) and
``minidtr explain --html`` on the long line, each in its own process, and prints the
file's size, the wall time, the peak resident memory (``wait4``'s ``ru_maxrss``), the
exit status and the command's one line of error.

Run: ``python benchmarks/untrusted_files.py [--gib 10] [--line-mb 1000] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)

from minidtr.cli_args import output_folder, whole_number

TRACE_LINE = b'{"INSTRUCTION": "ANNOTATE", "ANNOTATION": "BACKWARD"}\n'
TRACE_HEAD = (
    b'{"INSTRUCTION": "CONSTANT", "NAME": "c"}\n'
    b'{"INSTRUCTION": "MEMORY", "NAME": "c", "MEMORY": "8"}\n'
)


def member_bomb(path: str, block: bytes, gib: int, head: bytes = b"") -> None:
    """``gib`` GiB of ``block`` repeated, as one gzip member written again and again."""
    block = block * (2**20 // len(block))
    member = gzip.compress(block, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        if head:
            f.write(gzip.compress(head, mtime=0))
        for _ in range(gib * 2**30 // len(block)):
            f.write(member)


def one_line_log(path: str, mb: int) -> None:
    with open(path, "wb") as f:
        f.write(b'{"event": "alloc", "op": "')
        chunk = b"x" * 10**6
        for _ in range(mb):
            f.write(chunk)
        f.write(b'"}\n')


def measure(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, str]:
    """(seconds, peak resident MB, exit status, last line of stderr) of one command."""
    started = time.perf_counter()
    child = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
    )
    err = child.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    lines = err.strip().splitlines()
    return seconds, usage.ru_maxrss / 1024, child.returncode, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=whole_number(1), default=10, help="GiB each bomb expands to")
    parser.add_argument(
        "--line-mb", type=whole_number(1), default=1000, help="MB of the one-line log"
    )
    parser.add_argument(
        "--keep", metavar="DIR", type=output_folder, help="write the files here and keep them"
    )
    args = parser.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        run(args, args.keep)
    else:  # removed however the run ends (Ctrl-C included): the files are large
        with tempfile.TemporaryDirectory(prefix="minidtr-crafted-") as folder:
            run(args, folder)


def run(args: argparse.Namespace, folder: str) -> None:
    files = {
        "zeros.log.gz": lambda p: member_bomb(p, b"\0", args.gib),
        "lines.log.gz": lambda p: member_bomb(p, TRACE_LINE, args.gib, TRACE_HEAD),
        "blank.log.gz": lambda p: member_bomb(p, b"\n", args.gib),
        "oneline.jsonl": lambda p: one_line_log(p, args.line_mb),
    }
    for name, make in files.items():
        if not os.path.exists(os.path.join(folder, name)):
            make(os.path.join(folder, name))
    minidtr = [sys.executable, "-m", "minidtr"]
    runs = [
        ("zeros.log.gz", [*minidtr, "sim", "info"], None),
        ("lines.log.gz", [*minidtr, "sim", "info"], None),
        ("lines.log.gz", [*minidtr, "sim", "info"], {"MINIDTR_MAX_GZIP_RATIO": "inf"}),
        ("blank.log.gz", [*minidtr, "sim", "info"], None),
        ("oneline.jsonl", [*minidtr, "explain"], None),
    ]
    base = measure([sys.executable, "-c", "import minidtr"])
    print(f"python with minidtr imported: {base[1]:.0f} MB resident")
    for name, command, env in runs:
        path = os.path.join(folder, name)
        extra = ["--html", os.path.join(folder, "page.html")] if "explain" in command else []
        seconds, peak, status, line = measure([*command, path, *extra], env)
        size = os.path.getsize(path) / 2**20
        setting = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        print(f"{name} ({size:,.1f} MiB) {setting}".rstrip())
        print(f"  {seconds:.2f} s, {peak:.0f} MB resident, exit {status}: {line}")


if __name__ == "__main__":
    main()
