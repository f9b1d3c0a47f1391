"""Secret references in job data (rota.core.secretrefs): found, checked, resolved, masked."""

from __future__ import annotations

import pytest

import rota
from rota.core.errors import ValidationError
from rota.core.secretrefs import (
    Masker,
    MissingSecretError,
    placeholders,
    references,
    resolve,
)

DATA = {
    "url": "https://billing.example/charge",
    "headers": {"Authorization": {"$secret": "BILLING_TOKEN"}, "X-Plain": "1"},
    "list": [{"$secret": "OTHER"}, {"$secret": "BILLING_TOKEN"}],
    "notARef": {"$secret": "X", "more": 1},
}


def test_references_are_found_with_their_fields() -> None:
    assert references(DATA) == [
        ("jobData.headers.Authorization", "BILLING_TOKEN"),
        ("jobData.list[0]", "OTHER"),
        ("jobData.list[1]", "BILLING_TOKEN"),
    ]
    assert references({"a": 1}) == []
    assert references(None) == []


@pytest.mark.parametrize("name", ["", "../etc/passwd", "a/b", ".hidden", "x" * 129, 7])
def test_a_bad_name_is_refused_naming_the_field(name: object) -> None:
    with pytest.raises(ValidationError) as caught:
        references({"headers": {"Authorization": {"$secret": name}}})
    assert caught.value.field == "jobData.headers.Authorization"


def test_resolve_replaces_references_and_leaves_the_data_as_it_was() -> None:
    values = {"BILLING_TOKEN": "sk_live_abc123", "OTHER": "other-value"}
    resolved = resolve(DATA, values.get)
    assert resolved["headers"] == {"Authorization": "sk_live_abc123", "X-Plain": "1"}
    assert resolved["list"] == ["other-value", "sk_live_abc123"]
    assert resolved["notARef"] == {"$secret": "X", "more": 1}
    assert DATA["headers"]["Authorization"] == {"$secret": "BILLING_TOKEN"}  # type: ignore[index]
    plain = {"a": [1, 2]}
    assert resolve(plain, values.get) is plain
    assert resolve({"$secret": "OTHER"}, values.get) == "other-value"


def test_a_missing_secret_names_the_reference_not_a_value() -> None:
    with pytest.raises(MissingSecretError) as caught:
        resolve(DATA, {"BILLING_TOKEN": "sk_live_abc123"}.get)
    text = str(caught.value)
    assert "'OTHER'" in text
    assert "jobData.list[0]" in text
    assert "ROTA_SECRET_OTHER" in text
    assert "sk_live_abc123" not in text


def test_placeholders_are_strings() -> None:
    shown = placeholders(DATA)
    assert shown["headers"]["Authorization"] == "secret:BILLING_TOKEN"
    assert isinstance(shown["list"][0], str)


def test_the_masker_masks_every_known_value_longest_first() -> None:
    masker = Masker()
    assert not masker.active
    assert masker.text("sk_live_abc123") == "sk_live_abc123"
    masker.add({"SHORT": "abc", "TOKEN": "sk_live_abc123", "PREFIX": "sk_live"})
    assert masker.text("Bearer sk_live_abc123; sk_live; abc") == (
        "Bearer [secret TOKEN]; [secret PREFIX]; abc"  # 3 characters: too short to mask
    )
    assert masker.json({"sk_live_abc123": ["x sk_live_abc123", 5, None]}) == {
        "[secret TOKEN]": ["x [secret TOKEN]", 5, None]
    }


def test_rota_secret_builds_a_reference() -> None:
    assert rota.secret("BILLING_TOKEN") == {"$secret": "BILLING_TOKEN"}
    with pytest.raises(ValueError, match="invalid secret name"):
        rota.secret("../x")
