"""The ApiKeyStore contract, on SQLite and PostgreSQL: a key created, read by id, listed
newest first; a live name unique (a revoked key frees it); revocation kept with who and when;
the last use written only when older than asked, once among racing writers."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from rota.core.apikeys import ApiKey, KeyScope, hash_secret
from rota.core.errors import ConflictError, NotFoundError
from rota.core.ids import new_id
from rota.core.security import Role
from rota.stores.sql import SqlStore
from tests.contract.test_store import NOW

MINUTE = timedelta(minutes=1)


def make_key(name: str = "billing", **fields: object) -> ApiKey:
    values: dict[str, object] = {
        "id": new_id(),
        "name": name,
        "role": Role.OPERATOR,
        "secret_hash": hash_secret("s3cret"),
        "created_at": NOW,
        "created_by": "admin",
    }
    values.update(fields)
    return ApiKey(**values)  # type: ignore[arg-type]


async def test_create_read_list_and_revoke_a_key(store: SqlStore) -> None:
    scope = KeyScope(job_types=("billing.sync", "billing.send"), tags=("billing",))
    first = make_key("first", scope=scope, expires_at=NOW + MINUTE)
    second = make_key("second", role=Role.VIEWER)
    await store.create_api_key(first)
    await store.create_api_key(second)

    assert await store.get_api_key(first.id) == first
    assert await store.get_api_key(second.id) == second
    assert await store.get_api_key(new_id()) is None
    assert [k.id for k in await store.list_api_keys()] == [second.id, first.id]

    revoked = await store.revoke_api_key(first.id, NOW + MINUTE, "admin")
    assert (revoked.revoked_at, revoked.revoked_by) == (NOW + MINUTE, "admin")
    assert revoked.scope == scope
    again = await store.revoke_api_key(first.id, NOW + 2 * MINUTE, "other")
    assert (again.revoked_at, again.revoked_by) == (NOW + MINUTE, "admin")
    with pytest.raises(NotFoundError):
        await store.revoke_api_key(new_id(), NOW, "admin")


async def test_a_live_name_is_unique_and_a_revoked_key_frees_it(store: SqlStore) -> None:
    old = make_key("deploy")
    await store.create_api_key(old)
    with pytest.raises(ConflictError):
        await store.create_api_key(make_key("deploy"))
    await store.revoke_api_key(old.id, NOW, "admin")
    new = make_key("deploy")
    await store.create_api_key(new)
    assert {k.id for k in await store.list_api_keys()} == {old.id, new.id}


async def test_the_last_use_is_written_only_when_older(store: SqlStore) -> None:
    key = make_key()
    await store.create_api_key(key)
    assert await store.touch_api_key(key.id, NOW, NOW - MINUTE)
    # within the minute: not written again
    assert not await store.touch_api_key(key.id, NOW + MINUTE / 2, NOW - MINUTE / 2)
    stored = await store.get_api_key(key.id)
    assert stored is not None
    assert stored.last_used_at == NOW
    later = NOW + 2 * MINUTE
    racing = await asyncio.gather(
        *(store.touch_api_key(key.id, later, later - MINUTE) for _ in range(5))
    )
    assert sum(racing) == 1
    stored = await store.get_api_key(key.id)
    assert stored is not None
    assert stored.last_used_at == later
