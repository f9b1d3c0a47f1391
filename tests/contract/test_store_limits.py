"""The limits an Admin set (``LimitStore``), on every store kind."""

from __future__ import annotations

from rota.core.limits import JobLimit
from rota.core.ports import Store


async def test_limits_are_kept_and_replaced(store: Store) -> None:
    assert await store.job_limits() == []
    limits = [JobLimit("mail", rate=2.5), JobLimit("sync", 2, "customerId")]
    await store.set_job_limits(limits)
    assert await store.job_limits() == limits
    # the dispatcher's switch, kept beside them, is left alone
    assert (await store.dispatcher_state()).paused is False
    await store.set_job_limits([JobLimit("report", 4, rate=1.0)])
    assert await store.job_limits() == [JobLimit("report", 4, rate=1.0)]
    await store.set_job_limits([])
    assert await store.job_limits() == []
