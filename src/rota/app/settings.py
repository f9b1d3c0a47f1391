"""Settings: one pydantic-settings tree, from ``ROTA_…`` variables (nested with ``__``) over an
optional ``rota.toml``. Only entry points build a :class:`Settings`; library classes take typed
arguments and never read the environment."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from rota.builtin.config import HttpSettings, SmtpSettings, SqlSettings
from rota.core.addresses import check_networks
from rota.core.autodisable import AutoDisableDefaults
from rota.core.jsonlimits import DEFAULT_JSON_DEPTH, MAX_JSON_DEPTH
from rota.core.models import ZombiePolicy
from rota.core.sealing import DataSeal


def http_url(value: str) -> str:
    """``value`` if it is an ``http://`` or ``https://`` URL with a host (else ``ValueError``,
    which names the setting)."""
    parts = urlsplit(value.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value.strip()


WebhookUrl = Annotated[str, AfterValidator(http_url)]
"""A URL Rota POSTs to: http or https only (no file:, gopher:, …)."""


class SchedulerSettings(BaseModel):
    bucket_count: int = Field(16, ge=1, le=1024, description="Buckets the schedule is split into.")
    hot_window_seconds: float = Field(
        120.0,
        gt=0,
        description="How far ahead the schedule index holds: a job's fire enters it (memory "
        "or Redis) only within this of its due time, so memory follows the fires due in the "
        "window, not the pending jobs. Must be longer than loader_interval_seconds.",
    )
    loader_interval_seconds: float = Field(
        15.0, gt=0, description="How often the loader pulls the window's next slice from the store."
    )
    dispatch_batch_size: int = Field(
        2000,
        ge=1,
        le=50_000,
        description="Due jobs fired in one store transaction, and occurrences published per "
        "sweep batch. Fewer, larger transactions cost less per job (most of all on SQLite, "
        "whose one writer waits for each statement's answer).",
    )
    dispatch_lead_seconds: float = Field(
        0.5,
        ge=0,
        le=30,
        description="Occurrences are committed and sent this long before their due time (up to "
        "a fifth more, so that due times close together share a fire); the worker holds each on "
        "a timer and starts it at its due instant (0: sent when due).",
    )
    misfire_threshold_seconds: float = Field(60.0, ge=0)
    catch_up_cap: int = Field(100, ge=1)
    max_recorded_misses: int = Field(1000, ge=1)
    sweeper_interval_seconds: float = Field(5.0, gt=0)
    sweeper_grace_seconds: float = Field(
        2.0,
        ge=0,
        description="Distributed: the occurrences a fire commits are claimed for the dispatcher "
        "publishing them this long (no sweep sends them meanwhile; if its server dies first, a "
        "sweep sends them then). Triggers, retries, released dependents and backfills wait for "
        "nothing: they are swept at once.",
    )
    sweeper_claim_seconds: float = Field(
        30.0,
        gt=0,
        description="A sweep's claim on the occurrences it publishes lasts this long: if the "
        "server dies before publishing them, another sweep takes them after it.",
    )
    zombie_threshold_seconds: float = Field(
        30.0,
        gt=0,
        description="A Running occurrence with no heartbeat for this long is a zombie: it "
        "becomes Unknown and gets a new attempt. Keep it well above the workers' heartbeat.",
    )
    zombie_live_worker_threshold_seconds: float = Field(
        600.0,
        gt=0,
        description="The zombie threshold while the occurrence's worker instance is still "
        "registered (its reports may be held up by a broker outage, not lost).",
    )
    zombie_max_requeues: int = Field(
        3,
        ge=0,
        description="A zombie is requeued (policy requeue) at most this many times beyond its "
        "job's retries; one found after that fails (failure type zombie, a dead letter).",
    )
    zombie_interval_seconds: float = Field(
        10.0, gt=0, description="How often each server looks for zombies."
    )
    dead_worker_interval_seconds: float = Field(
        1.0,
        gt=0,
        description="How often the server owning bucket 0 looks for the Running occurrences "
        "of worker instances whose registration expired (and for attempts interrupted at a "
        "worker's stop): they get their next attempt at once, without the zombie threshold.",
    )
    dead_worker_silence_seconds: float = Field(
        5.0,
        gt=0,
        description="An occurrence of an unregistered worker instance is taken as lost only "
        "once it is also this silent in the store (its Running re-reports stopped too). Keep "
        "it above the workers' heartbeat: a worker cut off from Redis alone still reports "
        "through the broker.",
    )
    queued_zombie_threshold_seconds: float = Field(
        1800.0,
        gt=0,
        description="A Queued occurrence whose message was handed to the broker this long ago "
        "and that no worker has started is a zombie (its message was lost). Much longer than "
        "the Running threshold: a message may wait in a backlog, or in a worker whose slots "
        "are full, for a long time without any sign of life.",
    )
    zombie_policy: ZombiePolicy = Field(
        ZombiePolicy.REQUEUE,
        description="What becomes of a zombie of a job that names no policy: requeue (a new "
        "attempt, at-least-once) or fail (Failed, failure type zombie, a dead-letter record).",
    )
    auto_disable_threshold: int = Field(
        5,
        ge=0,
        description="Consecutive failures that disable a job (0: never), unless the job sets "
        "its own.",
    )
    auto_disable_window_seconds: float = Field(
        3600.0,
        gt=0,
        description="A failure more than this long after the previous one starts a new count.",
    )
    auto_disable_cooldown_seconds: float | None = Field(
        None,
        gt=0,
        description="After this long disabled, one probe run of an auto-disabled job is let "
        "through (success re-enables it); unset: it stays disabled until re-enabled by hand.",
    )
    auto_disable_probe_interval_seconds: float = Field(
        30.0, gt=0, description="How often each server looks for cooled-down disabled jobs."
    )
    lease_seconds: float = Field(
        3.0,
        gt=0,
        description="A server's bucket leases (and its heartbeat) last this long and are renewed "
        "every third of it: a killed server's buckets are taken over within about 4/3 of it.",
    )
    default_max_retries: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _window_outlasts_the_loader(self) -> SchedulerSettings:
        # A job enters the index at the first sync that sees it inside the window: at least
        # window - interval ahead of its due time, late if the window were the shorter.
        if self.hot_window_seconds <= self.loader_interval_seconds:
            raise ValueError(
                "scheduler.hot_window_seconds must be longer than "
                "scheduler.loader_interval_seconds (else a job enters the schedule index "
                "after its due time)"
            )
        return self

    @property
    def auto_disable(self) -> AutoDisableDefaults:
        """The auto-disable defaults as the store and services take them."""
        return AutoDisableDefaults(
            threshold=self.auto_disable_threshold,
            window_seconds=self.auto_disable_window_seconds,
            cooldown_seconds=self.auto_disable_cooldown_seconds,
        )


class TrackerSettings(BaseModel):
    batch_size: int = Field(2000, ge=1)
    max_wait_seconds: float = Field(0.05, gt=0)


DEFAULT_HEALTH_PORT: Final = 8081
"""The port of a `rota worker`'s health endpoint when ROTA_WORKER__HEALTH_PORT is unset."""


def user_state_dir() -> Path | None:
    """``$XDG_STATE_HOME/rota`` (default ``~/.local/state/rota``); ``None`` without a home."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    if base and Path(base).is_absolute():
        return Path(base) / "rota"
    try:
        return Path.home() / ".local" / "state" / "rota"
    except RuntimeError:  # no home directory to be found
        return None


class WorkerSettings(BaseModel):
    group: str = Field(
        "default",
        min_length=1,
        max_length=200,
        description="`rota worker`: the worker group (`--worker-id` wins). Jobs that name no "
        "group run on any live group that runs their type, this one included.",
    )
    concurrency: int = Field(
        32,
        ge=1,
        description="Jobs run at once by a worker: `rota dev`'s embedded worker and each "
        "`rota worker` process (`--concurrency` wins).",
    )
    sync_threads: int = Field(16, ge=1, description="Threads for plain-def handlers.")
    flush_interval_seconds: float = Field(0.02, gt=0, description="Status/log packing interval.")
    heartbeat_seconds: float = Field(
        2.0,
        gt=0,
        description="How often a worker instance refreshes its registration (it expires after "
        "3 missed ones: a killed worker's work gets its next attempt then) and re-reports its "
        "running occurrences.",
    )
    default_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description="Seconds an attempt may run when neither its job nor its job type sets a "
        "timeout; unset: no limit.",
    )
    state_dir: Path | None = Field(
        None,
        description="`rota worker`: directory of the worker's local SQLite state (finalized "
        "attempts, outbox); unset: <data_dir>/workers/<worker id> when ROTA_DATA_DIR is "
        "set, else the user's state directory ($XDG_STATE_HOME, or ~/.local/state)"
        "/rota/workers/<worker id>.",
    )
    finalized_retention_hours: float = Field(
        168.0, gt=0, description="How long finalized attempts are remembered (default 7 days)."
    )
    finalized_max_entries: int = Field(
        1_000_000, ge=1000, description="Most finalized attempts remembered."
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="`rota worker`: serve GET /metrics and GET /health on this port (0: any "
        "free port, logged at start); unset: no endpoint.",
    )
    metrics_host: str = Field(
        "127.0.0.1", description="`rota worker`: the interface of the metrics/health endpoint."
    )
    health: bool = Field(
        True,
        description="`rota worker`: serve GET /health/live and /health/ready (and /health) for "
        "an orchestrator's probes (`--no-health`: off).",
    )
    health_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="`rota worker`: the port of the health endpoint (0: any free port, logged "
        f"at start); unset: {DEFAULT_HEALTH_PORT}, or any free port when that one is taken "
        "(several workers on one host).",
    )
    health_host: str = Field(
        "0.0.0.0",  # probes come from outside the container; it serves health only
        description="`rota worker`: the interface of the health endpoint (it serves only "
        "the health routes: no metrics, no job data).",
    )
    hand_back_after_seconds: float = Field(
        600.0,
        gt=0,
        description="A message received but waiting this long to start goes back to the "
        "broker (keep it below RabbitMQ's consumer_timeout).",
    )
    hold_capacity: int = Field(
        1000,
        ge=0,
        le=60_000,
        description="Messages sent ahead of their due time that a worker may hold on its "
        "timer beyond its concurrency (added to its broker prefetch).",
    )
    claim_ttl_seconds: float = Field(
        10800.0,
        ge=60,
        description="How long the claim of an attempt (one run per attempt across the worker "
        "group) is kept, beyond the attempt's timeout; also how long after a loss of Redis's "
        "data a redelivered message is not run (docs/reliability.md).",
    )
    claim_timeout_seconds: float = Field(
        5.0,
        gt=0,
        description="Longest wait for Redis when claiming an attempt; without an answer a "
        "first delivery runs, a redelivered one is not run (zombie detection retries it).",
    )
    limit_lease_seconds: float = Field(
        15.0,
        gt=0,
        description="How long a slot of a cluster-wide limit stays held without a heartbeat "
        "(renewed at every one): a killed worker's slots are free after this.",
    )
    secrets_dir: Path | None = Field(
        None,
        description="A directory of secret files (Docker or Kubernetes secrets): a secret "
        'reference {"$secret": "NAME"} in job data reads the file NAME there when the '
        "environment variable ROTA_SECRET_NAME is not set; unset: environment only.",
    )

    def state_path(self, data_dir: Path, worker_id: str) -> Path:
        """Where `rota worker --worker-id worker_id` keeps its local state: ``state_dir``,
        else ``<data_dir>/workers/<worker id>`` (see :meth:`Settings.worker_state_path`)."""
        if self.state_dir is not None:
            return self.state_dir
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", worker_id).lstrip(".") or "_"
        return data_dir / "workers" / name


def _days(description: str, default: float) -> Any:
    return Field(default, ge=0, description=f"{description} Days; 0: kept forever.")


class RetentionSettings(BaseModel):
    """How long history is kept (``ROTA_RETENTION__…``); retention deletes in small batches."""

    completed_days: float = _days("Completed occurrences (with history and logs).", 30)
    failed_days: float = _days(
        "Failed and TimedOut occurrences (kept while their dead letter is unresolved).", 90
    )
    cancelled_days: float = _days("Cancelled occurrences.", 30)
    skipped_days: float = _days("Skipped occurrences (misfires, overlaps).", 30)
    logs_days: float = _days("Log lines, of any occurrence, by their timestamp.", 30)
    resolved_dead_letters_days: float = _days(
        "Resolved failed-occurrence records, by resolution time.", 90
    )
    batch_size: int = Field(1000, ge=1, le=50_000, description="Rows per delete statement.")
    interval_seconds: float = Field(
        3600.0, gt=0, description="How often a server runs retention (the owner of bucket 0)."
    )
    enabled: bool = Field(True, description="Run retention periodically in `rota server`.")
    partition_period: Literal["day", "week", "month"] = Field(
        "month",
        description="PostgreSQL: the time range of one partition of occurrences, their "
        "history and log lines (UTC day, ISO week, calendar month).",
    )
    partitions_ahead: int = Field(
        2, ge=1, le=60, description="PostgreSQL: partitions kept ready past the current one."
    )


class SilenceSettings(BaseModel):
    """Silence detection (``ROTA_SILENCE__…``): missed fires and a stalled dispatcher."""

    enabled: bool = Field(True, description="Look for silence in `rota server`/`rota dev`.")
    interval_seconds: float = Field(30.0, gt=0, description="How often each server looks.")
    window_seconds: float = Field(
        900.0, gt=0, description="How far back a cron job's expected fires are checked."
    )
    grace_seconds: float = Field(
        120.0,
        ge=0,
        description="Fires expected more recently than this are not checked yet (keep it "
        "above the misfire threshold and the dispatch delay).",
    )
    dispatcher_stall_seconds: float = Field(
        60.0, gt=0, description="A dispatcher whose loop has not ticked for this long alerts."
    )
    webhook_timeout_seconds: float = Field(5.0, gt=0, description="Per webhook POST.")
    fire_check_enabled: bool = Field(
        True, description="Compare each cron job's expected fires with the recorded ones."
    )
    fire_check_interval_seconds: float = Field(
        1.0, gt=0, description="How often each server compares them (fire_overdue alerts)."
    )
    fire_grace_seconds: float = Field(
        5.0,
        ge=0,
        description="A fire not recorded this long after its due time raises fire_overdue.",
    )
    fire_lookback_seconds: float = Field(
        3600.0, gt=0, description="How far back recorded fires are read."
    )


class NotificationSettings(BaseModel):
    """Notifications to subscriptions (``ROTA_NOTIFICATIONS__…``): delivery and safety (where
    webhooks may go: :class:`rota.core.addresses.AddressPolicy`, as for ``http.request``)."""

    env_prefix: ClassVar[str] = "ROTA_NOTIFICATIONS__"

    enabled: bool = Field(True, description="Deliver notifications from `rota server`/`rota dev`.")
    interval_seconds: float = Field(
        2.0, gt=0, description="How often due deliveries (retries) are looked for."
    )
    max_attempts: int = Field(8, ge=1, le=50, description="Attempts of a delivery at most.")
    backoff_base_seconds: float = Field(
        10.0, gt=0, description="The wait after the first failed attempt; it doubles after each."
    )
    backoff_cap_seconds: float = Field(3600.0, gt=0, description="The longest wait.")
    lease_seconds: float = Field(
        60.0, gt=0, description="A server's claim on a delivery it sends (above the timeouts)."
    )
    batch_size: int = Field(50, ge=1, le=1000, description="Deliveries sent at once.")
    dead_letter_interval_seconds: float = Field(
        30.0, gt=0, description="How often unresolved dead letters are counted."
    )
    keep_finished_days: float = Field(
        7.0, gt=0, description="Finished deliveries are deleted after this long."
    )
    webhook_timeout_seconds: float = Field(
        10.0, gt=0, le=60, description="Per webhook POST (connect, send and answer)."
    )
    max_body_bytes: int = Field(
        64 * 1024, ge=1024, description="The largest webhook body sent (data is cut to fit)."
    )
    allow_networks: Annotated[str, AfterValidator(check_networks)] = Field(
        "",
        description="Comma-separated CIDRs webhooks may reach although not public (e.g. "
        "'10.1.0.0/16'); loopback, private, link-local and other special addresses are "
        "refused unless listed.",
    )
    allow_hosts: str = Field(
        "",
        description="Comma-separated host names webhooks may reach whatever they resolve to "
        "('*.internal.example' for subdomains).",
    )
    allow_public: bool = Field(
        True,
        description="Webhooks may reach public addresses. False: only what allow_networks or "
        "allow_hosts name.",
    )
    deny_networks: Annotated[str, AfterValidator(check_networks)] = Field(
        "", description="Comma-separated CIDRs webhooks never reach (wins over the allow lists)."
    )
    deny_hosts: str = Field(
        "", description="Comma-separated host names webhooks never reach ('*.example' too)."
    )


class AuthSettings(BaseModel):
    previous_secrets: SecretStr | None = Field(
        None,
        description="Comma-separated signing secrets used before ROTA_AUTH_SECRET (a "
        "rotation): tokens and dashboard sessions they signed are still accepted until they "
        "expire; nothing new is signed with them. Each at least 32 bytes.",
    )
    access_token_minutes: float = Field(
        15.0, gt=0, le=15, description="Lifetime of an access token (a JWT), at most 15 minutes."
    )
    refresh_token_days: float = Field(
        14.0, gt=0, description="Lifetime of a refresh token (rotated on every use)."
    )
    max_failed_logins: int = Field(
        5, ge=1, description="Failed logins in a row that lock an account (or a user name)."
    )
    lockout_minutes: float = Field(15.0, gt=0, description="How long a lock lasts.")
    issuer: str = Field("rota", description="The access tokens' iss claim.")
    audience: str = Field("rota-api", description="The access tokens' aud claim.")
    cookie_secure: bool = Field(
        True,
        description="Mark the API's and the dashboard's cookies Secure (HTTPS only); "
        "development turns it off.",
    )
    login_per_client_per_minute: float = Field(
        30.0, gt=0, description="Sign-ins a client address may make per minute (sustained)."
    )
    login_client_burst: int = Field(
        20, ge=1, description="Sign-ins a client address may make at once before the rate applies."
    )
    login_per_second: float = Field(
        5.0,
        gt=0,
        description="Sign-ins per second one server takes from all clients together (keep it "
        "near what its hashing threads check: ~9 a second per thread).",
    )
    login_burst: int = Field(20, ge=1, description="The burst of login_per_second.")
    refresh_per_client_per_minute: float = Field(
        60.0, gt=0, description="Token refreshes a client address may make per minute."
    )
    refresh_client_burst: int = Field(
        30, ge=1, description="Token refreshes a client address may make at once."
    )
    refresh_per_second: float = Field(
        50.0, gt=0, description="Token refreshes per second one server takes from all clients."
    )
    refresh_burst: int = Field(100, ge=1, description="The burst of refresh_per_second.")
    hash_threads: int = Field(
        1,
        ge=1,
        le=64,
        description="Threads that hash and check passwords (argon2id: ~0.1 s of one core and "
        "64 MiB each).",
    )
    hash_queue: int = Field(
        8,
        ge=0,
        description="Password checks that may wait for a hashing thread; more at once are "
        "refused (503 with Retry-After).",
    )


class MetricsSettings(BaseModel):
    """Who may read ``GET /metrics`` (``ROTA_METRICS__…``; docs/operations.md)."""

    token: SecretStr | None = Field(
        None,
        description="GET /metrics needs 'Authorization: Bearer <token>': the server's (on the "
        "API's port or its own) and a worker's. Wins over public.",
    )
    port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="`rota server` / `rota dev`: serve GET /metrics (and GET /health) on this "
        "port of metrics.host instead of the API's (0: any free port, logged at start); open "
        "unless the token is set.",
    )
    host: str = Field(
        "127.0.0.1", description="The interface of that port (0.0.0.0 in a container)."
    )
    public: bool | None = Field(
        None,
        description="GET /metrics on the API's port without a token, to anyone who reaches "
        "it; unset: true in development (rota dev), false otherwise (then it needs the "
        "token, or the port).",
    )


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    trusted_proxies: str = Field(
        "",
        description="Comma-separated addresses or networks (127.0.0.1, 10.0.0.0/8) of the "
        "reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (the "
        "client's address, https); empty: none, '*': any.",
    )
    root_path: str = Field(
        "",
        pattern=r"^(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*$",
        description="`rota server` / `rota dev` behind a reverse proxy that serves Rota under a "
        "path of its own (/rota) and removes it before passing requests on: that path, which "
        "every URL the API and the dashboard hand out then starts with. Empty: the root of "
        "the site.",
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="The older name of metrics.token (ROTA_METRICS__TOKEN), still read when "
        "that is unset.",
    )
    viewer_tracebacks: bool = Field(
        True,
        description="Show Viewers the traceback of an execution's exception (API and "
        "dashboard); false: the exception's message only (Operators and Admins still see "
        "it all).",
    )
    viewer_job_data: bool = Field(
        False,
        description="Show Viewers the job data of jobs, their versions, executions and failed "
        "executions (API and dashboard); false: redacted (jobDataRedacted: true). Operators "
        "and Admins always see it.",
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="Request bodies larger than this are refused (413); a bulk create of "
        "10,000 jobs is a few MiB.",
    )
    max_job_data_bytes: int = Field(
        256 * 1024,
        ge=1,
        description="The largest jobData of a job (create, bulk, update) or a trigger, as "
        "compact UTF-8 JSON; larger is a 422 naming jobData.",
    )
    max_json_depth: int = Field(
        DEFAULT_JSON_DEPTH,
        ge=1,
        le=MAX_JSON_DEPTH,
        description="How deeply free-form JSON may nest (jobData, given as JSON or as a string "
        "holding JSON): deeper is a 422 naming the field. A request body as a whole may nest "
        "4 levels more (its own structure); deeper is a 422 before it is parsed.",
    )
    max_query_bytes: int = Field(
        8 * 1024,
        ge=256,
        description="Query strings longer than this are refused (414).",
    )
    max_header_bytes: int = Field(
        32 * 1024,
        ge=4096,
        description="Requests whose headers together are larger than this are refused (431).",
    )


class EncryptionSettings(BaseModel):
    """Job data and results encrypted at rest (docs/security.md, "Encryption at rest")."""

    keys: SecretStr | None = Field(
        None,
        description="Versioned AES-256 keys, newest first: v2:<base64 of 32 bytes>,v1:<…> or "
        'a JSON object {"v2": "<base64>", …}. The first (or `current`) encrypts, all decrypt. '
        "Unset: nothing is encrypted.",
    )
    current: str | None = Field(
        None,
        description="The key version that encrypts (default: the first of `keys`); `none`: "
        "decrypt only (the first step of turning encryption on or of a rotation).",
    )
    plain_to_workers: bool = Field(
        False,
        description="Send workers the job data in plain text over the broker. Off: the job "
        "message carries the encrypted envelope, and workers need the same keys.",
    )

    def seal(self) -> DataSeal | None:
        """The keys, or ``None`` when none is set. A malformed setting raises
        :class:`~rota.core.sealing.KeySettingError` naming it, never a key (checked when a
        server or worker is built, not here: pydantic's errors show the input)."""
        keys: Any = self.keys
        if keys is None:
            return None
        text = keys.get_secret_value() if isinstance(keys, SecretStr) else str(keys)
        return DataSeal.from_setting(text, self.current)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ROTA_",
        env_nested_delimiter="__",
        toml_file="rota.toml",
        extra="ignore",
    )

    environment: Literal["development", "production", "test"] = "production"
    data_dir: Path = Path(".rota")
    database_url: str | None = Field(
        None, description="postgresql://… or sqlite:///path; unset: SQLite in the data dir."
    )
    redis_url: str | None = Field(None, description="redis://host:6379/0: distributed mode.")
    amqp_url: str | None = Field(None, description="amqp://user:pass@host:5672/vhost.")
    name_prefix: str = Field(
        "rota", pattern=r"^[a-z][a-z0-9_-]*$", description="Prefix of Redis keys and AMQP names."
    )
    startup_wait_seconds: float = Field(
        60.0,
        ge=0,
        description="At start, how long a server or worker waits for PostgreSQL, Redis and "
        "RabbitMQ to answer (retrying, with a message per try) before giving up; 0: no wait.",
    )
    log_format: Literal["json", "text"] | None = Field(
        None,
        description="How log lines are written: json (one object per line) or text (readable "
        "lines); unset: text for rota dev, json for rota server and rota worker. The "
        "--log-format option wins.",
    )
    scheduler: SchedulerSettings = SchedulerSettings()
    tracker: TrackerSettings = TrackerSettings()
    worker: WorkerSettings = WorkerSettings()
    api: ApiSettings = ApiSettings()
    metrics: MetricsSettings = MetricsSettings()
    retention: RetentionSettings = RetentionSettings()
    silence: SilenceSettings = SilenceSettings()
    notifications: NotificationSettings = NotificationSettings()
    alert_webhook_url: WebhookUrl | None = Field(
        None,
        description="POST each new silence alert here as JSON (ROTA_ALERT_WEBHOOK_URL): an "
        "http:// or https:// URL.",
    )
    auth: AuthSettings = AuthSettings()
    encryption: EncryptionSettings = EncryptionSettings()
    auth_secret: SecretStr | None = Field(
        None,
        description="The key that signs access tokens (HS256): at least 32 bytes, the same on "
        "every server. Required outside development; development keeps a generated one in "
        "the data dir.",
    )
    admin_user: str | None = Field(
        None, description="With admin_password: the first Admin, created at start if none exists."
    )
    admin_password: SecretStr | None = Field(None, description="The first Admin's password.")
    # The built-in workers' sections (rota.builtin.config; docs/builtin-workers.md).
    http: HttpSettings = HttpSettings()
    sql: SqlSettings = SqlSettings()
    smtp: SmtpSettings = SmtpSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    def worker_state_path(self, worker_id: str) -> Path:
        """The absolute directory of a `rota worker`'s local state: ``worker.state_dir``;
        else ``<data_dir>/workers/<worker id>`` when ``data_dir`` was set (ROTA_DATA_DIR,
        rota.toml); else under the user's state directory (``$XDG_STATE_HOME``, or
        ``~/.local/state``), ``rota/workers/<worker id>``: not where the process was started
        from."""
        base = self.data_dir
        if self.worker.state_dir is None and "data_dir" not in self.model_fields_set:
            base = user_state_dir() or base
        return self.worker.state_path(base, worker_id).resolve()

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'rota.db').resolve()}"

    @property
    def cookies_secure(self) -> bool:
        """Whether the API's and the dashboard's cookies are marked ``Secure``: the
        ``auth.cookie_secure`` setting, never in development (``rota dev`` serves plain
        HTTP)."""
        return self.auth.cookie_secure and self.environment != "development"

    @property
    def metrics_token(self) -> str | None:
        """The token ``GET /metrics`` needs (``metrics.token``, else the older
        ``api.metrics_token``), or ``None``."""
        token = self.metrics.token or self.api.metrics_token
        return token.get_secret_value() if token is not None else None

    @property
    def metrics_public(self) -> bool:
        """Whether the API's ``GET /metrics`` is open without a token: ``metrics.public``,
        by default only in development."""
        if self.metrics.public is not None:
            return self.metrics.public
        return self.environment == "development"

    @property
    def is_embedded(self) -> bool:
        return not (self.redis_url or self.amqp_url)
