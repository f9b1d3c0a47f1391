"""The store's SessionStore slice (a user changed and its sessions ended in one transaction),
on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from rota.core.errors import ConflictError, NotFoundError
from rota.core.ids import new_id
from rota.core.ports import DependencyAwareStore
from rota.core.security import RefreshStatus, Role
from tests.contract.test_store_security import T0, make_token, make_user, successor

MICRO = timedelta(microseconds=1)


async def test_ending_sessions_sets_the_instant_and_revokes_the_refresh_tokens(
    store: DependencyAwareStore,
) -> None:
    user, other = make_user(role=Role.VIEWER), make_user("bob", Role.VIEWER)
    await store.create_user(user)
    await store.create_user(other)
    assert (await store.get_user(user.id)).tokens_valid_after is None
    await store.add_refresh_token(make_token(user, new_id(), "a1"))
    await store.add_refresh_token(make_token(other, new_id(), "b1"))
    at = T0 + timedelta(seconds=5, microseconds=123456)
    stored = await store.update_user_ending_sessions(replace(user, role=Role.OPERATOR), at)
    assert stored.role is Role.OPERATOR
    assert stored.tokens_valid_after == at  # microseconds kept
    assert (await store.get_user(user.id)).tokens_valid_after == at
    a1 = await store.rotate_refresh_token("a1".ljust(64, "0"), successor("a2"), at)
    assert a1.status is RefreshStatus.REUSED  # revoked
    b1 = await store.rotate_refresh_token("b1".ljust(64, "0"), successor("b2"), at)
    assert b1.status is RefreshStatus.ROTATED  # another user's login goes on
    # Never moved back; moved on by a later end.
    assert (await store.update_user_ending_sessions(stored, T0)).tokens_valid_after == at
    later = at + MICRO
    assert (await store.update_user_ending_sessions(stored, later)).tokens_valid_after == later
    # A plain update leaves it alone.
    assert (await store.update_user(replace(stored, failed_logins=2))).tokens_valid_after == later


async def test_ending_sessions_keeps_the_update_rules(store: DependencyAwareStore) -> None:
    admin = make_user("root", Role.ADMIN)
    await store.create_user(admin)
    with pytest.raises(ConflictError, match="last active Admin"):
        await store.update_user_ending_sessions(replace(admin, role=Role.VIEWER), T0)
    assert (await store.get_user(admin.id)).tokens_valid_after is None  # nothing written
    with pytest.raises(NotFoundError):
        await store.update_user_ending_sessions(make_user("ghost"), T0)
