"""python -m tasks.simcse: the command in this package's __init__.py."""

if not __package__:  # run as a file (python tasks/simcse/__main__.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.simcse from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import sys

from ..core.errors import run_cli
from . import main

sys.exit(run_cli(main))
