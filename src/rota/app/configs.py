"""Settings -> each service's own frozen config: services never read :mod:`rota.app.settings`;
the composition root (:mod:`rota.app.wiring`, and ``rota maintenance``) translates here."""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Final

from rota.app.settings import (
    NotificationSettings,
    RetentionSettings,
    SchedulerSettings,
    Settings,
    SilenceSettings,
)
from rota.core.errors import ConfigurationError
from rota.core.models import OccurrenceStatus
from rota.core.planning import PlanSettings
from rota.core.security import MIN_SECRET_BYTES, secret_weakness
from rota.services.auth import AuthConfig
from rota.services.dependencies import DependencyConfig
from rota.services.dispatcher import DispatcherConfig
from rota.services.jobs import JobsConfig
from rota.services.maintenance import RetentionPolicy
from rota.services.missed import FireWatchConfig
from rota.services.notifications import NotificationConfig
from rota.services.ratelimit import Rate
from rota.services.silence import SilenceConfig
from rota.stores.files import PRIVATE_FILE, private_dir

S = OccurrenceStatus


def plan_settings(settings: SchedulerSettings) -> PlanSettings:
    return PlanSettings(
        misfire_threshold=timedelta(seconds=settings.misfire_threshold_seconds),
        catch_up_cap=settings.catch_up_cap,
        max_recorded_misses=settings.max_recorded_misses,
        default_max_retries=settings.default_max_retries,
    )


def dispatcher_config(settings: SchedulerSettings) -> DispatcherConfig:
    return DispatcherConfig(
        plan=plan_settings(settings),
        dispatch_batch_size=settings.dispatch_batch_size,
        sweeper_interval_seconds=settings.sweeper_interval_seconds,
        sweeper_claim_seconds=settings.sweeper_claim_seconds,
        hot_window_seconds=settings.hot_window_seconds,
        dispatch_lead_seconds=settings.dispatch_lead_seconds,
    )


def jobs_config(settings: SchedulerSettings) -> JobsConfig:
    return JobsConfig(
        plan=plan_settings(settings),
        bucket_count=settings.bucket_count,
        hot_window_seconds=settings.hot_window_seconds,
        auto_disable=settings.auto_disable,
    )


def dependency_config(
    settings: SchedulerSettings, retention: RetentionSettings | None = None
) -> DependencyConfig:
    """A finished graph run is kept as long as the occurrences it links (the longest of
    their retentions; for good when retention is off or any of them keeps them for good)."""
    keep: float | None = None
    if retention is not None and retention.enabled:
        days = (
            retention.completed_days,
            retention.failed_days,
            retention.cancelled_days,
            retention.skipped_days,
        )
        keep = None if min(days) <= 0 else max(days) * 86400
    return DependencyConfig(
        sweep_interval_seconds=settings.sweeper_interval_seconds,
        plan=plan_settings(settings),
        keep_finished_seconds=keep,
        purge_interval_seconds=retention.interval_seconds if retention else 3600.0,
    )


def retention_policy(settings: RetentionSettings) -> RetentionPolicy:
    def keep(days: float) -> timedelta | None:
        return timedelta(days=days) if days > 0 else None

    failed = keep(settings.failed_days)
    return RetentionPolicy(
        occurrences={
            S.COMPLETED: keep(settings.completed_days),
            S.FAILED: failed,
            S.TIMED_OUT: failed,
            S.CANCELLED: keep(settings.cancelled_days),
            S.SKIPPED: keep(settings.skipped_days),
        },
        logs=keep(settings.logs_days),
        resolved_dead_letters=keep(settings.resolved_dead_letters_days),
        batch_size=settings.batch_size,
        partition_period=settings.partition_period,
        partitions_ahead=settings.partitions_ahead,
    )


def silence_config(settings: SilenceSettings) -> SilenceConfig:
    return SilenceConfig(
        interval_seconds=settings.interval_seconds,
        window_seconds=settings.window_seconds,
        grace_seconds=settings.grace_seconds,
        stall_seconds=settings.dispatcher_stall_seconds,
    )


def notification_config(settings: NotificationSettings) -> NotificationConfig:
    return NotificationConfig(
        interval_seconds=settings.interval_seconds,
        lease_seconds=settings.lease_seconds,
        batch_size=settings.batch_size,
        max_attempts=settings.max_attempts,
        backoff_base_seconds=settings.backoff_base_seconds,
        backoff_cap_seconds=settings.backoff_cap_seconds,
        dead_letter_interval_seconds=settings.dead_letter_interval_seconds,
        keep_finished_seconds=settings.keep_finished_days * 86400,
    )


def fire_watch_config(settings: SilenceSettings) -> FireWatchConfig:
    return FireWatchConfig(
        interval_seconds=settings.fire_check_interval_seconds,
        grace_seconds=settings.fire_grace_seconds,
        lookback_seconds=settings.fire_lookback_seconds,
    )


SECRET_FILE = "auth-secret"


GENERATE_SECRET: Final = "python -c 'import secrets; print(secrets.token_urlsafe(48))'"


def auth_secret(settings: Settings) -> bytes:
    """The key that signs access tokens: ROTA_AUTH_SECRET (at least 32 bytes; in production
    also not guessable: see :func:`rota.core.security.secret_weakness`). Outside development
    and test it is required; there a generated one is kept in the data dir (``auth-secret``,
    readable by the owner only), so tokens survive restarts."""
    if settings.auth_secret is not None:
        secret = settings.auth_secret.get_secret_value().encode()
        # Development and tests: the length only (their secrets are often fixed strings).
        production = settings.environment == "production"
        weakness = secret_weakness(secret, length_only=not production)
        if weakness is not None:
            raise ConfigurationError(
                f"ROTA_AUTH_SECRET is too weak to sign tokens: {weakness}. Set it to at least "
                f"{MIN_SECRET_BYTES} random bytes, the same on every server, e.g. the output "
                f"of {GENERATE_SECRET} or openssl rand -base64 48"
            )
        return secret
    if settings.environment == "production":
        raise ConfigurationError(
            "ROTA_AUTH_SECRET is not set: outside development it must be set to a random "
            f"secret of at least {MIN_SECRET_BYTES} bytes, the same on every server (e.g. "
            f"{GENERATE_SECRET})"
        )
    return _secret_file(settings.data_dir / SECRET_FILE)


def previous_secrets(settings: Settings) -> tuple[bytes, ...]:
    """ROTA_AUTH__PREVIOUS_SECRETS: the secrets that signed before the current one
    (comma-separated), accepted for verification only; each at least 32 bytes."""
    value = settings.auth.previous_secrets
    if value is None:
        return ()
    found = tuple(p.strip().encode() for p in value.get_secret_value().split(",") if p.strip())
    for number, secret in enumerate(found, 1):
        if len(secret) < MIN_SECRET_BYTES:
            raise ConfigurationError(
                f"ROTA_AUTH__PREVIOUS_SECRETS: secret {number} has {len(secret)} bytes; each "
                f"must have at least {MIN_SECRET_BYTES} (like ROTA_AUTH_SECRET)"
            )
    return found


def _secret_file(path: Path) -> bytes:
    try:
        secret = path.read_bytes().strip()
    except FileNotFoundError:
        secret = b""
    if len(secret) >= MIN_SECRET_BYTES:
        return secret
    private_dir(path.parent)
    secret = secrets.token_urlsafe(48).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "wb") as file:
        file.write(secret + b"\n")
    return secret


def auth_config(settings: Settings) -> AuthConfig:
    """The token and lockout settings with the secret (``ConfigurationError`` without one)."""
    auth = settings.auth
    return AuthConfig(
        secret=auth_secret(settings),
        previous_secrets=previous_secrets(settings),
        access_ttl=timedelta(minutes=auth.access_token_minutes),
        refresh_ttl=timedelta(days=auth.refresh_token_days),
        max_failed_logins=auth.max_failed_logins,
        lockout=timedelta(minutes=auth.lockout_minutes),
        issuer=auth.issuer,
        audience=auth.audience,
        login_per_client=Rate(auth.login_per_client_per_minute / 60, auth.login_client_burst),
        login_overall=Rate(auth.login_per_second, auth.login_burst),
        refresh_per_client=Rate(auth.refresh_per_client_per_minute / 60, auth.refresh_client_burst),
        refresh_overall=Rate(auth.refresh_per_second, auth.refresh_burst),
        hash_threads=auth.hash_threads,
        hash_queue=auth.hash_queue,
    )
