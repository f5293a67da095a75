"""The SimCSE stage's Quora pairs: the seeded split of the labelled Quora training pairs between the
contrastive stage and the multitask stage after it, the two shares written back in the format of the source
file (tasks.multitask --after-simcse reads the rest), and the hard negatives mined for the supervised objective
from the stage's non-duplicate pairs (the sentence with the largest word overlap with each anchor).
"""

from __future__ import annotations

import csv
import random
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..core.data import SIMCSE_QUORA_REST, file_rows  # noqa: F401 - tasks.simcse imports it from here
from ..core.errors import ConfigurationError

QUORA_STAGE = "quora-train-stage.csv"       # the Quora training pairs the stage used


def split_quora(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded split of n pairs: round(fraction n) indices for this stage, the rest for the next; each sorted."""
    order = list(range(n))
    random.Random(f"{seed}-quora-split").shuffle(order)
    k = round(fraction * n)
    return sorted(order[:k]), sorted(order[k:])


def write_rows(source: str | Path, lines: set[int], path: Path) -> None:
    """The header and the rows of `source` starting on the given lines, cells as read (tasks.core.data reads them back)."""
    rows = file_rows(Path(source))
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, delimiter="\t", lineterminator="\n")
        out.writerow(next(rows)[1])
        out.writerows(cells for line, cells in rows if line in lines)


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def mine_hard_negatives(anchors: Sequence[str], positives: Sequence[str], candidates: Sequence[str]) -> list[int]:
    """For each anchor, the candidate with the highest word overlap (Jaccard of lowercase word sets; ties: the
    earliest), never the anchor or its positive itself; the candidates are the non-duplicate pairs' sentences."""
    cand_words = [_words(c) for c in candidates]
    index: dict[str, list[int]] = {}
    for j, ws in enumerate(cand_words):
        for w in ws:
            index.setdefault(w, []).append(j)
    picks = []
    for anchor, positive in zip(anchors, positives):
        a = _words(anchor)
        shared = Counter(j for w in a for j in index.get(w, ()))
        best = next((j for j, c in enumerate(candidates) if c not in (anchor, positive)), None)
        best_score = 0.0
        for j, k in sorted(shared.items()):
            score = k / (len(a) + len(cand_words[j]) - k)
            if score > best_score and candidates[j] not in (anchor, positive):
                best, best_score = j, score
        if best is None:
            raise ConfigurationError(f"--hard-negatives: no candidate sentence differs from the pair {anchor!r} / "
                                     f"{positive!r}")
        picks.append(best)
    return picks
