"""Checked by mypy in ``tests/unit/test_enqueue_typing.py``, never run: the typed enqueue
(``rota.job`` definitions' ``now``/``schedule``/``after``/``cron``) as application code writes
it. A line ending in an ``E:`` comment must be a mypy error holding that text; every other line
must type-check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, assert_type

import rota


class Report(rota.JobData):
    kind: str


class Summary(rota.JobData):
    rows: int


@rota.job("GenerateReportJob")
async def generate_report(ctx: rota.JobContext, data: Report) -> Summary:
    return Summary(rows=1)


@rota.job("count")
def count(ctx: rota.JobContext, data: dict[str, int]) -> int:
    return len(data)


@rota.job("cleanup")
def cleanup(ctx: rota.JobContext) -> None: ...


async def with_the_async_client(client: rota.Client) -> None:
    handle = await generate_report.now(client, Report(kind="sales"), priority=3, tags=["a"])
    assert_type(await handle.result(timeout=60), Summary)
    later = await generate_report.schedule(client, Report(kind="x"), at=datetime.now(UTC))
    assert_type(await later.result(), Summary)
    soon = await count.after(client, {"a": 1}, delay=timedelta(minutes=5), timeout=30)
    assert_type(await soon.result(), int)
    daily = await cleanup.cron(client, expression="0 6 * * *", time_zone="Europe/Berlin")
    assert_type(await daily.result(), None)
    await cleanup.now(client, idempotency_key="k", depends_on=[handle.job_id])
    run = await client.trigger(handle.job_id)
    assert_type(await generate_report.handle(client, run.job_id, run.id).result(), Summary)
    assert_type(await cleanup.handle(client, run.job_id).result(), None)
    by_name = await client.enqueue("GenerateReportJob", {"kind": "sales"})
    assert_type(await by_name.result(), Any)

    await generate_report.now(client, {"kind": "sales"})  # E: No overload variant of "now"
    await count.now(client, Report(kind="x"))  # E: No overload variant of "now"
    await cleanup.now(client, Report(kind="x"))  # E: No overload variant of "now"
    await generate_report.now(client)  # E: No overload variant of "now"
    await generate_report.now(client, Report(kind="x"), priority="high")  # E: No overload variant
    await generate_report.now(client, Report(kind="x"), retries=3)  # E: No overload variant
    await generate_report.schedule(client, Report(kind="x"))  # E: No overload variant


def with_the_sync_client(client: rota.SyncClient) -> None:
    handle = generate_report.now(client, Report(kind="sales"))
    assert_type(handle.result(timeout=60), Summary)
    assert_type(count.after(client, {"a": 1}, delay=5).result(), int)
    assert_type(generate_report.now(client, Report(kind="x")).job_id.hex, str)
    assert_type(count.handle(client, handle.job_id).result(), int)
    count.now(client, ["a"])  # E: No overload variant of "now"
