"""The Store contract for users, refresh tokens and the audit log, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from rota.core.errors import ConflictError, NotFoundError, ValidationError
from rota.core.ids import new_id
from rota.core.ports import Store
from rota.core.security import (
    AuditEntry,
    AuditQuery,
    LoginGate,
    LoginReservation,
    RefreshStatus,
    RefreshToken,
    Role,
    User,
)

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def make_user(name: str = "ada", role: Role = Role.ADMIN, **fields: object) -> User:
    values: dict[str, object] = {
        "id": new_id(),
        "username": name,
        "password_hash": "$argon2id$not-a-real-hash",
        "role": role,
        "created_at": T0,
        "updated_at": T0,
    }
    values.update(fields)
    return User(**values)  # type: ignore[arg-type]


def make_token(
    user: User, family: UUID | None = None, name: str = "t1", **fields: object
) -> RefreshToken:
    values: dict[str, object] = {
        "token_hash": name.ljust(64, "0"),
        "family_id": family or new_id(),
        "user_id": user.id,
        "issued_at": T0,
        "expires_at": T0 + HOUR,
    }
    values.update(fields)
    return RefreshToken(**values)  # type: ignore[arg-type]


def successor(name: str) -> RefreshToken:
    """A successor token: family and user are the store's to fill in."""
    return RefreshToken(
        token_hash=name.ljust(64, "0"),
        family_id=UUID(int=0),
        user_id=UUID(int=0),
        issued_at=T0,
        expires_at=T0 + HOUR,
    )


# --- users -------------------------------------------------------------------------------------


async def test_user_round_trip_and_lookup_by_name(store: Store) -> None:
    user = make_user(locked_until=T0 + HOUR, failed_logins=2)
    await store.create_user(user)
    assert await store.get_user(user.id) == user
    assert await store.find_user("ada") == user
    assert await store.find_user("bob") is None
    with pytest.raises(NotFoundError):
        await store.get_user(new_id())


async def test_a_taken_username_is_a_conflict(store: Store) -> None:
    await store.create_user(make_user())
    with pytest.raises(ConflictError, match="taken"):
        await store.create_user(make_user())
    bob = make_user("bob", Role.VIEWER)
    await store.create_user(bob)
    with pytest.raises(ConflictError, match="taken"):
        await store.update_user(replace(bob, username="ada"))


async def test_users_are_listed_oldest_first_with_cursor_pages(store: Store) -> None:
    users = [make_user(f"user{i}", Role.VIEWER) for i in range(5)]
    for user in users:
        await store.create_user(user)
    first = await store.list_users(limit=3)
    assert [u.username for u in first.items] == ["user0", "user1", "user2"]
    assert first.next_cursor is not None
    rest = await store.list_users(limit=3, cursor=first.next_cursor)
    assert [u.username for u in rest.items] == ["user3", "user4"]
    assert rest.next_cursor is None
    with pytest.raises(ValidationError):
        await store.list_users(cursor="not-a-cursor")


async def test_update_user_stores_every_field(store: Store) -> None:
    user = make_user("op", Role.OPERATOR)
    await store.create_user(user)
    changed = replace(
        user,
        password_hash="$argon2id$other",
        role=Role.VIEWER,
        is_active=False,
        updated_at=T0 + HOUR,
    )
    assert await store.update_user(changed) == changed
    assert await store.get_user(user.id) == changed
    with pytest.raises(NotFoundError):
        await store.update_user(make_user("ghost"))


async def test_the_last_active_admin_cannot_be_demoted_deactivated_or_deleted(
    store: Store,
) -> None:
    admin = make_user("root")
    await store.create_user(admin)
    assert await store.count_admins() == 1
    for change in (replace(admin, role=Role.OPERATOR), replace(admin, is_active=False)):
        with pytest.raises(ConflictError, match="last active Admin"):
            await store.update_user(change)
    with pytest.raises(ConflictError, match="last active Admin"):
        await store.delete_user(admin.id)
    second = make_user("second")
    await store.create_user(second)
    assert await store.count_admins() == 2
    await store.update_user(replace(admin, role=Role.VIEWER))
    assert await store.count_admins() == 1
    with pytest.raises(ConflictError):
        await store.delete_user(second.id)


async def test_two_concurrent_demotions_leave_one_admin(store: Store) -> None:
    a, b = make_user("a"), make_user("b")
    await store.create_user(a)
    await store.create_user(b)
    results = await asyncio.gather(
        store.update_user(replace(a, role=Role.VIEWER)),
        store.update_user(replace(b, role=Role.VIEWER)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, ConflictError) for r in results) == 1
    assert await store.count_admins() == 1


async def test_delete_user_removes_it_and_its_tokens(store: Store) -> None:
    await store.create_user(make_user("root"))
    viewer = make_user("v", Role.VIEWER)
    await store.create_user(viewer)
    await store.add_refresh_token(make_token(viewer))
    assert await store.delete_user(viewer.id) == viewer
    with pytest.raises(NotFoundError):
        await store.get_user(viewer.id)
    with pytest.raises(NotFoundError):
        await store.delete_user(viewer.id)
    outcome = await store.rotate_refresh_token("t1".ljust(64, "0"), successor("t2"), T0)
    assert outcome.status is RefreshStatus.INVALID


MINUTE = timedelta(minutes=1)
LEASE = timedelta(seconds=10)


async def reserve(
    store: Store, name: str, now: datetime = T0, max_failures: int = 3
) -> LoginReservation:
    return await store.reserve_login(
        name, now=now, max_failures=max_failures, lock_until=now + HOUR, check_until=now + LEASE
    )


async def fail(store: Store, name: str, now: datetime = T0, max_failures: int = 3) -> bool:
    """One failed attempt: reserved, then its check ended. Whether it locked the name."""
    granted = await reserve(store, name, now, max_failures)
    assert granted.gate is LoginGate.GRANTED
    await store.end_login_check(name, check_until=now + LEASE, succeeded=False)
    return granted.locks


@pytest.mark.parametrize("known", [True, False], ids=["user", "unknown-name"])
async def test_attempts_are_counted_before_the_check_and_lock_at_the_limit(
    store: Store, known: bool
) -> None:
    if known:
        await store.create_user(make_user())
    assert [await fail(store, "ada") for _ in range(3)] == [False, False, True]
    locked = await reserve(store, "ada", T0 + MINUTE)
    assert (locked.gate, locked.until) == (LoginGate.LOCKED, T0 + HOUR)
    # When the lock ends, the count has started again.
    assert [await fail(store, "ada", T0 + HOUR) for _ in range(3)] == [False, False, True]
    if known:
        stored = await store.find_user("ada")
        assert stored is not None
        assert (stored.failed_logins, stored.locked_until) == (0, T0 + 2 * HOUR)


async def test_a_success_gives_the_count_back_and_clears_a_lock(store: Store) -> None:
    user = make_user()
    await store.create_user(user)
    await fail(store, "ada")
    granted = await reserve(store, "ada")
    assert granted.user is not None
    assert granted.user.failed_logins == 2
    await store.end_login_check("ada", check_until=T0 + LEASE, succeeded=True)
    cleared = await store.get_user(user.id)
    assert (cleared.failed_logins, cleared.locked_until) == (0, None)
    # The attempt that locks, if right, unlocks again.
    await fail(store, "ada")
    await fail(store, "ada")
    last = await reserve(store, "ada")
    assert last.locks
    assert last.user is not None
    assert last.user.locked(T0)
    await store.end_login_check("ada", check_until=T0 + LEASE, succeeded=True)
    assert (await reserve(store, "ada")).gate is LoginGate.GRANTED


@pytest.mark.parametrize("known", [True, False], ids=["user", "unknown-name"])
async def test_one_check_at_a_time_per_name(store: Store, known: bool) -> None:
    if known:
        await store.create_user(make_user())
    assert (await reserve(store, "ada")).gate is LoginGate.GRANTED
    busy = await reserve(store, "ada")
    assert (busy.gate, busy.until) == (LoginGate.BUSY, T0 + LEASE)
    assert (await reserve(store, "bob")).gate is LoginGate.GRANTED  # another name is free
    # Ending someone else's lease (an older check's) does not end this one.
    await store.end_login_check("ada", check_until=T0 + MINUTE, succeeded=False)
    assert (await reserve(store, "ada")).gate is LoginGate.BUSY
    await store.end_login_check("ada", check_until=T0 + LEASE, succeeded=False)
    assert (await reserve(store, "ada")).gate is LoginGate.GRANTED
    # A lease not ended (its server died) runs out.
    assert (await reserve(store, "ada", T0 + LEASE)).gate is LoginGate.GRANTED


@pytest.mark.parametrize("known", [True, False], ids=["user", "unknown-name"])
async def test_parallel_reservations_grant_at_most_the_limit(store: Store, known: bool) -> None:
    """120 attempts at once, round after round: one check at a time is granted, and over
    all rounds exactly ``max_failures`` before the name is locked."""
    if known:
        await store.create_user(make_user())
    granted = 0
    for _ in range(6):
        results = await asyncio.gather(*(reserve(store, "ada") for _ in range(120)))
        mine = [r for r in results if r.gate is LoginGate.GRANTED]
        assert len(mine) <= 1
        granted += len(mine)
        if mine:
            await store.end_login_check("ada", check_until=T0 + LEASE, succeeded=False)
    assert granted == 3
    assert (await reserve(store, "ada")).gate is LoginGate.LOCKED


async def test_idle_unknown_names_are_forgotten(store: Store) -> None:
    await fail(store, "ghost", max_failures=2)
    later = T0 + timedelta(days=2)
    await fail(store, "other", later, max_failures=2)  # prunes ghost's idle row
    assert not await fail(store, "ghost", later, max_failures=2)


# --- refresh tokens ------------------------------------------------------------------------------


async def test_rotation_uses_a_token_up_and_stores_its_successor(store: Store) -> None:
    user = make_user()
    await store.create_user(user)
    family = new_id()
    await store.add_refresh_token(make_token(user, family))
    outcome = await store.rotate_refresh_token("t1".ljust(64, "0"), successor("t2"), T0)
    assert (outcome.status, outcome.user_id) == (RefreshStatus.ROTATED, user.id)
    second = await store.rotate_refresh_token("t2".ljust(64, "0"), successor("t3"), T0)
    assert (second.status, second.user_id) == (RefreshStatus.ROTATED, user.id)


async def test_reuse_revokes_the_whole_family_and_nothing_else(store: Store) -> None:
    user = make_user()
    await store.create_user(user)
    await store.add_refresh_token(make_token(user, new_id(), "a1"))
    await store.add_refresh_token(make_token(user, new_id(), "b1"))
    await store.rotate_refresh_token("a1".ljust(64, "0"), successor("a2"), T0)
    reused = await store.rotate_refresh_token("a1".ljust(64, "0"), successor("a3"), T0)
    assert (reused.status, reused.user_id) == (RefreshStatus.REUSED, user.id)
    # The live successor of the family is revoked too: presenting it is a reuse now.
    after = await store.rotate_refresh_token("a2".ljust(64, "0"), successor("a4"), T0)
    assert after.status is RefreshStatus.REUSED
    other = await store.rotate_refresh_token("b1".ljust(64, "0"), successor("b2"), T0)
    assert other.status is RefreshStatus.ROTATED


async def test_unknown_and_expired_tokens_are_invalid(store: Store) -> None:
    user = make_user()
    await store.create_user(user)
    await store.add_refresh_token(make_token(user))
    unknown = await store.rotate_refresh_token("zz".ljust(64, "0"), successor("t2"), T0)
    assert unknown.status is RefreshStatus.INVALID
    expired = await store.rotate_refresh_token("t1".ljust(64, "0"), successor("t2"), T0 + HOUR)
    assert expired.status is RefreshStatus.INVALID


async def test_of_two_concurrent_rotations_exactly_one_wins(store: Store) -> None:
    user = make_user()
    await store.create_user(user)
    await store.add_refresh_token(make_token(user))
    results = await asyncio.gather(
        store.rotate_refresh_token("t1".ljust(64, "0"), successor("x1"), T0),
        store.rotate_refresh_token("t1".ljust(64, "0"), successor("y1"), T0),
    )
    statuses = sorted(r.status for r in results)
    assert statuses == [RefreshStatus.REUSED, RefreshStatus.ROTATED]


async def test_revoke_by_family_and_by_user(store: Store) -> None:
    user, other = make_user(), make_user("bob", Role.VIEWER)
    await store.create_user(user)
    await store.create_user(other)
    family = new_id()
    await store.add_refresh_token(make_token(user, family, "a1"))
    await store.add_refresh_token(make_token(user, family, "a2"))
    await store.add_refresh_token(make_token(user, new_id(), "b1"))
    await store.add_refresh_token(make_token(other, new_id(), "c1"))
    assert await store.revoke_refresh_tokens(T0, token_hash="a1".ljust(64, "0")) == 2
    b1 = await store.rotate_refresh_token("b1".ljust(64, "0"), successor("b2"), T0)
    assert b1.status is RefreshStatus.ROTATED
    assert await store.revoke_refresh_tokens(T0, user_id=user.id) == 1  # b2
    b2 = await store.rotate_refresh_token("b2".ljust(64, "0"), successor("b3"), T0)
    assert b2.status is RefreshStatus.REUSED
    c1 = await store.rotate_refresh_token("c1".ljust(64, "0"), successor("c2"), T0)
    assert c1.status is RefreshStatus.ROTATED
    assert await store.revoke_refresh_tokens(T0, token_hash="unknown".ljust(64, "0")) == 0


async def test_long_expired_tokens_are_deleted_on_revocation(store: Store) -> None:
    user = make_user()
    await store.create_user(user)
    await store.add_refresh_token(make_token(user, new_id(), "old", expires_at=T0))
    later = T0 + timedelta(days=2)
    await store.revoke_refresh_tokens(later, user_id=user.id)
    # Gone, not merely revoked: presenting it is no reuse (nothing to revoke).
    outcome = await store.rotate_refresh_token("old".ljust(64, "0"), successor("new"), T0)
    assert outcome.status is RefreshStatus.INVALID


# --- audit ---------------------------------------------------------------------------------------


def entry(n: int, **fields: object) -> AuditEntry:
    values: dict[str, object] = {
        "id": new_id(),
        "at": T0 + timedelta(minutes=n),
        "actor": "ada",
        "action": "job.updated",
        "resource_type": "job",
        "resource_id": "j1",
        "before": {"isActive": True, "n": n},
        "after": {"isActive": False, "tags": ["a"]},
    }
    values.update(fields)
    return AuditEntry(**values)  # type: ignore[arg-type]


async def test_audit_round_trip_newest_first_with_filters(store: Store) -> None:
    entries = [
        entry(0),
        entry(1, actor="bob", resource_id="j2"),
        entry(2, action="user.created", resource_type="user", resource_id=None, before=None),
        entry(3),
    ]
    await store.append_audit(entries)
    await store.append_audit([])
    everything = await store.list_audit(AuditQuery())
    assert everything.items == entries[::-1]
    assert (await store.list_audit(AuditQuery(actor="bob"))).items == [entries[1]]
    assert (await store.list_audit(AuditQuery(resource_type="user"))).items == [entries[2]]
    by_id = await store.list_audit(AuditQuery(resource_type="job", resource_id="j1"))
    assert by_id.items == [entries[3], entries[0]]
    assert (await store.list_audit(AuditQuery(action="user.created"))).items == [entries[2]]
    window = AuditQuery(after=T0 + timedelta(minutes=1), before=T0 + timedelta(minutes=3))
    assert (await store.list_audit(window)).items == [entries[2], entries[1]]


async def test_audit_cursor_pages(store: Store) -> None:
    entries = [entry(i) for i in range(5)]
    await store.append_audit(entries)
    first = await store.list_audit(AuditQuery(limit=2))
    assert first.items == entries[4:2:-1]
    assert first.next_cursor is not None
    second = await store.list_audit(AuditQuery(limit=2, cursor=first.next_cursor))
    assert second.items == entries[2:0:-1]
    assert second.next_cursor is not None
    last = await store.list_audit(AuditQuery(limit=2, cursor=second.next_cursor))
    assert last.items == entries[:1]
    assert last.next_cursor is None
