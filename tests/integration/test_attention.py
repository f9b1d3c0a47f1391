"""What needs every operator's attention (rota.services.attention): the dispatchers' stop
switch as the store holds it, and the silence alerts open on this server and the others."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from rota.core.models import DispatcherState
from rota.services.attention import read_attention
from rota.services.silence import INFO_KEY, Alert, alert_json
from rota.stores.sql import SqlStore

T0 = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)


def _alert(message: str, minute: int, instance: str) -> Alert:
    return Alert(
        kind="missed_fire",
        key=f"job:{message}",
        message=message,
        raised_at=T0.replace(minute=minute),
        instance_id=instance,
    )


async def test_nothing_needs_attention_by_default(store: SqlStore) -> None:
    found = await read_attention(store)
    assert not found.dispatching_stopped
    assert found.alerts == ()
    assert found.warnings() == {}


async def test_a_stopped_dispatcher_says_who_since_when_and_why(store: SqlStore) -> None:
    await store.set_dispatcher_state(
        DispatcherState(paused=True, reason="db migration", by="ops", changed_at=T0)
    )
    found = await read_attention(store)
    assert found.dispatching_stopped
    assert found.warnings() == {
        "dispatching": "stopped by ops since 2026-11-29 15:00:00 UTC: db migration"
    }


async def test_open_alerts_of_every_server_newest_first(store: SqlStore) -> None:
    own = [_alert("nightly missed its 02:00 fire", 1, "a")]
    theirs = [alert_json(_alert("hourly missed its 14:00 fire", 5, "b"))]
    resolved = {**alert_json(_alert("old", 9, "b")), "resolvedAt": T0.isoformat()}
    others = {
        "b": {INFO_KEY: orjson.dumps([*theirs, resolved]).decode()},
        "c": {INFO_KEY: "not json"},  # another version's heartbeat: left out
    }
    found = await read_attention(store, own_alerts=own, others=others)
    assert [a.message for a in found.alerts] == [
        "hourly missed its 14:00 fire",
        "nightly missed its 02:00 fire",
    ]
    assert found.warnings() == {"silence": "2 open alerts: hourly missed its 14:00 fire (+1 more)"}
