"""Unit-test fixtures (the tiers' shared ones are in ``tests/conftest.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rota.coordination.memory import MemoryCoordination
from tests.unit.registry_clock import Clock


@pytest.fixture
def data_dir(tmp_path: Path, sqlite_template: Path) -> Path:
    """A data dir whose embedded database (``rota.db``) is a copy of the session's migrated
    SQLite template: a ``rota`` command or ``prepare`` on it finds the schema at head, so its
    migration step does nothing, instead of migrating a new file in each test. (A test of the
    migration itself, or of the files it creates, starts from an empty directory.)"""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(sqlite_template, data / "rota.db")
    return data


@pytest.fixture
def clock() -> Clock:
    """A stepped clock at ``registry_clock.T0`` (a module with a clock of its own overrides it)."""
    return Clock()


@pytest.fixture
def coordination(clock: Clock) -> MemoryCoordination:
    """The in-memory coordination on :func:`clock` (registrations expire by it)."""
    return MemoryCoordination(clock=clock.epoch)
