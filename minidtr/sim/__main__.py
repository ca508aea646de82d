"""``python -m minidtr.sim ...`` is ``minidtr sim ...``."""

import sys

from .cli import main

sys.exit(main())
