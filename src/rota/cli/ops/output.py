"""What the operator's commands print: rich tables for people, and with ``--json`` the API's
own JSON (camelCase, the REST API's shapes) for scripts, one document on stdout."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the API's JSON (stable, for scripts), not a table.")
]

STATUS_STYLES = {
    "Queued": "cyan",
    "Running": "blue",
    "Completed": "green",
    "Failed": "red",
    "Cancelled": "yellow",
    "TimedOut": "red",
    "Unknown": "magenta",
    "Skipped": "dim",
}


def console() -> Console:
    """stdout; without a terminal: no colours and wide enough not to cut a column."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=200, no_color=True)


def as_json(value: Any) -> Any:
    """A model (or a list of them) as the API's JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list | tuple):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    return value


def print_json(value: Any) -> None:
    out = orjson.dumps(as_json(value), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    sys.stdout.write(out.decode() + "\n")
    sys.stdout.flush()


def when(value: datetime | None) -> str:
    """A time in UTC, to the second ("-" for none)."""
    if value is None:
        return "-"
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def status(name: str) -> Text:
    return Text(name, style=STATUS_STYLES.get(name, ""))


def cell(value: Any) -> Text:
    """A table cell: our own styled text as it is, anything else as plain text (a job's name
    or an exception is never read as rich markup)."""
    if isinstance(value, Text):
        return value
    return Text("-" if value is None or value == "" else str(value))


def esc(value: Any) -> str:
    """``value`` as text to put into a markup message."""
    return escape(str(value))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    out = Table(
        title=None if title is None else Text(title), title_justify="left", header_style="bold"
    )
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(*(cell(value) for value in row))
    return out


def fields(title: str, pairs: Iterable[tuple[str, Any]]) -> Table:
    """One record as a two-column table."""
    out = Table(title=Text(title), title_justify="left", show_header=False, box=None)
    out.add_column(style="bold")
    out.add_column(overflow="fold")
    for name, value in pairs:
        out.add_row(name, cell(value))
    return out


def compact(value: Any, limit: int = 200) -> str:
    """Any JSON value on one line, cut at ``limit`` characters."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def show(renderable: Any) -> None:
    console().print(renderable)


def more(next_cursor: str | None) -> None:
    """Tell a person there is another page (on stderr: stdout stays the table)."""
    if next_cursor:
        Console(stderr=True, highlight=False).print(
            f"[dim]more: --cursor {next_cursor} (or --all)[/dim]"
        )


def err_print(message: str) -> None:
    """A note for a person (stderr), so stdout holds only what a script reads."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(message)


def warnings(answer: Any) -> None:
    """Every warning of an API answer (``warnings``: ``{code, message}``), one ``warning:``
    line each on stderr: said in every mode, ``--json`` too (its stdout stays the answer)."""
    for item in getattr(answer, "warnings", None) or ():
        err_print(f"[yellow]warning:[/yellow] {esc(item.message)} ({esc(item.code)})")


def job_name(name: str | None, job_type: str | None) -> str:
    """A row's job: its display name, or its type marked when the job was deleted."""
    return name if name else f"{job_type or '?'} (deleted)"


@contextmanager
def progress(what: str) -> Iterator[None]:
    """A spinner on stderr while something long goes on (only on a terminal)."""
    err = Console(stderr=True, highlight=False)
    if not err.is_terminal:
        yield
        return
    with err.status(escape(what)):
        yield
