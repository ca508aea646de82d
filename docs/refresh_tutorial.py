"""Fill the output blocks of docs/tutorial.md with what docs/tutorial_example.py prints.

    python docs/refresh_tutorial.py

Each ``<!-- output:NAME -->`` ... ``<!-- /output -->`` block is replaced, so the
tutorial always shows the example's real output.
"""

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def sections(text: str) -> dict[str, str]:
    lines = text.rstrip("\n").split("\n")
    explain_at = lines.index("What happened")
    events_at = next(i for i, line in enumerate(lines) if line.startswith("first budget"))
    cascade_at = next(
        i for i, line in enumerate(lines) if i > explain_at and line.startswith("budget ")
    )
    return {
        "unbounded": lines[0],
        "inside": "\n".join(
            line
            for line in lines[1:events_at]
            if line[:2] in ("a:", "b:", "c:") or line.startswith("evicted b")
        ),
        "budget": next(line for line in lines if line.startswith("budget ")),
        "events": "\n".join(line for line in lines[events_at + 1 : explain_at] if line.strip()),
        "explain": "\n".join(lines[explain_at:cascade_at]).rstrip("\n"),
        "cascade": "\n".join(lines[cascade_at:]),
    }


def main() -> None:
    out = subprocess.run(
        [sys.executable, str(HERE / "tutorial_example.py")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    parts = sections(out)
    page = HERE / "tutorial.md"
    text = page.read_text()
    for name, body in parts.items():
        pattern = re.compile(
            rf"(<!-- output:{name} -->\n```\n).*?(\n```\n<!-- /output -->)", re.DOTALL
        )
        text, n = pattern.subn(lambda m, body=body: m.group(1) + body + m.group(2), text)
        if n != 1:
            raise SystemExit(f"tutorial.md has {n} output blocks named {name!r}, expected 1")
    page.write_text(text)
    print(f"refreshed {len(parts)} output blocks in {page}")


if __name__ == "__main__":
    main()
