"""``rota bench``: the benchmark commands (typer), added to the ``rota`` command through the
``rota.commands`` entry point. Each needs the ``bench`` extra (psutil); without it the command
says how to install it. The scenarios themselves are imported when a command runs."""

from __future__ import annotations

from collections.abc import Coroutine
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

T = TypeVar("T")

INSTALL_HINT = (
    "rota bench needs the 'bench' extra (psutil): pip install 'rota[bench]' "
    "(in a source tree: pip install -e '.[bench]', or make install)"
)

bench_app = typer.Typer(help="Measure throughput and latency; results as JSON.")


@bench_app.callback()
def _needs_the_extra() -> None:
    """Every bench reads the CPU and memory of its processes with psutil, which the ``bench``
    extra installs: without it, say how to get it (exit code 2) rather than a traceback."""
    if find_spec("psutil") is None:
        _console().print(f"[red]error:[/red] {escape(INSTALL_HINT)}")
        raise typer.Exit(2)


def _quiet_logs() -> None:
    from rota.cli import configure_logging
    from rota.observability.logs import LogFormat

    configure_logging("warning", None, LogFormat.TEXT)


def _console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """As every ``rota`` command runs its coroutine (uvloop; a Rota error is its message)."""
    from rota.cli import _run as run_command

    return run_command(coro)


_LEAD = typer.Option(
    min=0,
    help="Dispatch lead in seconds (default: scheduler.dispatch_lead_seconds; 0: sent when due).",
)


@bench_app.command("throughput")
def bench_throughput(
    mode: Annotated[str, typer.Option(help="embedded or distributed")] = "embedded",
    jobs: Annotated[int, typer.Option(help="How many no-op jobs.")] = 20_000,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """No-op one-time jobs all due now, timed until every occurrence is Completed."""
    from rota_bench.scenarios import report, run_throughput

    _quiet_logs()
    result = _run(run_throughput(mode, jobs))
    report(result, json_file, _console())


@bench_app.command("latency")
def bench_latency(
    mode: Annotated[str, typer.Option(help="embedded or distributed")] = "embedded",
    jobs: Annotated[int, typer.Option(help="How many one-time jobs.")] = 1000,
    spread: Annotated[float, typer.Option(help="Seconds the due times spread over.")] = 10.0,
    lead: Annotated[float | None, _LEAD] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """One-time jobs due across a spread; start − scheduled percentiles in ms."""
    from rota_bench.scenarios import report, run_latency

    _quiet_logs()
    result = _run(run_latency(mode, jobs, spread, lead))
    report(result, json_file, _console())


@bench_app.command("cron")
def bench_cron(
    mode: Annotated[str, typer.Option(help="embedded or distributed")] = "embedded",
    jobs: Annotated[int, typer.Option(min=1, help="How many cron jobs (every second).")] = 200,
    seconds: Annotated[int, typer.Option(min=1, help="How many seconds they fire for.")] = 30,
    lead: Annotated[float | None, _LEAD] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """Cron jobs firing every second; start − scheduled percentiles in ms, fires missing and
    doubled."""
    from rota_bench.scenarios import report, run_cron

    _quiet_logs()
    result = _run(run_cron(mode, jobs, seconds, lead))
    report(result, json_file, _console())


@bench_app.command("login-flood")
def bench_login_flood(
    mode: Annotated[str, typer.Option(help="embedded or distributed")] = "embedded",
    clients: Annotated[int, typer.Option(min=1, help="Clients flooding the login.")] = 48,
    seconds: Annotated[float, typer.Option(min=1, help="How long the flood lasts.")] = 20.0,
    distinct_addresses: Annotated[
        bool,
        typer.Option(
            "--distinct-addresses/--same-address",
            help="Each client from its own address (X-Forwarded-For), or all from this host.",
        ),
    ] = True,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """Flood the login of a `rota server` (a process of its own) with wrong passwords while a
    normal authenticated call is timed; its latency, the 429s and the server's memory."""
    from rota_bench.scenarios import report, run_login_flood

    _quiet_logs()
    result = _run(run_login_flood(mode, clients, seconds, distinct_addresses=distinct_addresses))
    report(result, json_file, _console())


@bench_app.command("scaleout")
def bench_scaleout(
    servers: Annotated[int, typer.Option(min=1, max=8, help="`rota server` processes.")] = 1,
    workers: Annotated[int, typer.Option(min=1, max=8, help="`rota worker` processes.")] = 1,
    jobs: Annotated[int, typer.Option(min=1, help="No-op jobs due at one instant.")] = 20_000,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """Distributed mode: a burst of no-op jobs on S servers and W workers (processes of their
    own); the rate they ran at and the CPU per job of each role."""
    from rota_bench.scaleout import run_scaleout
    from rota_bench.scenarios import report

    _quiet_logs()
    result = _run(run_scaleout(servers, workers, jobs))
    report(result, json_file, _console())


@bench_app.command("capacity")
def bench_capacity(
    mode: Annotated[str, typer.Option(help="embedded or distributed")] = "embedded",
    pending: Annotated[int, typer.Option(min=1, help="Pending one-time jobs to create.")] = 10_000,
    history: Annotated[
        int, typer.Option(min=0, help="Completed occurrences written into the store first.")
    ] = 0,
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Jobs per bulk request.")] = 1_000,
    reads: Annotated[int, typer.Option(min=1, help="How many times each read is timed.")] = 50,
    history_fill: Annotated[
        str,
        typer.Option(
            help="store: the history through the store's inserts; sql: generated by the "
            "database in bulk (for millions), the statistics rebuilt from it."
        ),
    ] = "store",
    answer: Annotated[
        str,
        typer.Option(
            help="full: each bulk answer lists the created jobs in full; minimal: their ids "
            "only (Prefer: return=minimal)."
        ),
    ] = "full",
    concurrency: Annotated[
        int, typer.Option(min=1, max=16, help="Bulk requests in flight at once.")
    ] = 1,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """Create many pending jobs through the bulk API of a `rota server` (a process of its
    own): the create rate, store bytes per job, memory and the latency of a user's reads."""
    from rota_bench.capacity import run_capacity
    from rota_bench.scenarios import report

    _quiet_logs()
    result = _run(
        run_capacity(mode, pending, history, batch, reads, history_fill, answer, concurrency)
    )
    report(result, json_file, _console())
