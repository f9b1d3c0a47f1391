"""The SQL store's limits (:class:`~rota.core.ports.limits.LimitStore`): one row of the
``scheduler_control`` table (key ``limits``), the list as JSON."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert, select, update

from rota.core.limits import JobLimit, limits_from_json
from rota.core.models import utcnow
from rota.stores.schema import scheduler_control
from rota.stores.sql.engine import SqlParts

_KEY = "limits"
_c = scheduler_control.c


class LimitQueries(SqlParts):
    """The :class:`~rota.core.ports.limits.LimitStore` slice of the store."""

    async def job_limits(self) -> list[JobLimit]:
        async with self._read() as conn:
            value = (
                await conn.execute(select(_c.value).where(_c.key == _KEY))
            ).scalar_one_or_none()
        return limits_from_json(value) if isinstance(value, list) else []

    async def set_job_limits(self, limits: Sequence[JobLimit]) -> None:
        value = [limit.to_json() for limit in limits]
        now = utcnow()
        async with self._write() as conn:
            done = await conn.execute(
                update(scheduler_control).where(_c.key == _KEY).values(value=value, updated_at=now)
            )
            if done.rowcount == 0:
                await conn.execute(
                    insert(scheduler_control).values(key=_KEY, value=value, updated_at=now)
                )
