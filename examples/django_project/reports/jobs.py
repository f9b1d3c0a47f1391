"""The project's jobs. A worker started by ``manage.py rota_worker`` runs them with Django set
up: settings, models and the rest of the project are there as in a view."""

from __future__ import annotations

from django.conf import settings

import rota


class Summary(rota.JobData):
    week: int


@rota.job("reports.summary", max_retries=2, timeout=120)
def summary(ctx: rota.JobContext, data: Summary) -> str:
    """A plain ``def``: it runs in the worker's thread pool (Django's ORM is fine there)."""
    ctx.log.info("building %s for week %d", settings.REPORT_TITLE, data.week)
    return f"{settings.REPORT_TITLE}, week {data.week}"
