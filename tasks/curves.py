"""python -m tasks.curves FILE|RUN_DIR: draw a run's curves file (tasks/core/curves.py) as a PNG."""

if not __package__:  # run as a file (python tasks/curves.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.curves from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import sys

from .core.curves import main
from .core.errors import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(main))
