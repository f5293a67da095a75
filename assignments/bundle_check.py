"""What a leaderboard bundle records of its salt and gold, and the check that the salt and gold given are those.

A bundle (python -m assignments.bundle leaderboard) holds leaderboard/salt, leaderboard/gold/ and
leaderboard/settings.json, which records the sha256 of the salt and of each gold file. assignments.leaderboard and
assignments.scoreboard both check, with check_bundle, that the salt and gold they are given are the bundle's: another
salt splits the test set otherwise than the leaderboard does.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from .boards import Board
from .standing import GOLD_NAMES, GoldError, gold_path, read_salt

SETTINGS_MEMBER = "leaderboard/settings.json"         # where a leaderboard bundle holds its settings
SALT_MEMBER = "leaderboard/salt"                      # and its salt
FINGERPRINTS = ("salt_sha256", "gold_sha256")         # what settings.json records of the salt and gold it was built with


def gold_member(task: str) -> str:
    """Where a leaderboard bundle holds a task's gold file."""
    return f"leaderboard/gold/{GOLD_NAMES[task][0]}"


def fingerprints(salt: str, gold_dir: str | Path, board: Board) -> dict:
    """What a bundle's settings.json records of its salt and gold: the sha256 of the salt (as read_salt gives it) and
    of each gold file's bytes, by the name the bundle packs it under (settings.json lies beside the salt and gold in
    the bundle: they tell no one more than the bundle does)."""
    gold = {GOLD_NAMES[task][0]: hashlib.sha256(gold_path(gold_dir, task).read_bytes()).hexdigest()
            for task in board.tasks}
    return {"salt_sha256": hashlib.sha256(salt.encode()).hexdigest(), "gold_sha256": gold}


def read_fingerprints(path: str | Path) -> dict | None:
    """The fingerprints a bundle's settings.json (or its zip) records; None when it records none (a bundle built
    before they were recorded)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read(SETTINGS_MEMBER))
    else:
        data = json.loads(Path(path).read_text())
    found = {k: data[k] for k in FINGERPRINTS if k in data}
    if not found:
        return None
    if set(found) != set(FINGERPRINTS) or not isinstance(found["salt_sha256"], str) or \
            not isinstance(found["gold_sha256"], dict):
        raise GoldError(f"{path}: expected salt_sha256 (a text) and gold_sha256 (an object), as the bundle writes them")
    return found


def same_as_bundle(bundle: str, salt_file: str, gold_dir: str, board: Board) -> None:
    """GoldError unless the salt and the gold files are the ones the leaderboard bundle (a zip) holds."""
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        if SALT_MEMBER in names and z.read(SALT_MEMBER).decode().strip() != read_salt(salt_file):
            raise GoldError(f"--salt-file {salt_file} is not the salt of {bundle}: another salt splits the test set "
                            "otherwise than the leaderboard; give the bundle's")
        for task in board.tasks:
            member = gold_member(task)
            if member in names and z.read(member) != gold_path(gold_dir, task).read_bytes():
                raise GoldError(f"{gold_path(gold_dir, task)} is not the gold of {bundle} ({member}); give the "
                                "bundle's gold folder")


def same_fingerprints(settings: str, salt_file: str, gold_dir: str, board: Board) -> str | None:
    """GoldError unless the salt and the gold files have the sha256 that the bundle's settings (its zip or its
    settings.json) record; a note when they record none (a bundle built before they were recorded), else None."""
    recorded = read_fingerprints(settings)
    if recorded is None:
        return (f"{settings} records no fingerprint of the salt or the gold (a bundle built before they were), so the "
                "salt and gold given cannot be checked against the leaderboard's: give the bundle's zip, or rebuild it")
    given = fingerprints(read_salt(salt_file), gold_dir, board)
    if given["salt_sha256"] != recorded["salt_sha256"]:
        raise GoldError(f"--salt-file {salt_file} is not the salt of {settings}: another salt splits the test set "
                        "otherwise than the leaderboard; give the bundle's")
    for task in board.tasks:
        name = GOLD_NAMES[task][0]
        if recorded["gold_sha256"].get(name) not in (None, given["gold_sha256"][name]):
            raise GoldError(f"{gold_path(gold_dir, task)} is not the gold of {settings} (its sha256 is not the one "
                            f"recorded for {name}); give the bundle's gold folder")
    return None


def check_bundle(settings: str, salt_file: str, gold_dir: str, board: Board) -> str | None:
    """GoldError unless the salt and gold are the bundle's (its zip's own files, and the fingerprints its settings
    record); a note when a settings.json records no fingerprint (a zip's own files are checked instead), else None."""
    is_zip = zipfile.is_zipfile(settings)
    if is_zip:
        same_as_bundle(settings, salt_file, gold_dir, board)
    note = same_fingerprints(settings, salt_file, gold_dir, board)
    return None if is_zip else note
