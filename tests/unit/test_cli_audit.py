"""How ``rota audit`` reads its times and words an entry for people (no server: the e2e tests
in tests/e2e/test_cli_admin.py run the command itself)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import typer

from rota.cli.ops.audit import change, parse_time, resource


def entry(**fields: Any) -> dict[str, Any]:
    return {"resourceType": "job", "resourceId": "01a2", "before": None, "after": None} | fields


def test_times_are_iso_or_a_span_back_from_now() -> None:
    assert parse_time("2026-03-29T01:30:00", "--since") == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    zoned = parse_time("2026-03-29T03:30:00+02:00", "--since")
    assert zoned == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    spans = {"90s": timedelta(seconds=90), "2h": timedelta(hours=2), "1w": timedelta(weeks=1)}
    for text, span in spans.items():
        found = parse_time(text, "--since")
        assert found is not None
        assert abs(datetime.now(UTC) - span - found) < timedelta(seconds=5)
    assert parse_time(None, "--since") is None


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "-1d", "99999999999w", "2026-13-01"])
def test_other_times_are_a_usage_error(text: str) -> None:
    with pytest.raises(typer.Exit) as raised:
        parse_time(text, "--until")
    assert raised.value.exit_code == 2


def test_the_resource_is_named_by_the_server_else_by_the_record() -> None:
    assert resource(entry(resourceName="nightly")) == "job nightly"
    assert resource(entry(before={"displayName": "old name"})) == "job old name"
    user = entry(resourceType="user", after={"username": "alice"})
    assert resource(user) == "user alice"
    assert resource(entry()) == "job 01a2"
    assert resource(entry(resourceType="dispatcher", resourceId=None)) == "dispatcher"


def test_a_change_lists_what_differs_and_a_record_its_fields() -> None:
    before = {"id": "1", "role": "Operator", "isActive": True, "updatedAt": "t1", "x": {"a": 1}}
    after = {"id": "1", "role": "Viewer", "isActive": True, "updatedAt": "t2", "x": {"a": 2}}
    assert change(entry(before=before, after=after)) == "role: Operator → Viewer; x.a: 1 → 2"
    same = entry(before={"updatedAt": "t1", "n": 1}, after={"updatedAt": "t2", "n": 1})
    assert change(same) == "-"
    emptied = entry(before={"description": "old"}, after={"description": ""})
    assert change(emptied) == 'description: old → ""'
    made = entry(after={"id": "1", "name": "hook", "tag": None, "events": ["silence.alert"]})
    assert change(made) == 'name=hook, events=["silence.alert"]'
    assert change(entry(after={"client": "127.0.0.1"})) == "client=127.0.0.1"
    assert change(entry()) == "-"
    long = change(entry(after={f"field{i}": "x" * 500 for i in range(9)}))
    assert long.startswith("field0=" + "x" * 30)
    assert len(long) == 120  # one line, each value cut too
