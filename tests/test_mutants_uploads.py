"""Finding a leaderboard upload's files (assignments/uploads.py), pinned where mutation testing found it loose: the
depth limit at its edge in folders and zips, two copies at one depth, hidden folders, what counts as a zip, the size
cap, loose files beside a zip, long listings, and the messages (tests/MUTATION.md:
`python tests/mutation.py assignments/uploads.py`)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from assignments.boards import MULTITASK
from assignments.uploads import MAX_BYTES, MAX_DEPTH, Upload, UploadError, find_upload

FILES = MULTITASK.files                              # the six {sst,para,sts}-{dev,test}-output.csv
SST = "sst-test-output.csv"


def _put(folder: Path, rel: str, text: str = "id\tPredicted_Sentiment\n") -> Path:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _zip(path: Path, members: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name in members:
            z.writestr(name, "id\tx\n")
    return path


def _find(submission: Path, tmp_path: Path) -> Upload:
    return find_upload(submission, tmp_path / "work", MULTITASK)


def test_display_replaces_the_longest_local_path_first():
    upload = Upload(shown={Path("/w/a"): "first.csv", Path("/w/ab"): "second.csv"})
    assert upload.display("/w/ab:2: bad; /w/a:3: bad") == "second.csv:2: bad; first.csv:3: bad"


def test_files_exactly_max_depth_folders_down_are_read_and_one_more_is_named(tmp_path):
    assert MAX_DEPTH == 3
    up = tmp_path / "up"
    _put(up, f"a/b/c/{SST}")
    assert _find(up, tmp_path).shown[up / "a/b/c" / SST] == f"a/b/c/{SST}"
    (up / "a/b/c" / SST).unlink()
    _put(up, f"a/b/c/d/{SST}")
    _put(up, "a/b/c/d/para-test-output.csv")
    with pytest.raises(UploadError, match=rf"^the upload: found {SST} at a/b/c/d/ \(and 1 more there\), "
                                          r"more than 3 folders down, where the leaderboard does not look; zip the d/ "
                                          r"folder itself, or the files$"):
        _find(up, tmp_path)
    _put(up, "sts-test-output.csv")                                # a shallow file: the deep ones become a note
    upload = _find(up, tmp_path)
    assert list(upload.files) == ["sts-test-output.csv"]
    assert upload.notes == [(f"the upload: found {SST} at a/b/c/d/ (and 1 more there), more than 3 "
                            "folders down, where the leaderboard does not look; zip the d/ folder itself, or the files")]
    (up / "a/b/c/d/para-test-output.csv").unlink()
    assert _find(up, tmp_path).notes[0].startswith(f"the upload: found {SST} at a/b/c/d/, more than 3")   # one: no "more"


def test_in_a_zip_the_same_depth_limit_and_note(tmp_path):
    read = _find(_zip(tmp_path / "up.zip", [f"a/b/c/{SST}", f"a/b/c/d/{FILES[0]}", "a/b/c/d/x.csv"]), tmp_path)
    assert read.shown == {tmp_path / "work" / "zip0" / SST: f"up.zip:a/b/c/{SST}"}
    assert read.notes == [(f"up.zip: found {FILES[0]} at a/b/c/d/, more than 3 folders down, where the leaderboard "
                          "does not look; zip the d/ folder itself, or the files")]       # x.csv is no prediction file
    deep = next(n for n in FILES if n != SST)
    read = _find(_zip(tmp_path / "up2.zip", [f"a/b/c/{SST}", f"a/b/c/d/{deep}"]), tmp_path)
    assert read.notes == [(f"up2.zip: found {deep} at a/b/c/d/, more than 3 folders down, where the leaderboard does not "
                          "look; zip the d/ folder itself, or the files")]


def test_two_copies_at_one_depth_are_refused_naming_both(tmp_path):
    up = tmp_path / "up"
    _put(up, f"a/{SST}")
    _put(up, f"b/{SST}")
    _put(up, f"c/d/{SST}")                                         # deeper: not a rival
    with pytest.raises(UploadError, match=rf"^{SST} is in the upload twice at the same depth \(\./a/{SST}, "
                                          rf"\./b/{SST}\); upload one copy$"):
        _find(up, tmp_path)
    with pytest.raises(UploadError, match=rf"^{SST} is in two.zip twice at the same depth \(x/{SST}, y/{SST}\); zip "
                                          r"one copy$"):
        _find(_zip(tmp_path / "two.zip", [f"x/{SST}", f"y/{SST}", f"z/w/{SST}"]), tmp_path)


def test_a_hidden_folders_files_are_not_read(tmp_path):
    up = tmp_path / "up"
    _put(up, f".hidden/{SST}")
    with pytest.raises(UploadError, match=rf"^no prediction file in the upload \(it holds: \.hidden/{SST}\); upload "):
        _find(up, tmp_path)


def test_what_counts_as_a_zip(tmp_path):
    """Named .zip in any case, or a zip under any name: read as a zip (a damaged one gets the zip reader's words)."""
    broken = tmp_path / "broken.ZIP"
    broken.write_bytes(b"not a zip at all")
    with pytest.raises(UploadError, match=r"^broken.ZIP: not a readable zip file \("):
        _find(broken, tmp_path)
    assert list(_find(_zip(tmp_path / "preds.dat", [SST]), tmp_path).files) == [SST]
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(UploadError, match=r"^notes.txt: neither a folder nor a zip file; upload "):
        _find(other, tmp_path)
    with pytest.raises(UploadError, match=rf"^{tmp_path / 'none'}: no such file or folder$"):
        _find(tmp_path / "none", tmp_path)


def test_the_size_cap_is_the_files_total_with_its_figure(tmp_path):
    assert MAX_BYTES == 16 * 2**20
    up = tmp_path / "up"
    _put(up, SST, "x" * (MAX_BYTES - 10))
    _put(up, "para-test-output.csv", "y" * 10)
    assert len(_find(up, tmp_path).files) == 2                     # exactly the cap: read
    _put(up, "para-test-output.csv", "y" * (2**20 + 10))
    with pytest.raises(UploadError, match=r"^the prediction files hold 17.0 MiB in all, more than 16 MiB \(the cap on "
                                          r"an upload's prediction files\); the six files of the course hold less than "
                                          r"1 MiB$"):
        _find(up, tmp_path)


def test_a_zip_beside_the_whole_set_of_loose_files_is_no_error(tmp_path):
    up = tmp_path / "up"
    for name in FILES:
        _put(up, name)
    _zip(up / "old.zip", [SST])
    _zip(up / "new.zip", [SST])
    assert sorted(_find(up, tmp_path).files) == sorted(FILES)
    (up / FILES[0]).unlink()
    with pytest.raises(UploadError, match=r"^new.zip, old.zip not read, because loose prediction files lie beside it \("
                                          + ", ".join(sorted(FILES[1:])) + r"\); upload the zip alone, or the six "
                                          r"files alone$"):
        _find(up, tmp_path)


def test_a_long_listing_shows_ten_names_and_counts_the_rest(tmp_path):
    up = tmp_path / "up"
    for k in range(12):
        _put(up, f"f{k:02d}.txt")
    listed = ", ".join(f"f{k:02d}.txt" for k in range(10))
    with pytest.raises(UploadError, match=rf"^no prediction file in the upload \(it holds: {listed}, \.\.\. \(2 more\)\)"):
        _find(up, tmp_path)
    (up / "f11.txt").unlink()
    (up / "f10.txt").unlink()
    with pytest.raises(UploadError, match=rf"\(it holds: {listed}\); upload "):       # ten: all shown, no "more"
        _find(up, tmp_path)
    (tmp_path / "bare").mkdir()
    with pytest.raises(UploadError, match=r"^no prediction file in the upload \(it holds: nothing\); upload "):
        _find(tmp_path / "bare", tmp_path)
    two = tmp_path / "two"
    two.mkdir()
    _zip(two / "a.zip", [SST])
    _zip(two / "b.zip", [SST])
    with pytest.raises(UploadError, match=r"^the upload holds several zip files \(a.zip, b.zip\) and no prediction "
                                          r"file; upload one$"):
        _find(two, tmp_path)
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("readme.txt", "")
    with pytest.raises(UploadError, match=r"^empty.zip holds no prediction file \(it holds: readme.txt\); upload "):
        _find(empty, tmp_path)
