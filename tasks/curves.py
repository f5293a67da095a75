"""python -m tasks.curves FILE: draw a run's curves file (tasks/core/curves.py) as a PNG."""

import sys

from .core.curves import main

if __name__ == "__main__":
    sys.exit(main())
