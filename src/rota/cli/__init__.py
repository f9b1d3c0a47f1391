"""The ``rota`` command: ``dev``, ``server``, ``worker``, ``migrate``, ``maintenance``,
``user`` and ``bench``; and the operator's commands over the REST API (:mod:`rota.cli.ops`:
``login``, ``jobs``, ``runs``, ``failed``, ``workers``, ``cron``).

The entry point that configures logging and reads the settings from the environment; what
each command runs is built by the composition root (:mod:`rota.app`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pydantic
import typer
from rich.console import Console

from rota.app.settings import Settings
from rota.app.startup import redact_url
from rota.cli.ops import register as register_operator_commands
from rota.cli.reencrypt import key as new_key_command
from rota.cli.reencrypt import reencrypt as reencrypt_command
from rota.core.errors import RotaError
from rota.observability.logs import LogFormat
from rota.services.maintenance import MaintenanceReport, RetentionPolicy

T = TypeVar("T")

app = typer.Typer(
    name="rota",
    help="Rota, a job scheduler: cron and one-time jobs, a REST API, workers, full history.",
    no_args_is_help=True,
)
user_app = typer.Typer(help="Users of the API and dashboard (roles Admin, Operator, Viewer).")
app.add_typer(user_app, name="user")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"rota {version('rota')}")
        except PackageNotFoundError:  # pragma: no cover - a source tree not installed
            print("rota dev")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Rota, a job scheduler: cron and one-time jobs, a REST API, workers, full history."""


def _console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def load_settings(**overrides: Any) -> Settings:
    """The settings from the environment and ``rota.toml``; a bad value ends the command with
    the variable it came from and what is wrong (exit code 2), not a traceback."""
    try:
        settings = Settings(**overrides)
        settings.encryption.seal()  # malformed keys: an error naming the setting, no key
    except pydantic.ValidationError as exc:
        console = _console()
        for error in exc.errors():
            name = "ROTA_" + "__".join(str(part) for part in error["loc"]).upper()
            console.print(f"[red]error:[/red] {name}: {error['msg']}")
        raise typer.Exit(2) from None
    except RotaError as exc:
        _console().print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(2) from None
    return settings


def configure_logging(
    level: str,
    chosen: str | None = None,
    default: LogFormat = LogFormat.JSON,
    *,
    console: bool = False,
) -> None:
    """Log lines in the ``chosen`` format (``--log-format``, else ``ROTA_LOG_FORMAT``), else
    the command's ``default``, with the log context; ``console``: ``rota dev``'s choice of
    lines (see :func:`rota.observability.logs.configure`)."""
    from rota.observability.logs import configure

    configure(level, fmt=chosen or default, console=console)


HostOpt = Annotated[str | None, typer.Option(help="Interface to listen on.")]
PortOpt = Annotated[int | None, typer.Option(help="Port to listen on.")]
JobsOpt = Annotated[
    list[str] | None,
    typer.Option("--jobs", help="Module (dotted name or .py path) with @rota.job handlers."),
]
LogLevelOpt = Annotated[str, typer.Option(help="Log level.")]
LogFormatOpt = Annotated[
    LogFormat | None,
    typer.Option(
        case_sensitive=False,
        help="json (one object per line) or text (readable lines); default ROTA_LOG_FORMAT, "
        "else text for dev and json for server and worker.",
    ),
]
BuiltinOpt = Annotated[
    list[str] | None,
    typer.Option(help="Built-in workers to run too: http,sql,email,maintenance (comma list)."),
]


def _builtin(values: list[str] | None) -> list[str]:
    """The built-in worker names (an unknown one: a usage error naming the known)."""
    from rota.builtin import parse_names

    try:
        return parse_names(values or [])
    except RotaError as exc:
        raise typer.BadParameter(exc.message, param_hint="--builtin") from None


@app.command()
def dev(
    host: HostOpt = None,
    port: PortOpt = None,
    jobs: JobsOpt = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where the SQLite store lives.")] = None,
    demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Load the demo jobs.")] = True,
    builtin: BuiltinOpt = None,
    log_level: LogLevelOpt = "info",
    log_format: LogFormatOpt = None,
) -> None:
    """Run Rota embedded: API, scheduler and workers in one process, SQLite in the data dir."""
    from rota.app.server import serve

    names = _builtin(builtin)
    overrides: dict[str, object] = {"environment": "development"}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    settings = load_settings(**overrides)
    configure_logging(log_level, log_format or settings.log_format, LogFormat.TEXT, console=True)
    _apply_listen(settings, host, port)
    modules = list(jobs or [])
    if demo:
        modules.insert(0, "rota.demo")
    _run(serve(settings, modules, demo=demo, console=_console(), dev_admin=True, builtin=names))
    _exit_past_stuck_threads()


@app.command()
def server(
    host: HostOpt = None,
    port: PortOpt = None,
    jobs: JobsOpt = None,
    log_level: LogLevelOpt = "info",
    log_format: LogFormatOpt = None,
) -> None:
    """Run a scheduler instance with the API (settings from ROTA_… variables / rota.toml)."""
    from rota.app.server import serve

    settings = load_settings()
    configure_logging(log_level, log_format or settings.log_format)
    _apply_listen(settings, host, port)
    _run(serve(settings, list(jobs or []), demo=False, console=_console()))
    _exit_past_stuck_threads()


@app.command()
def worker(
    modules: Annotated[
        list[str] | None, typer.Argument(help="Modules with @rota.job handlers.")
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option(
            "--worker-id",
            help="The worker group (ROTA_WORKER__GROUP); default: default. Jobs that name "
            "no group run on any live group that runs their type.",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Jobs run at once (ROTA_WORKER__CONCURRENCY); default: 32."),
    ] = None,
    grace: Annotated[float, typer.Option(min=0, help="Seconds running jobs get at SIGTERM.")] = 30,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Local state (outbox, finalized attempts); default: DATA_DIR/workers/ID if "
            "ROTA_DATA_DIR is set, else ~/.local/state/rota/workers/ID."
        ),
    ] = None,
    default_timeout: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Seconds an attempt may run when neither its job nor its job type sets a "
            "timeout (ROTA_WORKER__DEFAULT_TIMEOUT_SECONDS); default: no limit.",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve GET /metrics and GET /health on this port (0: any free port; "
            "ROTA_WORKER__METRICS_PORT); default: none.",
        ),
    ] = None,
    health: Annotated[
        bool | None,
        typer.Option(
            "--health/--no-health",
            help="Serve GET /health/live and /health/ready for an orchestrator "
            "(ROTA_WORKER__HEALTH); default: on.",
        ),
    ] = None,
    health_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="The health endpoint's port (ROTA_WORKER__HEALTH_PORT; 0: any free port); "
            "default: 8081, or any free port when another worker has it.",
        ),
    ] = None,
    builtin: BuiltinOpt = None,
    log_level: LogLevelOpt = "info",
    log_format: LogFormatOpt = None,
) -> None:
    """Run a worker process (distributed mode: ROTA_AMQP_URL and ROTA_REDIS_URL)."""
    from rota.app.worker_process import run_worker

    names = _builtin(builtin)
    settings = load_settings()
    configure_logging(log_level, log_format or settings.log_format)
    ws = settings.worker
    if default_timeout is not None:
        ws.default_timeout_seconds = default_timeout
    if metrics_port is not None:
        ws.metrics_port = metrics_port
    if health is not None:
        ws.health = health
    if health_port is not None:
        ws.health_port = health_port
    _run(
        run_worker(
            settings,
            modules or [],
            worker_id=(worker_id or "").strip() or ws.group,
            concurrency=concurrency or ws.concurrency,
            grace=grace,
            state_dir=state_dir,
            builtin=names,
        )
    )
    _exit_past_stuck_threads()


@app.command()
def migrate(
    database_url: Annotated[
        str | None, typer.Option(help="Defaults to ROTA_DATABASE_URL or the data dir's SQLite.")
    ] = None,
) -> None:
    """Bring the store's schema up to date."""
    from rota.app.adapters import upgrade_schema

    settings = load_settings()
    configure_logging("warning", settings.log_format)
    url = database_url or settings.effective_database_url
    if not url.startswith("sqlite"):  # SQLite: upgrade creates the file (0600) and its dir
        _run(_reach_database(url, settings.startup_wait_seconds))
    _run(upgrade_schema(url))
    _console().print(f"[green]schema up to date[/green] ({redact_url(url)})")


async def _reach_database(url: str, wait_seconds: float) -> None:
    """Wait for a database server to answer (``rota migrate`` often starts beside it)."""
    from rota.app.adapters import make_store
    from rota.app.startup import wait_for

    store = make_store(url)
    await wait_for("the database", url, store.open, within=wait_seconds)
    await store.close()


maintenance_app = typer.Typer(
    invoke_without_command=True,
    help="With no command: apply the retention settings once (ROTA_RETENTION__…) and print "
    "what was deleted. reencrypt and new-key: the encryption keys' upkeep.",
)
app.add_typer(maintenance_app, name="maintenance")
maintenance_app.command("reencrypt")(reencrypt_command)
maintenance_app.command("new-key")(new_key_command)


@maintenance_app.callback()
def maintenance(
    ctx: typer.Context,
    database_url: Annotated[
        str | None, typer.Option(help="Defaults to ROTA_DATABASE_URL or the data dir's SQLite.")
    ] = None,
) -> None:
    """Apply the retention settings once (ROTA_RETENTION__…): delete old occurrences, log
    lines and resolved dead letters in small batches (on PostgreSQL also create the coming
    time partitions and drop the expired ones), and print what was deleted."""
    if ctx.invoked_subcommand is not None:
        return

    settings = load_settings()
    configure_logging("warning", settings.log_format)
    url = database_url or settings.effective_database_url
    from rota.app.configs import retention_policy

    policy = retention_policy(settings.retention)
    report: MaintenanceReport = _run(_retention(url, policy, settings.startup_wait_seconds))
    console = _console()
    for status, n in sorted(report.occurrences.items()):
        console.print(f"{status} occurrences deleted: {n}")
    console.print(f"log lines deleted: {report.logs}")
    console.print(f"resolved dead letters deleted: {report.dead_letters}")
    console.print(f"expired idempotency keys deleted: {report.idempotency_keys}")
    if report.partitions_created or report.partitions_dropped:
        console.print(f"partitions created: {', '.join(report.partitions_created) or 'none'}")
        console.print(f"partitions dropped: {', '.join(report.partitions_dropped) or 'none'}")
    console.print(f"[green]retention done[/green] in {report.seconds:.1f} s ({redact_url(url)})")


async def _retention(url: str, policy: RetentionPolicy, wait_seconds: float) -> MaintenanceReport:
    from rota.app.adapters import make_store
    from rota.app.startup import wait_for
    from rota.services.maintenance import Maintenance

    store = make_store(url)
    await wait_for("the database", url, store.open, within=wait_seconds)
    try:
        return await Maintenance(store, policy).run_once()
    finally:
        await store.close()


DataDirOpt = Annotated[
    Path | None,
    typer.Option(help="The data dir (embedded SQLite store); default ROTA_DATA_DIR or .rota."),
]
PasswordStdinOpt = Annotated[
    bool,
    typer.Option("--password-stdin", help="Read the password from the first line of stdin."),
]


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    password: str = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    return password


def _user_settings(data_dir: Path | None) -> Settings:
    return load_settings(data_dir=data_dir) if data_dir is not None else load_settings()


@user_app.command("create")
def user_create(
    name: Annotated[str, typer.Argument(help="The username (case-insensitive).")],
    role: Annotated[str, typer.Option(help="admin, operator or viewer.")] = "viewer",
    password_stdin: PasswordStdinOpt = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Create a user (the password is prompted for, or read with --password-stdin)."""
    from rota.cli.users import create_user
    from rota.core.security import Role

    settings = _user_settings(data_dir)
    configure_logging("warning", settings.log_format, LogFormat.TEXT)
    try:
        parsed = Role.parse(role)
    except RotaError as exc:
        raise typer.BadParameter(exc.message, param_hint="--role") from None
    password = _read_password(password_stdin)
    user = _run(create_user(settings, name, password, parsed))
    _console().print(f"[green]created {user.role.value} {user.username}[/green]")


@user_app.command("password")
def user_password(
    name: Annotated[str, typer.Argument(help="The username.")],
    password_stdin: PasswordStdinOpt = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Set a user's password (a reset: it also unlocks the user and ends its logins)."""
    from rota.cli.users import reset_password

    settings = _user_settings(data_dir)
    configure_logging("warning", settings.log_format, LogFormat.TEXT)
    password = _read_password(password_stdin)
    user = _run(reset_password(settings, name, password))
    _console().print(f"[green]password of {user.username} set[/green]")


@user_app.command("list")
def user_list(data_dir: DataDirOpt = None) -> None:
    """List the users with their roles."""
    from rota.cli.users import list_users

    settings = _user_settings(data_dir)
    configure_logging("warning", settings.log_format, LogFormat.TEXT)
    for user in _run(list_users(settings)):
        state = "active" if user.is_active else "inactive"
        print(f"{user.username}\t{user.role.value}\t{state}")


def _exit_past_stuck_threads() -> None:
    """After a graceful stop everything is stored; a plain-def handler that ignores its
    cancellation would still keep the interpreter waiting for its thread. Do not wait."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    deadline = time.monotonic() + 1.0  # idle pool threads exit at once after their shutdown
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in others if t.is_alive()]
    if stuck:
        logging.getLogger(__name__).warning(
            "exiting without waiting for %d handler thread(s) still running", len(stuck)
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (it comes with ``uvicorn[standard]``): the
    scheduler and the worker spend much of their time in the loop itself, and uvloop's costs
    less than half as much per callback. ``ROTA_EVENT_LOOP=asyncio`` keeps the standard one."""
    if os.environ.get("ROTA_EVENT_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; a Rota error ends it with its message (exit code 2), not a
    traceback."""
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(coro)
    except RotaError as exc:
        _console().print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(2) from None


def _apply_listen(settings: Settings, host: str | None, port: int | None) -> None:
    if host is not None:
        settings.api.host = host
    if port is not None:
        settings.api.port = port


register_operator_commands(app)


def _add_command_groups(app: typer.Typer) -> None:
    """The command groups that other packages of this distribution add through the
    ``rota.commands`` entry points: ``rota bench`` (:mod:`rota_bench`, the benchmarks, kept out
    of the product; it says how to install its ``bench`` extra when that is missing)."""
    from importlib.metadata import entry_points

    for point in entry_points(group="rota.commands"):
        app.add_typer(point.load(), name=point.name)


_add_command_groups(app)


def main() -> None:
    from prometheus_client import disable_created_metrics

    disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series
    app()
