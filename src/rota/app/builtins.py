"""The built-in workers' wiring (``--builtin http,sql,email,maintenance``): each built-in
module's job types built from its settings section, added to the registry of the user's job
modules. The composition root is the only place that gives ``rota.maintenance`` a store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from rota.app.adapters import make_store
from rota.app.settings import Settings
from rota.builtin import PACKAGE, parse_names, split_modules
from rota.core.errors import ConfigurationError
from rota.core.ports import MaintenanceStore
from rota.sdk.job import JobDefinition
from rota.sdk.registry import JobRegistry, load_jobs
from rota.services.dataschema import DataCheck

if TYPE_CHECKING:
    from rota.builtin.maintenance import OpenStore


def load_registry(
    settings: Settings, modules: Sequence[str], builtin: Sequence[str] = ()
) -> JobRegistry:
    """The job types of ``modules`` (``rota.builtin.<name>`` among them names a built-in
    worker) and of the built-in workers named in ``builtin`` (comma-separated allowed)."""
    named, user_modules = split_modules(modules)
    names = parse_names([*builtin, *named])
    registry = load_jobs(user_modules) if user_modules else JobRegistry()
    for name in names:
        for definition in builtin_definitions(settings, name):
            registry.add(definition, origin=f"{PACKAGE}.{name}")
    return registry


def builtin_definitions(settings: Settings, name: str) -> list[JobDefinition[..., Any]]:
    """The job types of the built-in worker ``name``, bound to the settings."""
    if name == "http":
        from rota.builtin import http

        return http.definitions(settings.http)
    if name == "sql":
        from rota.builtin import sql

        return sql.definitions(settings.sql)
    if name == "email":
        from rota.builtin import email

        return email.definitions(settings.smtp)
    if name == "maintenance":
        from rota.app.configs import retention_policy
        from rota.builtin import maintenance

        policy = retention_policy(settings.retention)
        return maintenance.definitions(_store_opener(settings), policy)
    raise ConfigurationError(f"unknown built-in worker {name!r}")


def builtin_data_checks(settings: Settings) -> dict[str, DataCheck]:
    """The server's checks of built-in job types' data at create, update and trigger, under
    the same settings as their workers (``http.request``'s URL: ``ROTA_HTTP__…``); whether
    or not this process runs the built-in workers."""
    from rota.builtin import http

    return {http.JOB_TYPE: http.data_check(settings.http)}


def _store_opener(settings: Settings) -> OpenStore:
    if not settings.database_url and not settings.is_embedded:
        raise ConfigurationError(
            "the rota.maintenance worker needs the scheduler's database: set ROTA_DATABASE_URL"
        )
    url = settings.effective_database_url

    @asynccontextmanager
    async def opened() -> AsyncIterator[MaintenanceStore]:
        store = make_store(url)
        await store.open()
        try:
            yield store
        finally:
            await store.close()

    return opened
