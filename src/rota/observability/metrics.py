"""Prometheus metrics: every ``rota_*`` metric, defined here and nowhere else.

A :class:`RotaMetrics` is built per :class:`~prometheus_client.CollectorRegistry` by a
composition root (:mod:`rota.app`) and handed to what records
into it; nothing uses the library's global default registry.

Recording stays off the hot path: counters move once per batch (a dispatch batch, a status
batch), never per message under a lock; values that services already count (late reports,
zombies, duplicate deliveries, the outbox) are read when Prometheus scrapes, through the
callables a composition root registers with :meth:`RotaMetrics.watch`. The two histograms
are :class:`LoopHistogram`\\ s: plain counts updated from the event loop's thread, no lock.
The names, labels and meaning of each metric are listed in ``docs/operations.md``.
"""

from __future__ import annotations

import bisect
import hmac
import math
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from rota.core.models import Occurrence, OccurrenceStatus
from rota.core.records import DispatchResult, StatusResult

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def scrape_allowed(authorization: str | None, token: str | None) -> bool:
    """Whether a scrape may read the metrics: always when no token is set (``None``), else
    only with ``Authorization: Bearer <token>`` (compared in constant time)."""
    if token is None:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


"""The Prometheus text exposition format's media type."""

LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
)  # fmt: skip

S = OccurrenceStatus

_FINAL_EVENTS: Mapping[OccurrenceStatus, str] = {
    S.COMPLETED: "completed",
    S.FAILED: "failed",
    S.CANCELLED: "cancelled",
    S.TIMED_OUT: "timed_out",
}
_RAN = frozenset({S.COMPLETED, S.FAILED, S.TIMED_OUT})
"""Final statuses a worker reports after running the handler (Running may have been folded
into the same flush and never sent alone)."""


def _events_of(before: OccurrenceStatus, after: OccurrenceStatus) -> tuple[str, ...]:
    """The counters one applied change moves. A worker may fold an attempt's Running into
    the flush of its final report, so Queued -> final (or -> Queued: a failed attempt
    with a retry) also counts as a start."""
    name = _FINAL_EVENTS.get(after)
    if name is not None:
        return (name, "started") if after in _RAN and before is S.QUEUED else (name,)
    if after is S.RUNNING:
        return ("started",)
    if after is S.QUEUED:
        return ("retried", "started") if before is S.QUEUED else ("retried",)
    if after is S.UNKNOWN:
        return ("unknown",)
    return ()


class LoopHistogram:
    """A histogram with an optional single label, updated without a lock.

    Only the event loop's thread observes and collects (the ``/metrics`` routes run in the
    loop), so plain integers suffice; a batch costs one bisect per value.
    """

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float], label: str | None = None
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self._bounds = tuple(buckets)
        self._series: dict[str, _Series] = {}

    def _series_of(self, label_value: str) -> _Series:
        series = self._series.get(label_value)
        if series is None:
            series = self._series[label_value] = _Series([0] * (len(self._bounds) + 1))
        return series

    def observe(self, value: float, label_value: str = "") -> None:
        series = self._series_of(label_value)
        series.counts[bisect.bisect_left(self._bounds, value)] += 1
        series.total += value

    def observe_many(self, values: Iterable[float], label_value: str = "") -> None:
        """:meth:`observe` of each value (a batch's: one look-up of the series)."""
        series = self._series_of(label_value)
        counts, bounds, where = series.counts, self._bounds, bisect.bisect_left
        total = 0.0
        for value in values:
            counts[where(bounds, value)] += 1
            total += value
        series.total += total

    def count(self, label_value: str = "") -> int:
        """Observations so far (of one label value)."""
        series = self._series.get(label_value)
        return 0 if series is None else sum(series.counts)

    def family(self) -> HistogramMetricFamily:
        labels = [self.label] if self.label else None
        family = HistogramMetricFamily(self.name, self.documentation, labels=labels)
        bounds = [*(_fmt(b) for b in self._bounds), "+Inf"]
        for label_value, series in sorted(self._series.items()):
            cumulative, running = [], 0
            for bound, count in zip(bounds, series.counts, strict=True):
                running += count
                cumulative.append((bound, float(running)))
            family.add_metric([label_value] if self.label else [], cumulative, series.total)
        return family


@dataclass(slots=True)
class _Series:
    counts: list[int]
    total: float = 0.0


def _fmt(bound: float) -> str:
    return repr(float(bound)) if math.isfinite(bound) else "+Inf"


@dataclass(slots=True)
class Watched:
    """Values read at scrape time (each callable is cheap and synchronous); ``None``: this
    process does not have it (a worker has no dispatcher)."""

    zombies: Callable[[], Mapping[str, int]] | None = None
    leases_held: Callable[[], int] | None = None
    leases_taken_over: Callable[[], int] | None = None
    dispatcher_last_tick: Callable[[], float] | None = None
    dispatcher_paused: Callable[[], bool] | None = None
    fires_overdue: Callable[[], int] | None = None
    """Jobs whose due fire is not recorded within the grace, at the last missed-fire check."""
    duplicate_deliveries: Callable[[], int] | None = None
    claimed_elsewhere: Callable[[], int] | None = None
    outbox_pending: Callable[[], int] | None = None
    jobs_running: Callable[[], int] | None = None
    limit_waiting: Callable[[], int] | None = None
    """Deliveries this worker holds back for a cluster-wide limit."""
    events: Callable[[], tuple[int, int]] | None = None
    """Change events published to the feed and dropped (buffer full, publish failed)."""
    broker_messages: Callable[[], Mapping[str, int]] | None = None
    """The broker's job messages and jobs, published and delivered (``Broker.message_counts``)."""


class RotaMetrics:
    """Every Rota metric of one process, registered on ``registry``.

    ``server=False`` (a ``rota worker`` process) leaves out what only a server moves (the
    occurrence counters, dispatch lateness, queue depths, alerts, retention): a worker
    exposes its job durations, duplicate deliveries, outbox and running handlers.
    """

    def __init__(self, registry: CollectorRegistry, *, server: bool = True) -> None:
        self.registry = registry
        self.server = server
        r = registry if server else None
        self.created = Counter(
            "rota_occurrences_created", "Occurrences created, by source (schedule or manual).",
            ["source"], registry=r,
        )  # fmt: skip
        by_type = ["job_type"]
        self.started = Counter(
            "rota_occurrences_started",
            "Occurrences (attempts) that started running, by job type.",
            by_type,
            registry=r,
        )
        self.completed = Counter(
            "rota_occurrences_completed", "Occurrences Completed, by job type.", by_type,
            registry=r,
        )  # fmt: skip
        self.failed = Counter(
            "rota_occurrences_failed",
            "Occurrences Failed for good (no retry left), by job type.",
            by_type,
            registry=r,
        )
        self.retried = Counter(
            "rota_occurrences_retried",
            "Occurrences put back to Queued for a new attempt (retry or zombie requeue), by "
            "job type.",
            by_type,
            registry=r,
        )
        self.cancelled = Counter(
            "rota_occurrences_cancelled", "Occurrences Cancelled, by job type.", by_type,
            registry=r,
        )  # fmt: skip
        self.timed_out = Counter(
            "rota_occurrences_timed_out", "Occurrences TimedOut, by job type.", by_type,
            registry=r,
        )  # fmt: skip
        self.unknown = Counter(
            "rota_occurrences_unknown", "Occurrences declared Unknown (zombies), by job type.",
            by_type, registry=r,
        )  # fmt: skip
        self.skipped = Counter(
            "rota_occurrences_skipped", "Fires recorded Skipped, by reason.", ["reason"], registry=r
        )
        self.late_reports = Counter(
            "rota_late_reports_ignored",
            "Status reports of a superseded attempt, ignored (never applied).",
            registry=r,
        )
        self.ignored = Counter(
            "rota_status_reports_ignored",
            "Status reports not applied, by reason (late, transition, unknown).",
            ["reason"],
            registry=r,
        )
        self.auto_disables = Counter(
            "rota_auto_disables", "Jobs disabled by their consecutive failures.", registry=r
        )
        self.silence_alerts = Counter(
            "rota_silence_alerts",
            "Silence alerts raised: a job with no occurrence where its cron expected one "
            "(kind=missed_fire), a fire not recorded within seconds of its due time "
            "(kind=fire_overdue) or a dispatcher that stopped ticking (kind=dispatcher_stalled).",
            ["kind"],
            registry=r,
        )
        self.silence_active = Gauge(
            "rota_silence_alerts_active", "Silence alerts open right now, by kind.", ["kind"],
            registry=r,
        )  # fmt: skip
        self.dead_letters_unresolved = Gauge(
            "rota_dead_letters_unresolved",
            "Failed-occurrence records (dead letters) not resolved, as last counted.",
            registry=r,
        )
        self.notifications = Counter(
            "rota_notifications",
            "Notification delivery attempts, by channel (webhook, email) and outcome "
            "(delivered, retried, failed: given up).",
            ["channel", "outcome"],
            registry=r,
        )
        self.maintenance_deleted = Counter(
            "rota_maintenance_deleted_rows",
            "Rows deleted by retention, by kind (occurrences, logs, dead_letters).",
            ["kind"],
            registry=r,
        )
        self.maintenance_runs = Counter(
            "rota_maintenance_runs", "Retention runs this process made.", registry=r
        )
        self.queue_depth = Gauge(
            "rota_queue_depth", "Messages ready in a broker queue.", ["queue"], registry=r
        )
        self.workers_online = Gauge(
            "rota_workers_online", "Live worker instances, by worker group.", ["worker_id"],
            registry=r,
        )  # fmt: skip
        self.lateness = LoopHistogram(
            "rota_dispatch_lateness_seconds",
            "Seconds between an occurrence's scheduled time and its dispatch.",
            LATENESS_BUCKETS,
        )
        self.job_duration = LoopHistogram(
            "rota_job_duration_seconds",
            "Handler run time of finished attempts, by job type (measured by the worker).",
            DURATION_BUCKETS,
            label="job_type",
        )
        self._events: dict[str, Counter] = {
            "started": self.started,
            "completed": self.completed,
            "failed": self.failed,
            "retried": self.retried,
            "cancelled": self.cancelled,
            "timed_out": self.timed_out,
            "unknown": self.unknown,
        }
        self.watched = Watched()
        registry.register(_Collector(self))

    # --- recording (once per batch) -------------------------------------------------------

    def record_dispatch(self, result: DispatchResult, now: datetime) -> None:
        """A dispatch batch: occurrences created, skipped by reason, lateness of the queued."""
        created = len(result.queued) + len(result.held) + len(result.skipped)
        if created:
            self.created.labels("schedule").inc(created)
        if result.skipped:
            for reason, n in Tally(o.skip_reason or "unknown" for o in result.skipped).items():
                self.skipped.labels(reason).inc(n)
        if result.queued:
            self.lateness.observe_many(
                max(0.0, (now - o.scheduled_for).total_seconds()) for o in result.queued
            )

    def record_trigger(self, occurrence: Occurrence) -> None:
        del occurrence
        self.created.labels("manual").inc()

    def record_status(self, result: StatusResult) -> None:
        """A batch of applied status changes (tracker, zombie detector, dead letters)."""
        if result.ignored:
            reasons = Tally(i.reason for i in result.ignored)
            for reason, n in reasons.items():
                self.ignored.labels(reason).inc(n)
            if reasons.get("late"):
                self.late_reports.inc(reasons["late"])
        if not result.applied and not result.disabled:
            return
        pairs: dict[tuple[OccurrenceStatus, OccurrenceStatus, str], int] = {}
        for change in result.applied:  # the only per-record work: one dict update
            key = (change.from_status, change.to_status, change.job_type)
            pairs[key] = pairs.get(key, 0) + 1
        events: dict[tuple[str, str], int] = {}
        for (before, after, job_type), n in pairs.items():
            for name in _events_of(before, after):
                events[name, job_type] = events.get((name, job_type), 0) + n
        for (name, job_type), n in events.items():
            self._events[name].labels(job_type).inc(n)
        if result.disabled:
            self.auto_disables.inc(len(result.disabled))

    def record_finished(self, job_type: str, duration_ms: float | None) -> None:
        """A worker finished an attempt of ``job_type`` after ``duration_ms``."""
        if duration_ms is not None:
            self.job_duration.observe(duration_ms / 1000.0, job_type)

    def record_notification(self, channel: str, outcome: str) -> None:
        """A notification attempt ended: ``delivered``, ``retried`` or ``failed``."""
        self.notifications.labels(channel, outcome).inc()

    def record_deleted(self, kind: str, rows: int) -> None:
        """Retention deleted ``rows`` of ``kind`` (one step)."""
        self.maintenance_deleted.labels(kind).inc(rows)

    def set_queue_depths(self, depths: Mapping[str, int]) -> None:
        self.queue_depth.clear()
        for name, depth in depths.items():
            self.queue_depth.labels(name).set(depth)

    def set_workers(self, groups: Mapping[str, int]) -> None:
        self.workers_online.clear()
        for group, n in groups.items():
            self.workers_online.labels(group).set(n)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


def _worker_gauges(w: Watched) -> Iterator[GaugeMetricFamily]:
    if w.jobs_running is not None:
        yield _gauge("rota_jobs_running", "Handlers running now.", w.jobs_running())
    if w.limit_waiting is not None:
        yield _gauge(
            "rota_limit_waiting",
            "Occurrences this worker received and holds back for a cluster-wide limit.",
            w.limit_waiting(),
        )


def _broker_counters(counts: Mapping[str, int]) -> Iterator[CounterMetricFamily]:
    """Messages per job, readable: AMQP messages of jobs (a job alone or an envelope) and the
    jobs they carried, published and delivered by this process."""
    if not counts:
        return
    messages = CounterMetricFamily(
        "rota_broker_job_messages",
        "Broker messages of jobs (one job, or an envelope of several), by direction.",
        labels=["direction"],
    )
    jobs = CounterMetricFamily(
        "rota_broker_jobs", "Jobs carried by those messages, by direction.", labels=["direction"]
    )
    for direction in ("published", "delivered"):
        messages.add_metric([direction], counts.get(f"{direction}_messages", 0))
        jobs.add_metric([direction], counts.get(f"{direction}_jobs", 0))
    yield messages
    yield jobs


class _Collector(Collector):
    """The values read at scrape time, and the lock-free histograms."""

    def __init__(self, metrics: RotaMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        m = self._metrics
        w = m.watched
        if m.server:
            yield m.lateness.family()
        yield m.job_duration.family()
        if w.zombies is not None:
            family = CounterMetricFamily(
                "rota_zombies_detected",
                "Occurrences found without a sign of life, by action (requeued, failed).",
                labels=["action"],
            )
            for action, n in sorted(w.zombies().items()):
                family.add_metric([action], n)
            yield family
        if w.broker_messages is not None:
            yield from _broker_counters(w.broker_messages())
        if w.leases_held is not None:
            yield _gauge("rota_leases_held", "Bucket leases this server holds.", w.leases_held())
        if w.leases_taken_over is not None:
            yield _counter(
                "rota_leases_taken_over",
                "Buckets this server took over after it had started (from a lost or stopped "
                "instance).",
                w.leases_taken_over(),
            )
        if w.dispatcher_last_tick is not None:
            yield _gauge(
                "rota_dispatcher_last_tick_timestamp_seconds",
                "Unix time of the dispatcher loop's last iteration.",
                w.dispatcher_last_tick(),
            )
        if w.dispatcher_paused is not None:
            yield _gauge(
                "rota_dispatcher_paused", "1 while the dispatcher is paused.",
                float(w.dispatcher_paused()),
            )  # fmt: skip
        if w.fires_overdue is not None:
            yield _gauge(
                "rota_fires_overdue",
                "Cron jobs of this server whose due fire is not recorded within the grace "
                "(ROTA_SILENCE__FIRE_GRACE_SECONDS), at the last missed-fire check.",
                w.fires_overdue(),
            )
        yield from _skipped_deliveries(w)
        if w.outbox_pending is not None:
            yield _gauge(
                "rota_outbox_pending",
                "Messages waiting in the worker's local outbox (the broker was unreachable).",
                w.outbox_pending(),
            )
        yield from _worker_gauges(w)
        if w.events is not None:
            published, dropped = w.events()
            yield _counter(
                "rota_events_published", "Change events published to the feed.", published
            )
            yield _counter(
                "rota_events_dropped",
                "Change events lost (the publisher's buffer was full, or a publish failed).",
                dropped,
            )


def _skipped_deliveries(w: Watched) -> Iterator[CounterMetricFamily]:
    """A worker's deliveries acknowledged without running."""
    if w.duplicate_deliveries is not None:
        yield _counter(
            "rota_duplicate_deliveries",
            "Job deliveries of an attempt already finished by this worker: acknowledged, not run.",
            w.duplicate_deliveries(),
        )
    if w.claimed_elsewhere is not None:
        yield _counter(
            "rota_deliveries_claimed_elsewhere",
            "Job deliveries of an attempt claimed by another instance of the worker group "
            "(or, for a redelivered message, whose claim could not be known): acknowledged, "
            "not run.",
            w.claimed_elsewhere(),
        )


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


__all__ = ("CONTENT_TYPE", "LoopHistogram", "RotaMetrics", "Watched")
