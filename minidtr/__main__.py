"""``python -m minidtr``: the same as the ``minidtr`` command."""

import sys

from .cli import main

sys.exit(main())
