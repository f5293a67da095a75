"""The due date and the final standing: the private part only for an on-time upload graded after the deadline; an
upload made after it (an extension) graded as before it; a daily-limited upload keeps the latest previous result."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from conftest import DATA
from leaderboard_fixtures import SALT, assert_results_format, dev_labels, metadata, partial, write_gold, write_upload

from assignments.leaderboard import Settings, grade
from assignments.standing import load_dev, load_gold, split_gold

NOW = datetime(2030, 5, 1, 12, 0, tzinfo=UTC)
DUE = "2030-04-01T23:00:00-07:00"
PRIVATE = "Test set, private part (the final standing)"


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("due")
    labels = write_gold(base / "gold")
    return {"tests": split_gold(load_gold(base / "gold", DATA), SALT, 0.5), "dev": load_dev(DATA),
            "upload": write_upload(base / "up", partial(labels), dev_labels())}


def _grade(lb: dict, meta: dict, settings: Settings | None = None) -> dict:
    results = grade(lb["upload"], lb["tests"], settings or Settings(), lb["dev"], meta, now=NOW)
    assert_results_format(results)
    return results


def _previous(created: datetime, hours: float, results: dict | None = None) -> dict:
    entry = {"submission_time": (created - timedelta(hours=hours)).isoformat(), "score": 1.0}
    return entry | ({"results": results} if results is not None else {})


def test_an_upload_made_after_the_due_date_sees_the_public_part_within_the_daily_limit(lb):
    on_time = _grade(lb, metadata("2030-03-30T10:00:00-07:00", DUE))             # regraded after the deadline
    assert on_time["extra_data"]["phase"] == "final" and PRIVATE in on_time["output"]
    created = datetime(2030, 4, 3, 12, 0, tzinfo=UTC)                            # an extension's upload
    extension = _grade(lb, metadata(created.isoformat(), DUE))
    assert extension["extra_data"]["phase"] == "public" and "private part" not in extension["output"]
    assert PRIVATE not in [t["name"] for t in extension["tests"]]
    assert extension["leaderboard"] != on_time["leaderboard"]
    assert "made after the due date" in extension["output"] and "the staff's" in extension["output"]
    previous = [_previous(created, h, extension) for h in range(11, 0, -1)]
    limited = _grade(lb, metadata(created.isoformat(), DUE, previous), Settings(daily_limit=3))
    assert "Daily limit reached" in limited["output"] and limited["extra_data"]["rate_limited"] is True
    no_created = {k: v for k, v in metadata("x", DUE).items() if k != "created_at"}
    assert _grade(lb, no_created)["extra_data"]["phase"] == "public"             # the grading time: after it
    no_created["previous_submissions"] = [_previous(NOW, h, extension) for h in (3, 2, 1)]
    assert "Daily limit reached" in _grade(lb, no_created, Settings(daily_limit=3))["output"]      # counted from now


def test_a_limited_upload_keeps_the_latest_previous_result_by_time_not_by_position(lb):
    created = datetime(2030, 4, 20, 10, 0, tzinfo=UTC)
    older = {"score": 0.5, "output": "the older result", "tests": []}
    newer = {"score": 1.0, "output": "the newer result", "tests": []}
    previous = [_previous(created, 1, newer), _previous(created, 5, older)]       # the list out of time order
    limited = _grade(lb, metadata(created.isoformat(), "2030-06-01T00:00:00Z", previous), Settings(daily_limit=2))
    assert "the newer result" in limited["output"] and "the older result" not in limited["output"]
    assert limited["score"] == 1.0
