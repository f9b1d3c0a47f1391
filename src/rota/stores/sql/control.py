"""The SQL store's control state: the dispatcher's pause switch."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, select, update

from rota.core.models import DispatcherState, utcnow
from rota.stores.schema import scheduler_control
from rota.stores.sql.engine import SqlParts

_DISPATCHER_KEY = "dispatcher"


class ControlQueries(SqlParts):
    """The dispatcher state of the :class:`~rota.core.ports.Store` port."""

    # --- control --------------------------------------------------------------------------

    async def dispatcher_state(self) -> DispatcherState:
        stmt = select(scheduler_control.c.value).where(scheduler_control.c.key == _DISPATCHER_KEY)
        async with self._read() as conn:
            value = (await conn.execute(stmt)).scalar_one_or_none()
        if not isinstance(value, dict):
            return DispatcherState()
        changed = value.get("changedAt")
        return DispatcherState(
            paused=bool(value.get("paused")),
            reason=value.get("reason"),
            by=value.get("by"),
            changed_at=None if changed is None else datetime.fromisoformat(changed),
        )

    async def set_dispatcher_state(self, state: DispatcherState) -> None:
        value = {
            "paused": state.paused,
            "reason": state.reason,
            "by": state.by,
            "changedAt": None if state.changed_at is None else state.changed_at.isoformat(),
        }
        now = utcnow()
        async with self._write() as conn:
            done = await conn.execute(
                update(scheduler_control)
                .where(scheduler_control.c.key == _DISPATCHER_KEY)
                .values(value=value, updated_at=now)
            )
            if done.rowcount == 0:
                await conn.execute(
                    insert(scheduler_control).values(
                        key=_DISPATCHER_KEY, value=value, updated_at=now
                    )
                )
