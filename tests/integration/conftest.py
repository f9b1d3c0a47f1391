"""Fixtures of the integration tests that talk to the API: ``runtime`` (by default the API's
smallest runtime, :class:`~tests.api_runtime.MiniRuntime` on a fresh SQLite store; a module
that needs the whole runtime overrides it with ``runtime_factory``, see ``tests/conftest.py``),
``app`` (the API and dashboard on it) and ``client`` (an Admin's HTTP client of that app)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from rota.api.app import create_app
from rota.api.deps import ApiRuntime
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime, sqlite_runtime


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[MiniRuntime]:
    async with sqlite_runtime(tmp_path) as made:
        yield made


@pytest.fixture
def app(runtime: ApiRuntime) -> FastAPI:
    return create_app(runtime)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(app) as http:
        yield http
