"""``rota jobs``: list, show, create, edit, delete, trigger, enable, disable, pause, resume,
skip, backfill. A job is named by its id or by its display name when that is unique."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.text import Text

from rota.api.schemas.jobs import JobOut
from rota.cli.ops import output
from rota.cli.ops.output import JsonOpt
from rota.cli.ops.refs import ID_HELP
from rota.cli.ops.refs import resolve as resolve  # the commands of other groups name jobs too
from rota.cli.ops.session import API_ERROR, USAGE, connect, fail, quiet_target
from rota.client import SyncClient

app = typer.Typer(
    help="Jobs: list, show, create, edit, delete, trigger, enable, disable, pause, resume, skip, "
    "backfill."
)

PRIORITIES = {"very_low": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}
POLICIES = {"skip": 0, "queue": 1, "allow_all": 2, "buffer_one": 3, "cancel_other": 4}
PRIORITY_NAMES = {v: k for k, v in PRIORITIES.items()}
POLICY_NAMES = {v: k for k, v in POLICIES.items()}
NAME_PAGE = 500

COMPLETE_TIMEOUT = 3.0


def complete_job(incomplete: str) -> list[str]:
    """Shell completion of a job argument: the names of the jobs whose name starts with what
    is typed (none when not signed in or the server does not answer in time)."""
    where = quiet_target()
    if where is None:
        return []
    try:
        with SyncClient(where.url, token=where.token, timeout=COMPLETE_TIMEOUT) as client:
            page = client.list_jobs(search=incomplete or None, limit=100)
    except Exception:  # completion must never print an error into the shell
        return []
    names = {job.display_name for job in page.items}
    return sorted(n for n in names if n.lower().startswith(incomplete.lower()))


JobArg = Annotated[
    str,
    typer.Argument(
        help=f"The job: its display name if unique, or {ID_HELP}.",
        autocompletion=complete_job,
    ),
]


def _schedule(job: JobOut) -> str:
    if job.cron_expression:
        zone = "" if job.time_zone == "UTC" else f" ({job.time_zone})"
        return f"{job.cron_expression}{zone}"
    if job.every:
        return f"every {job.every}"
    if job.execute_at is None:
        return "on trigger"
    return f"at {output.when(job.execute_at)}"


def _runs(job: JobOut) -> str | None:
    """Runs planned: only for a job with a limit on its runs (``maxRuns``)."""
    if job.max_runs is None:
        return None
    return f"{job.run_count or 0} of {job.max_runs}"


def _effective(upcoming: dict[str, Any] | None, key: str, own: Any) -> Any:
    """A value its runs get, with where it comes from (``30 (job type)``); the job's own
    value alone when the server's answer is not at hand."""
    if upcoming is None:
        return own
    found = upcoming["effective"].get(key) or {}
    if found.get("value") is None:
        return "none"
    return f"{found['value']} ({found['source']})"


def _state(job: JobOut) -> Text:
    if not job.is_active:
        if job.auto_disable.disabled_reason:
            return Text("auto-disabled", style="red")
        return Text("disabled", style="yellow")
    if job.paused:
        until = "" if job.paused_until is None else f" until {output.when(job.paused_until)}"
        return Text(f"paused{until}", style="yellow")
    if job.skip_next:
        return Text(f"active, skips {job.skip_next}", style="green")
    return Text("active", style="green")


def _pause(job: JobOut) -> str | None:
    """The pause and skip state in words (``None``: neither)."""
    said: list[str] = []
    if job.paused:
        until = "resumed" if job.paused_until is None else output.when(job.paused_until)
        note = f": {job.pause_note}" if job.pause_note else ""
        said.append(f"paused by {job.paused_by or '-'} until {until}{note}")
    if job.skip_next:
        note = f": {job.skip_note}" if job.skip_note else ""
        said.append(f"skips its next {job.skip_next} fires{note}")
    return "; ".join(said) or None


def _rate(job: JobOut) -> str:
    return "-" if job.success_rate is None else f"{job.success_rate:.0f}%"


def show_job(job: JobOut, json: bool, upcoming: dict[str, Any] | None = None) -> None:
    """The job's fields; with ``upcoming`` (``GET /jobs/{id}/upcoming``) the values its runs
    get with their sources."""
    if json:
        output.print_json(job)
        return
    priority = PRIORITY_NAMES.get(int(job.priority), str(job.priority))
    policy = POLICY_NAMES.get(int(job.concurrent_execution_policy), "?")
    output.show(
        output.fields(
            f"job {job.display_name}",
            [
                ("id", job.id),
                ("name", job.display_name),
                ("type", job.job_type),
                ("worker group", job.worker_id),
                ("state", _state(job)),
                ("pause", _pause(job)),
                ("schedule", _schedule(job)),
                ("next run (UTC)", output.when(job.next_run_at)),
                ("start (UTC)", output.when(job.start_at) if job.start_at else None),
                ("end (UTC)", output.when(job.end_at) if job.end_at else None),
                *([("runs planned", _runs(job))] if job.max_runs is not None else []),
                ("jitter (s)", job.jitter_seconds),
                ("misfire window (s)", job.misfire_window_seconds),
                ("tags", ", ".join(job.tags)),
                ("priority", priority),
                ("concurrency policy", policy),
                ("misfire policy", job.misfire_policy.value),
                ("timeout (s)", _effective(upcoming, "timeoutSeconds", job.timeout_seconds)),
                ("max retries", _effective(upcoming, "maxRetries", job.max_retries)),
                (
                    "retry delay (s)",
                    _effective(upcoming, "retryDelaySeconds", job.retry_delay_seconds),
                ),
                ("concurrency per worker", _effective(upcoming, "concurrency", None)),
                ("data", output.compact(job.job_data, 2000)),
                ("description", job.description),
                ("runs", job.total_executions),
                ("success rate", _rate(job)),
                ("average duration", output.duration(job.average_duration)),
                ("disabled reason", job.auto_disable.disabled_reason),
                ("version", job.version),
                ("created (UTC)", f"{output.when(job.created_at)} by {job.created_by or '-'}"),
                ("updated (UTC)", f"{output.when(job.updated_at)} by {job.updated_by or '-'}"),
            ],
        )
    )


def collect(
    fetch: Callable[[int, str | None], Any], limit: int, cursor: str | None, every: bool
) -> tuple[list[Any], str | None]:
    """One page of ``limit`` items after ``cursor`` (``fetch(limit, cursor)``), or with
    ``every`` all of them, a page of :data:`NAME_PAGE` at a time; and the cursor after."""
    items: list[Any] = []
    while True:
        page = fetch(NAME_PAGE if every else limit, cursor)
        items += page.items
        cursor = page.next_cursor
        if not every or cursor is None:
            return items, cursor


LimitOpt = Annotated[int, typer.Option(min=1, max=1000, help="At most this many (one page).")]
CursorOpt = Annotated[str | None, typer.Option(help="The page after this cursor.")]
AllOpt = Annotated[bool, typer.Option("--all", help="Every page.")]


@app.command("list")
def list_jobs(
    search: Annotated[str | None, typer.Option(help="In the name, type or description.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only jobs with this tag.")] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Only this job type.")] = None,
    active: Annotated[
        bool | None,
        typer.Option("--active/--disabled", help="Only active / only disabled jobs (isActive)."),
    ] = None,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="Query filter: type:report worker:reports tag:billing status:paused "
            "data.customer:42, words for the search (see docs/api.md).",
        ),
    ] = None,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    every: AllOpt = False,
    json: JsonOpt = False,
) -> None:
    """List jobs, newest first."""
    with connect() as client:
        items, cursor = collect(
            lambda size, after: client.list_jobs(
                search=search,
                tag=tag,
                job_type=job_type,
                is_active=active,
                query=query,
                limit=size,
                cursor=after,
            ),
            limit,
            cursor,
            every,
        )
    if json:
        output.print_json({"items": items, "nextCursor": cursor})
        return
    rows = [
        (
            job.id,
            job.display_name,
            job.job_type,
            _schedule(job),
            _state(job),
            output.when(job.next_run_at),
            job.total_executions,
            _rate(job),
        )
        for job in items
    ]
    columns = ["id", "name", "type", "schedule", "state", "next run (UTC)", "runs", "ok"]
    output.show(output.table(None, columns, rows))
    output.more(cursor)


@app.command("show")
def show(
    job: JobArg,
    fires: Annotated[
        int, typer.Option(min=1, max=100, help="How many upcoming fires to list.")
    ] = 5,
    json: JsonOpt = False,
) -> None:
    """One job with its settings (the values its runs get, with where each comes from), its
    statistics, its next fires (UTC and its time zone) and its latest runs."""
    with connect() as client:
        found = resolve(client, job)
        if json:
            show_job(found, json)
            return
        path = f"/jobs/{found.id}/upcoming"
        upcoming = client.call(client.client.request("GET", path, params={"count": fires}))
        recent = client.list_occurrences(job_id=found.id, limit=5).items
    show_job(found, json, upcoming)
    zone = upcoming["timeZone"]
    rows = [
        (
            output.when(datetime.fromisoformat(f["at"])),
            f["local"],
            {"paused": "skipped: paused", "skip_next": "skipped: skip"}.get(f["skipped"], ""),
        )
        for f in upcoming["fires"]
    ]
    output.show(output.table("next fires", ["UTC", zone, "note"], rows))
    if not rows:
        output.err_print("no upcoming fire")
    runs = [
        (
            run.id,
            output.status(run.status_name),
            output.when(run.scheduled_for),
            output.duration(run.duration_ms),
            run.attempt,
        )
        for run in recent
    ]
    output.show(
        output.table("latest runs", ["id", "status", "scheduled (UTC)", "took", "try"], runs)
    )


# --- create and edit -------------------------------------------------------------------------


RULES = ("success", "completion", "failure")


def upstreams_of(client: SyncClient, after: list[str]) -> list[dict[str, str]]:
    """``--after JOB[:on]`` options as the API's ``dependsOn`` (``none``: no upstream)."""
    if [a.strip().lower() for a in after] == ["none"]:
        return []
    out = []
    for item in after:
        ref, _, rule = item.rpartition(":") if item.rpartition(":")[2] in RULES else (item, "", "")
        out.append({"jobId": str(resolve(client, ref).id), "on": rule or "success"})
    return out


@app.command("deps")
def deps(job: JobArg, json: JsonOpt = False) -> None:
    """The jobs a job runs after, and the jobs that run after it."""
    with connect() as client:
        found = resolve(client, job)
        shown = client.dependencies(found.id)
    if json:
        output.print_json(shown)
        return
    rows = [("after", d.name or "", d.job_id, d.on.value) for d in shown.depends_on]
    rows += [("before", d.name or "", d.job_id, d.on.value) for d in shown.dependents]
    title = f"dependencies of {found.display_name}"
    output.show(output.table(title, ["", "job", "id", "on"], rows))


def _json_value(text: str, option: str) -> Any:
    """A JSON option: the JSON itself, or ``@path`` to a file holding it."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise typer.BadParameter(str(exc), param_hint=option) from None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint=option) from None


def _choice(value: str, names: dict[str, int], option: str) -> int:
    key = value.strip().lower().replace("-", "_")
    if key in names:
        return names[key]
    if key.isdigit() and int(key) in names.values():
        return int(key)
    raise typer.BadParameter(f"one of {', '.join(names)}", param_hint=option)


NameOpt = Annotated[str | None, typer.Option("--name", help="The display name.")]
DescriptionOpt = Annotated[str | None, typer.Option(help="A description.")]
TagsOpt = Annotated[
    list[str] | None, typer.Option("--tag", help="A tag (repeat for more; replaces the tags).")
]
CronOpt = Annotated[str | None, typer.Option("--cron", help="Cron expression (5 or 6 fields).")]
AtOpt = Annotated[
    str | None, typer.Option("--at", help="ISO time of a one-time run (with --cron: the start).")
]
TzOpt = Annotated[str | None, typer.Option("--tz", help="IANA time zone of the cron expression.")]
DataOpt = Annotated[
    str | None, typer.Option("--data", help="The job's data: JSON, or @file holding JSON.")
]
WorkerOpt = Annotated[str | None, typer.Option("--worker", help="The worker group.")]
AfterOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--after",
        help="JOB[:on]: run after that job (id or unique name); on is success (default), "
        "completion or failure. Repeat for more (fan-in); replaces the upstreams. "
        "--after none clears them.",
    ),
]
PriorityOpt = Annotated[str | None, typer.Option(help="very_low, low, medium, high or critical.")]
PolicyOpt = Annotated[
    str | None,
    typer.Option(
        "--concurrency",
        help="While a run is on: skip, queue, allow_all, buffer_one or cancel_other.",
    ),
]
MisfireOpt = Annotated[str | None, typer.Option("--misfire", help="fire_once, catch_up or skip.")]
TimeoutOpt = Annotated[float | None, typer.Option("--timeout", help="Seconds a run may take.")]
RetriesOpt = Annotated[int | None, typer.Option("--max-retries", help="Retries after a failure.")]
DelayOpt = Annotated[
    float | None, typer.Option("--retry-delay", help="Seconds before the first retry.")
]


EveryOpt = Annotated[
    str | None,
    typer.Option("--every", help="An interval instead of a cron: 90m, 1h30m, 45s, 2d."),
]
StartOpt = Annotated[
    str | None, typer.Option("--start", help="ISO time: no fire of a recurring job before it.")
]
EndOpt = Annotated[
    str | None, typer.Option("--end", help="ISO time: no fire after it (then no next fire).")
]
MaxRunsOpt = Annotated[
    int | None, typer.Option("--max-runs", help="Stop after this many runs (skipped don't count).")
]
JitterOpt = Annotated[
    float | None,
    typer.Option("--jitter", help="Seconds (0-3600): each fire is sent a random delay up to it."),
]
MisfireWindowOpt = Annotated[
    float | None,
    typer.Option("--misfire-window", help="Seconds late before a fire is missed (the job's own)."),
]


def _bounds(
    every: str | None,
    start: str | None,
    end: str | None,
    max_runs: int | None,
    jitter: float | None,
    misfire_window: float | None,
) -> dict[str, Any]:
    """The interval and bounds options, in the client's snake_case (those given)."""
    out = {
        "every": every,
        "start_at": start,
        "end_at": end,
        "max_runs": max_runs,
        "jitter_seconds": jitter,
        "misfire_window_seconds": misfire_window,
    }
    return {key: value for key, value in out.items() if value is not None}


def _fields(
    *,
    name: str | None,
    description: str | None,
    tags: list[str] | None,
    cron: str | None,
    at: str | None,
    tz: str | None,
    data: str | None,
    worker: str | None,
    priority: str | None,
    concurrency: str | None,
    misfire: str | None,
    timeout: float | None,
    max_retries: int | None,
    retry_delay: float | None,
) -> dict[str, Any]:
    """The fields the options give, in the client's snake_case."""
    out: dict[str, Any] = {
        "display_name": name,
        "description": description,
        "tags": tags or None,
        "cron_expression": cron,
        "execute_at": at,
        "time_zone": tz,
        "worker_id": worker,
        "misfire_policy": misfire,
        "timeout_seconds": timeout,
        "max_retries": max_retries,
        "retry_delay_seconds": retry_delay,
    }
    if data is not None:
        out["job_data"] = _json_value(data, "--data")
    if priority is not None:
        out["priority"] = _choice(priority, PRIORITIES, "--priority")
    if concurrency is not None:
        out["concurrent_execution_policy"] = _choice(concurrency, POLICIES, "--concurrency")
    return {key: value for key, value in out.items() if value is not None}


def _file_body(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    loaded = _json_value(f"@{path}", "--file")
    if not isinstance(loaded, dict):
        raise typer.BadParameter("a JSON object", param_hint="--file")
    return loaded


@app.command("create")
def create(
    job_type: Annotated[
        str | None, typer.Option("--type", help="The job type (a worker declares it).")
    ] = None,
    name: NameOpt = None,
    description: DescriptionOpt = None,
    tags: TagsOpt = None,
    cron: CronOpt = None,
    at: AtOpt = None,
    tz: TzOpt = None,
    data: DataOpt = None,
    worker: WorkerOpt = None,
    priority: PriorityOpt = None,
    concurrency: PolicyOpt = None,
    misfire: MisfireOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: RetriesOpt = None,
    retry_delay: DelayOpt = None,
    every: EveryOpt = None,
    start: StartOpt = None,
    end: EndOpt = None,
    max_runs: MaxRunsOpt = None,
    jitter: JitterOpt = None,
    misfire_window: MisfireWindowOpt = None,
    after: AfterOpt = None,
    disabled: Annotated[
        bool, typer.Option("--disabled", help="Create it disabled (isActive off).")
    ] = False,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", help="A JSON job body as the API takes it; the options win over it."
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Run this command again with the same key (e.g. a UUID) within 24 h: it shows "
            "the job the first run created instead of creating another.",
        ),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Create a job: --type and --cron or --every (recurring) or --at (once); or a JSON body
    with -f."""
    body = _file_body(from_file)
    changes = _fields(
        name=name,
        description=description,
        tags=tags,
        cron=cron,
        at=at,
        tz=tz,
        data=data,
        worker=worker,
        priority=priority,
        concurrency=concurrency,
        misfire=misfire,
        timeout=timeout,
        max_retries=max_retries,
        retry_delay=retry_delay,
    )
    changes |= _bounds(every, start, end, max_runs, jitter, misfire_window)
    if job_type is not None:
        changes["job_type"] = job_type
    if disabled:
        changes["is_active"] = False
    body.update(changes)
    if "job_type" not in body and "jobType" not in body:
        fail("give the job type: --type (or jobType in --file)", USAGE)
    with connect() as client:
        if after:
            body["depends_on"] = upstreams_of(client, after)
        created = client.create_job(idempotency_key=idempotency_key, **body)
    output.warnings(created)
    if json:
        output.print_json(created)
        return
    output.err_print(f"[green]created job {output.esc(created.display_name)}[/green] {created.id}")
    show_job(created, json=False)


@app.command("edit")
def edit(
    job: JobArg,
    job_type: Annotated[str | None, typer.Option("--type", help="The job type.")] = None,
    name: NameOpt = None,
    description: DescriptionOpt = None,
    tags: TagsOpt = None,
    cron: CronOpt = None,
    at: AtOpt = None,
    tz: TzOpt = None,
    data: DataOpt = None,
    worker: WorkerOpt = None,
    priority: PriorityOpt = None,
    concurrency: PolicyOpt = None,
    misfire: MisfireOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: RetriesOpt = None,
    retry_delay: DelayOpt = None,
    every: EveryOpt = None,
    start: StartOpt = None,
    end: EndOpt = None,
    max_runs: MaxRunsOpt = None,
    jitter: JitterOpt = None,
    misfire_window: MisfireWindowOpt = None,
    after: AfterOpt = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="A JSON object of fields to change as the API takes them (null clears a "
            "field); the options win over it.",
        ),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Change some fields of a job (only the options given)."""
    changes = _file_body(from_file)
    changes |= _fields(
        name=name,
        description=description,
        tags=tags,
        cron=cron,
        at=at,
        tz=tz,
        data=data,
        worker=worker,
        priority=priority,
        concurrency=concurrency,
        misfire=misfire,
        timeout=timeout,
        max_retries=max_retries,
        retry_delay=retry_delay,
    )
    changes |= _bounds(every, start, end, max_runs, jitter, misfire_window)
    if job_type is not None:
        changes["job_type"] = job_type
    if not changes and not after:
        fail("nothing to change: give at least one option (see --help)", USAGE)
    with connect() as client:
        found = resolve(client, job)
        if after:
            changes["depends_on"] = upstreams_of(client, after)
        updated = client.update_job(found.id, **changes)
    output.warnings(updated)
    if json:
        output.print_json(updated)
        return
    output.err_print(
        f"[green]updated job {output.esc(updated.display_name)}[/green] (version {updated.version})"
    )
    show_job(updated, json=False)


@app.command("delete")
def delete(
    job: JobArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    json: JsonOpt = False,
) -> None:
    """Delete a job (its runs are kept). Asks first unless --yes."""
    with connect() as client:
        found = resolve(client, job)
        if not yes:
            typer.confirm(f"Delete job {found.display_name} ({found.id})?", abort=True)
        client.delete_job(found.id)
    if json:
        output.print_json({"id": str(found.id), "deleted": True})
        return
    output.err_print(f"[green]deleted job {output.esc(found.display_name)}[/green] {found.id}")


def _set_active(job: str, active: bool, json: bool) -> None:
    with connect() as client:
        found = resolve(client, job)
        updated = client.update_job(found.id, is_active=active)
    output.warnings(updated)
    if json:
        output.print_json(updated)
        return
    word = "enabled" if active else "disabled"
    output.err_print(f"[green]{word} job {output.esc(updated.display_name)}[/green] {updated.id}")


@app.command("disable")
def disable(job: JobArg, json: JsonOpt = False) -> None:
    """Switch a job off (isActive): no more fires, none recorded, until enabled."""
    _set_active(job, False, json)


@app.command("enable")
def enable(job: JobArg, json: JsonOpt = False) -> None:
    """Switch a job on (isActive); also re-enables an auto-disabled job. A pause stays."""
    _set_active(job, True, json)


def _said(word: str, job: JobOut, json: bool) -> None:
    output.warnings(job)
    if json:
        output.print_json(job)
        return
    output.err_print(f"[green]{word} {output.esc(job.display_name)}[/green] {job.id}")
    said = _pause(job)
    if said:
        output.err_print(output.esc(said))


@app.command("pause")
def pause(
    job: JobArg,
    note: Annotated[str | None, typer.Option(help="Why (shown on the job and each fire).")] = None,
    until: Annotated[
        str | None, typer.Option(help="When it resumes by itself (ISO time, in the future).")
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Pause a job: its fires are recorded Skipped (paused) instead of running, until resumed
    or --until. Apart from enable/disable and auto-disable."""
    with connect() as client:
        found = resolve(client, job)
        paused = client.pause(found.id, note=note, until=until)
    _said("paused", paused, json)


@app.command("resume")
def resume(job: JobArg, json: JsonOpt = False) -> None:
    """End a job's pause: its next fires run (a disabled job stays disabled)."""
    with connect() as client:
        found = resolve(client, job)
        resumed = client.resume(found.id)
    _said("resumed", resumed, json)


@app.command("skip")
def skip(
    job: JobArg,
    count: Annotated[int, typer.Argument(help="How many of its next fires: 1..1000; 0 clears.")],
    note: Annotated[str | None, typer.Option(help="Why (in each skipped fire's reason).")] = None,
    json: JsonOpt = False,
) -> None:
    """Record a job's next COUNT fires Skipped instead of running them."""
    with connect() as client:
        found = resolve(client, job)
        skipping = client.skip(found.id, count, note=note)
    _said("skip set for", skipping, json)


@app.command("backfill")
def backfill(
    job: JobArg,
    start: Annotated[str, typer.Option("--from", help="The window's start (ISO time).")],
    end: Annotated[str, typer.Option("--to", help="Its end, not in the future (ISO time).")],
    reason: Annotated[str | None, typer.Option(help="Why (kept with each run).")] = None,
    json: JsonOpt = False,
) -> None:
    """Run a recurring job for the past fires in a window that have no run yet (one after
    another, oldest first; at most 1,000)."""
    with connect() as client:
        found = resolve(client, job)
        result = client.backfill(found.id, start, end, reason=reason)
    if json:
        output.print_json(result)
        return
    output.err_print(
        f"[green]backfilled {output.esc(found.display_name)}[/green]: {result.created} runs "
        f"for {result.fires} fires ({result.already_recorded} had a run already)"
    )
    for run_id in result.occurrence_ids:
        print(run_id)


@app.command("trigger")
def trigger(
    job: JobArg,
    reason: Annotated[str | None, typer.Option(help="Why (kept with the run).")] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="Data for this run only: JSON or @file.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Run even if its policy would skip it.")
    ] = False,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Wait for the run to end; exit 1 unless it Completed."),
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Run a job now; prints the new run (occurrence)."""
    job_data = None if data is None else _json_value(data, "--data")
    with connect() as client:
        found = resolve(client, job)
        run = client.trigger(found.id, reason=reason, job_data=job_data, force=force)
        output.warnings(run)
        if wait:
            from rota.cli.ops.runs import wait_until_ended

            with output.progress(f"waiting for run {run.id} to end"):
                run = wait_until_ended(client, run.id)
    if json:
        output.print_json(run)
    else:
        output.err_print(f"[green]triggered {output.esc(found.display_name)}[/green]: run {run.id}")
        print(run.id)
        if wait:
            output.err_print(f"run ended {run.status_name}")
    if wait and run.status_name != "Completed":
        raise typer.Exit(API_ERROR)
