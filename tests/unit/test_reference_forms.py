"""The reference's job fields (``timeoutMinutes``, ``autoDisableSettings``) folded into Rota's
by the job bodies, on create and on a partial change."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rota.api.schemas.jobs import JobCreate, JobPatch

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
