"""Driver errors become Rota's store errors, including those SQLAlchemy does not wrap."""

from __future__ import annotations

import asyncpg
import pytest

from rota.core.errors import BackendUnavailableError
from rota.stores.sql import guard_errors


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"),
        ConnectionRefusedError(111, "Connection refused"),
    ],
)
async def test_a_driver_error_while_connecting_is_store_unavailable(error: Exception) -> None:
    with pytest.raises(BackendUnavailableError, match=type(error).__name__):
        async with guard_errors():
            raise error


async def test_a_programming_error_of_ours_is_not_hidden() -> None:
    with pytest.raises(KeyError):
        async with guard_errors():
            raise KeyError("not a store failure")
