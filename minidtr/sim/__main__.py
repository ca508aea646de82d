"""``python -m minidtr.sim ...`` is ``minidtr sim ...``."""

import sys

from .._startup import release_import_guard
from .cli import main

release_import_guard()  # the imports are done: interrupts are main's now
sys.exit(main())
