"""``python -m minidtr``: the same as the ``minidtr`` command."""

import sys

try:
    from .cli import main

    status = main()
except KeyboardInterrupt:  # Ctrl-C before the command took charge of it (while importing)
    print("minidtr: interrupted", file=sys.stderr)
    status = 130
sys.exit(status)
