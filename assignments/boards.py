"""The leaderboards, as data: which tasks a profile's tree predicts (what its python -m tasks.submit zips) and ranks.

A part1 tree ships SST's and CFIMDB's data alone, and its tasks.submit zips one file per leaderboard task and split
whose data the tree holds: sst-{dev,test}-output.csv (CFIMDB is no leaderboard task: it is neither zipped nor
ranked). The default-project and full trees ship the three tasks' data: the six files
{sst,para,sts}-{dev,test}-output.csv. The upload finder, the checks, the figures, the leaderboard's columns and every
message read the board.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.core.evaluation import LEADERBOARD

SPLITS = ("dev", "test")
NAMES = {"sst": "SST", "para": "Quora", "sts": "STS"}                              # the scoreboard's columns
COLUMNS = {"sst": "SST accuracy", "para": "Quora accuracy", "sts": "STS r"}       # the Gradescope leaderboard's
FIGURES = {"sst": "SST accuracy", "para": "Quora accuracy", "sts": "STS Pearson r"}   # the messages' words
COUNTS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


@dataclass(frozen=True)
class Board:
    """One leaderboard: the tasks it ranks (each with a dev and a test file) and the commands that make the files."""

    name: str
    tasks: tuple[str, ...]
    made_by: str                   # how a student of the board's profiles makes the files, said in every message

    @property
    def files(self) -> tuple[str, ...]:
        """The prediction files an upload holds: {task}-{split}-output.csv for every task and split."""
        return tuple(f"{t}-{s}-output.csv" for t in self.tasks for s in SPLITS)

    @property
    def wanted(self) -> str:
        """The files in words: 'the six files {sst,para,sts}-{dev,test}-output.csv'."""
        tasks = self.tasks[0] if len(self.tasks) == 1 else "{" + ",".join(self.tasks) + "}"
        return f"the {self.count} files {tasks}-{{{','.join(SPLITS)}}}-output.csv"

    @property
    def count(self) -> str:
        return COUNTS.get(len(self.files), str(len(self.files)))

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """The Gradescope leaderboard's (column, key) pairs: Overall first, then each task's figure."""
        return (("Overall", "overall"), *((COLUMNS[t], t) for t in self.tasks))

    def overall(self, scores: dict[str, float]) -> float:
        """The mean of the tasks' figures, r as (r + 1) / 2: overall_score's for the three, SST accuracy for SST alone."""
        parts = [(scores[t] + 1) / 2 if LEADERBOARD[t].metric == "pearson" else scores[t] for t in self.tasks]
        return sum(parts) / len(parts)


MULTITASK = Board("multitask", ("sst", "para", "sts"), "python -m tasks.submit zips them")
SST = Board("sst", ("sst",), "python -m tasks.classifier --task sst --predictions-dir predictions writes them, "
                             "python -m tasks.submit zips them")
BOARDS = {"part1": SST, "default-project": MULTITASK, "full": MULTITASK}      # profile -> its leaderboard
