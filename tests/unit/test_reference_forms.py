"""The reference's job fields (``timeoutMinutes``, ``autoDisableSettings``) folded into Rota's
by the job bodies, on create and on a partial change."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from pydantic import ValidationError

from rota.api.schemas.jobs import BulkCreate, JobCreate, JobPatch, _job_attributes, item_spec
from rota.core.jobspec import JobSpec

CRON = {"jobType": "t", "cronExpression": "@daily"}


def test_timeout_minutes_is_timeout_seconds() -> None:
    spec = JobCreate.model_validate(CRON | {"timeoutMinutes": 2.5}).to_spec()
    assert spec.timeout_seconds == 150
    assert JobPatch.model_validate({"timeoutMinutes": None}).changes() == {"timeout_seconds": None}
    assert JobPatch.model_validate({}).changes() == {}


def test_auto_disable_settings_are_the_auto_disable_fields() -> None:
    every = {
        "enabled": True,
        "threshold": 10,
        "failureWindowMinutes": 30,
        "autoReEnableCooldownMinutes": 5,
    }
    changes = JobPatch.model_validate({"autoDisableSettings": every}).changes()
    assert changes == {
        "auto_disable_threshold": 10,
        "auto_disable_window_seconds": 1800,
        "auto_disable_cooldown_seconds": 300,
    }
    off = JobPatch.model_validate({"autoDisableSettings": {"enabled": False, "threshold": 10}})
    assert off.changes() == {"auto_disable_threshold": 0}  # disabled: never, whatever the count
    on = JobPatch.model_validate({"autoDisableSettings": {"enabled": True}})
    assert on.changes() == {}  # the job's threshold (or the server's) stays


@pytest.mark.parametrize(
    "body",
    [
        {"timeoutMinutes": 1, "timeoutSeconds": 30},
        {"autoDisableSettings": {"threshold": 3}, "autoDisableThreshold": 4},
        {"autoDisableSettings": {"enabled": False}, "autoDisableThreshold": 4},
    ],
)
def test_a_setting_given_both_ways_must_agree(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="given twice"):
        JobPatch.model_validate(body)
    agreeing = {"timeoutMinutes": 1, "timeoutSeconds": 60, "autoDisableThreshold": 3}
    agreeing |= {"autoDisableSettings": {"threshold": 3}}
    assert JobPatch.model_validate(agreeing).changes() == {
        "timeout_seconds": 60,
        "auto_disable_threshold": 3,
    }


@pytest.mark.parametrize(
    "body",
    [
        {"timeoutMinutes": 0},
        {"timeoutMinutes": 10**9},
        {"autoDisableSettings": {"threshold": 0}},
        {"autoDisableSettings": {"enabled": True, "colour": "red"}},
    ],
)
def test_out_of_range_or_unknown_reference_fields_are_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        JobCreate.model_validate(CRON | body)


FULL = {
    "jobType": "t",
    "displayName": "d",
    "description": "x",
    "tags": ["a", "b"],
    "workerId": "w",
    "jobData": '{"n": [1, {"k": null}]}',
    "every": "1h30m",
    "timeZone": "Europe/Berlin",
    "startAt": "2031-01-01T00:00:00Z",
    "endAt": "2031-02-01T00:00:00+01:00",
    "isActive": False,
    "priority": 4,
    "concurrentExecutionPolicy": 3,
    "misfirePolicy": "catch_up",
    "timeoutMinutes": 2,
    "maxRetries": 3,
    "retryDelaySeconds": 1.5,
    "autoDisableSettings": {"threshold": 4, "failureWindowMinutes": 1},
    "autoDisableCooldownSeconds": 9,
    "zombiePolicy": "fail",
    "zombieThresholdSeconds": 30,
    "maxRuns": 7,
    "jitterSeconds": 2,
    "misfireWindowSeconds": 5,
}


@pytest.mark.parametrize("body", [CRON, {"jobType": "t", "executeAt": "2031-01-01T00:00Z"}, FULL])
def test_a_new_jobs_spec_holds_every_field_as_the_body_dumps_it(body: dict[str, object]) -> None:
    """The spec is read field by field from the body: the same as from its dump (each field
    by its job attribute name), the reference's forms folded, ``dependsOn`` left out."""
    model = JobCreate.model_validate(body | {"dependsOn": []})
    dumped = _job_attributes(model)
    assert model.to_spec(created_by="me") == JobSpec(**dumped, created_by="me")
    assert dumped["interval_seconds"] == ("1h30m" if body is FULL else None)
    assert dumped["timeout_seconds"] == (120 if body is FULL else None)
    assert dumped["concurrency_policy"] == (3 if body is FULL else 0)


SNAKE = {"job_type": "t", "concurrent_execution_policy": 1, "every": 60, "timeout_minutes": 1}
"""Field names are taken as well as their aliases."""


@pytest.mark.parametrize(
    "body",
    [{"jobType": "t"}, CRON, {"jobType": "t", "executeAt": "2031-01-01T00:00Z"}, FULL, SNAKE],
    ids=["minimal", "cron", "one-time", "full", "snake"],
)
def test_a_bulk_jobs_spec_is_the_single_create_s(body: dict[str, object]) -> None:
    """A bulk create reads its jobs as dicts of the fields sent (faster than models): the
    spec is the same, defaults included, the reference's forms folded."""
    item = BulkCreate.model_validate({"jobs": [body]}).jobs[0]
    expected = JobCreate.model_validate(body).to_spec(created_by="me")
    got = item_spec(item, "me")
    # (tags: the body's list or the spec's empty tuple; the service makes them a tuple)
    assert replace(got, tags=tuple(got.tags)) == replace(expected, tags=tuple(expected.tags))


@pytest.mark.parametrize(
    "body",
    [
        {"timeoutMinutes": 0},
        {"timeoutMinutes": 2, "timeoutSeconds": 60},
        {"autoDisableSettings": {"threshold": 3}, "autoDisableThreshold": 4},
        {"autoDisableSettings": {"enabled": True, "colour": "red"}},
        {"colour": "red"},
        {"displayName": None},
    ],
)
def test_a_bulk_job_is_refused_where_a_single_one_is(body: dict[str, object]) -> None:
    """With the same errors: type, message, and the field after the job's position."""
    with pytest.raises(ValidationError) as single:
        JobCreate.model_validate(CRON | body)
    with pytest.raises(ValidationError) as bulk:
        BulkCreate.model_validate({"jobs": [CRON, CRON | body]})
    expected = [(("jobs", 1, *e["loc"]), e["type"], e["msg"]) for e in single.value.errors()]
    assert [(e["loc"], e["type"], e["msg"]) for e in bulk.value.errors()] == expected


def test_an_idempotent_bulk_repeat_compares_every_job_in_full() -> None:
    """As when the jobs were models: a field sent with its default is the same body."""

    def canonical(*jobs: dict[str, object]) -> bytes:
        return BulkCreate.model_validate({"jobs": list(jobs)}).canonical_json()

    bare = canonical({"jobType": "t"}, CRON)
    assert canonical({"jobType": "t", "priority": 2, "timeZone": "UTC"}, CRON) == bare
    assert canonical({"job_type": "t", "is_active": True}, CRON) == bare
    assert canonical({"jobType": "t", "priority": 3}, CRON) != bare
    assert canonical(CRON, {"jobType": "t"}) != bare  # the jobs' order counts
    shown = json.loads(bare)["jobs"][0]
    assert set(shown) == {f.alias for f in JobCreate.model_fields.values()}


def test_a_bulk_job_is_documented_as_a_single_one() -> None:
    item = BulkCreate.model_json_schema()["$defs"]["JobCreateItem"]
    single = JobCreate.model_json_schema()
    assert item["properties"] == single["properties"]  # types, limits, defaults, texts
    keys = ("required", "additionalProperties", "description")
    assert [item.get(k) for k in keys] == [single.get(k) for k in keys]


def test_what_the_bulk_item_copies_of_the_single_body_is_all_it_has() -> None:
    """The bulk item is generated from JobCreate's fields' types, limits, aliases and
    descriptions: a validator or a field setting added to JobCreate would not reach it."""
    decorators = JobCreate.__pydantic_decorators__
    assert list(decorators.model_validators) == ["_fold_reference_forms"]
    assert not decorators.field_validators
    assert not decorators.validators
    for name, info in JobCreate.model_fields.items():
        assert info.validation_alias in (None, info.alias), name
        others = (info.examples, info.deprecated, info.discriminator, info.json_schema_extra)
        assert others == (None, None, None, None), name
        assert info.validate_default in (None, False), name
