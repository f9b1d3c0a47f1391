"""The cipher of encryption at rest (rota.core.sealing): round trip, wrong key, altered
ciphertext, another row's associated data, key rotation, the setting's errors (never showing a
key), and the worker's side (messages opened, results sealed)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from rota.core.ids import new_id
from rota.core.models import JobMessage, OccurrenceStatus, StatusRecord
from rota.core.sealing import (
    DataSeal,
    KeySettingError,
    SealError,
    envelope_version,
    is_envelope,
    job_data_aad,
    new_key,
    opened_message,
    parse_keys,
    result_aad,
    sealed_message,
    sealed_status,
)

K1, K2 = new_key(), new_key()
_MESSAGES = (
    "empty",
    "no colon",
    "not valid base64",
    "must be 32 bytes",
    "version must be",
    "given twice",
    "not valid JSON",
    "no text",
)
VALUE = {"to": "ann@example.com", "amount": 12.5, "tags": ["a", "b"], "n": None}


def test_round_trip_hides_the_plaintext() -> None:
    seal = DataSeal.from_setting(f"v1:{K1}")
    aad = job_data_aad(new_id())
    sealed = seal.seal(VALUE, aad)
    assert is_envelope(sealed)
    assert envelope_version(sealed) == "v1"
    assert "ann@example.com" not in json.dumps(sealed)
    assert seal.open(sealed, aad) == VALUE
    assert seal.seal(VALUE, aad) != sealed  # a fresh nonce each time
    assert seal.seal(None, aad) is None  # nothing to hide
    assert seal.open("plain", aad) == "plain"  # a value that is no envelope reads as it is


def test_wrong_key_altered_ciphertext_and_moved_value_do_not_open() -> None:
    aad = job_data_aad(new_id())
    sealed = DataSeal.from_setting(f"v1:{K1}").seal(VALUE, aad)
    with pytest.raises(SealError, match="v1"):
        DataSeal.from_setting(f"v1:{K2}").open(sealed, aad)  # same version, another key
    with pytest.raises(SealError, match="unknown key version"):
        DataSeal.from_setting(f"v2:{K1}").open(sealed, aad)
    seal = DataSeal.from_setting(f"v1:{K1}")
    version, body = sealed["$enc"].split(":")
    raw = bytearray(base64.b64decode(body))
    raw[-1] ^= 1
    altered = {"$enc": f"{version}:{base64.b64encode(bytes(raw)).decode()}"}
    with pytest.raises(SealError):
        seal.open(altered, aad)
    with pytest.raises(SealError):  # the envelope copied to another job
        seal.open(sealed, job_data_aad(new_id()))
    with pytest.raises(SealError):  # or used as a result
        seal.open(sealed, result_aad(new_id()))
    with pytest.raises(SealError, match="base64"):
        seal.open({"$enc": "v1:***"}, aad)


def test_rotation_newest_seals_all_open_and_stale_says_what_moves() -> None:
    aad = job_data_aad(new_id())
    old = DataSeal.from_setting(f"v1:{K1}")
    sealed_v1 = old.seal(VALUE, aad)
    rotated = DataSeal.from_setting(f"v2:{K2},v1:{K1}")
    assert rotated.current == "v2"
    assert rotated.open(sealed_v1, aad) == VALUE
    assert envelope_version(rotated.seal(VALUE, aad)) == "v2"
    assert rotated.stale(sealed_v1)
    assert rotated.stale(VALUE)
    assert not rotated.stale(rotated.seal(VALUE, aad))
    assert not rotated.stale(None)
    # step one of a rollout: the new key known, the old one still sealing
    step_one = DataSeal.from_setting(json.dumps({"v2": K2, "v1": K1}), current="v1")
    assert envelope_version(step_one.seal(VALUE, aad)) == "v1"
    decrypt_only = DataSeal.from_setting(f"v1:{K1}", current="none")
    assert decrypt_only.seal(VALUE, aad) == VALUE
    assert decrypt_only.open(sealed_v1, aad) == VALUE
    assert decrypt_only.stale(sealed_v1)
    assert not decrypt_only.stale(VALUE)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("v1", "no colon"),
        ("v1:not base64!", "not valid base64"),
        (f"v1:{base64.b64encode(b'short').decode()}", "must be 32 bytes"),
        ("bad version:" + K1, "version must be"),
        (f"v1:{K1},v1:{K2}", "given twice"),
        ("{not json", "not valid JSON"),
        ("[1]", "no colon"),
        (json.dumps({"v1": 5}), "no text"),
    ],
    ids=lambda value: value if value in _MESSAGES else "",  # no random key in a test's id
)
def test_a_malformed_setting_names_it_and_shows_no_key(text: str, message: str) -> None:
    with pytest.raises(KeySettingError, match=message) as caught:
        parse_keys(text)
    assert "ROTA_ENCRYPTION__KEYS" in str(caught.value)
    assert K1 not in str(caught.value)
    assert K2 not in str(caught.value)


def test_current_must_be_a_known_version() -> None:
    with pytest.raises(KeySettingError, match="ROTA_ENCRYPTION__CURRENT"):
        DataSeal.from_setting(f"v1:{K1}", current="v9")


def test_the_wire_message_and_the_status_record() -> None:
    seal = DataSeal.from_setting(f"v1:{K1}")
    now = datetime(2030, 1, 1, tzinfo=UTC)
    message = JobMessage(
        occurrence_id=new_id(),
        job_id=new_id(),
        job_type="t",
        job_data=VALUE,
        scheduled_for=now,
        timestamp=now,
    )
    sent = sealed_message(seal, message)
    assert is_envelope(sent.job_data)
    assert sealed_message(None, message) is message
    assert opened_message(seal, sent) == message
    record = StatusRecord(
        occurrence_id=message.occurrence_id,
        status=OccurrenceStatus.COMPLETED,
        timestamp=now,
        result={"secret": 1},
    )
    reported = sealed_status(seal, record)
    assert is_envelope(reported.result)
    assert seal.open(reported.result, result_aad(record.occurrence_id)) == {"secret": 1}
