"""``rota maintenance reencrypt``: job data and results moved to the newest encryption key."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from rota.app.settings import Settings
from rota.core.sealing import REENCRYPT_TABLES, KeySettingError, new_key


def reencrypt(
    database_url: Annotated[
        str | None, typer.Option(help="Defaults to ROTA_DATABASE_URL or the data dir's SQLite.")
    ] = None,
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Rows per transaction.")] = 500,
    table: Annotated[
        list[str] | None,
        typer.Option(help=f"Only these tables ({', '.join(REENCRYPT_TABLES)}); repeatable."),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(help="Resume the first table after this key (the last one printed)."),
    ] = None,
) -> None:
    """Re-encrypt the stored job data and results with the current key of
    ROTA_ENCRYPTION__KEYS (or write them in plain text when ROTA_ENCRYPTION__CURRENT=none),
    in batches, printing progress. Safe while servers run; run again to resume."""
    from rota.app.adapters import ReencryptProgress, reencrypt_store

    console = Console(stderr=False, highlight=False)
    settings = Settings()
    try:
        seal = settings.encryption.seal()
    except KeySettingError as exc:
        raise typer.BadParameter(exc.message, param_hint="ROTA_ENCRYPTION__KEYS") from None
    if seal is None:
        raise typer.BadParameter(
            "set the keys to re-encrypt with (nothing to do without them)",
            param_hint="ROTA_ENCRYPTION__KEYS",
        )
    tables = table or list(REENCRYPT_TABLES)
    unknown = sorted(set(tables) - set(REENCRYPT_TABLES))
    if unknown:
        raise typer.BadParameter(f"unknown table {unknown[0]}", param_hint="--table")
    target = seal.current or "plain text"

    def progress(p: ReencryptProgress) -> None:
        where = "done" if p.last is None else f"last key {p.last}"
        skipped = f", {p.unopened} would not open (left)" if p.unopened else ""
        console.print(
            f"{p.table}: {p.read} read, {p.rewritten} moved to {target}{skipped}; {where}"
        )

    url = database_url or settings.effective_database_url
    asyncio.run(
        reencrypt_store(url, seal, batch=batch, tables=tables, after=after, progress=progress)
    )
    console.print(f"[green]reencrypt done[/green]: every value is on {target}")


def key() -> None:
    """Print a new random encryption key (base64 of 32 bytes) for ROTA_ENCRYPTION__KEYS."""
    print(new_key())
