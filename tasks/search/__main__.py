"""python -m tasks.search: the command in this package's __init__.py."""

import sys

from ..core.errors import run_cli
from . import main

sys.exit(run_cli(main))
