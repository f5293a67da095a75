"""Which tree this is: the reference, or a student tree written by python -m assignments.make --profile NAME."""
from pathlib import Path

PROFILE = "reference"
STUDENT = PROFILE != "reference"
TASKS_DIR = Path(__file__).resolve().parents[1]


def holds(command: str) -> bool:
    """Whether this tree has python -m tasks.COMMAND (a profile may leave a command out: assignments/profiles.py)."""
    return (TASKS_DIR / command).is_dir() or (TASKS_DIR / f"{command}.py").is_file()


def command(name: str) -> str:
    """'python -m tasks.NAME' where this tree has it; else named as the reference repository's."""
    return f"python -m tasks.{name}" if holds(name) else f"the reference repository's python -m tasks.{name}"
