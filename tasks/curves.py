"""python -m tasks.curves FILE|RUN_DIR: draw a run's curves file (tasks/core/curves.py) as a PNG."""

import sys

from .core.curves import main
from .core.errors import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(main))
