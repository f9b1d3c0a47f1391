"""What every operator must see whatever page they are on: dispatching stopped by an
operator (who, since when, why) and the silence alerts open on any live server (cron jobs
that missed fires, a stalled dispatcher, overdue fires). The dashboard shows it as a banner
on every page, the readiness answer and the overview's health list as warnings; neither
makes a server "unavailable" (a stopped dispatcher is an operator's decision, not a fault)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rota.core.models import DispatcherState
from rota.core.ports import ControlStore
from rota.services.silence import Alert, alert_json, shared_alerts


@dataclass(frozen=True, slots=True)
class OpenAlert:
    kind: str
    message: str
    raised_at: str
    """ISO 8601, as the raising server wrote it."""
    instance_id: str


@dataclass(frozen=True, slots=True)
class Attention:
    dispatcher: DispatcherState
    alerts: tuple[OpenAlert, ...]
    """Newest first."""

    @property
    def dispatching_stopped(self) -> bool:
        return self.dispatcher.paused

    def warnings(self) -> dict[str, str]:
        """Name -> what needs attention (empty: nothing)."""
        out: dict[str, str] = {}
        state = self.dispatcher
        if state.paused:
            since = "" if state.changed_at is None else f" since {_utc(state.changed_at)}"
            by = f" by {state.by}" if state.by else ""
            out["dispatching"] = f"stopped{by}{since}: {state.reason or 'no reason given'}"
        if self.alerts:
            n = len(self.alerts)
            more = f" (+{n - 1} more)" if n > 1 else ""
            out["silence"] = f"{n} open alert{'s' if n > 1 else ''}: {self.alerts[0].message}{more}"
        return out


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def open_alerts(
    own: Sequence[Alert], others: Mapping[str, Mapping[str, str]]
) -> tuple[OpenAlert, ...]:
    """This server's active alerts and those the other live servers publish, newest first
    (one alert raised by several servers counts once per server)."""
    found: list[dict[str, Any]] = [alert_json(a) for a in own] + shared_alerts(others)
    alerts = [
        OpenAlert(
            kind=str(a.get("kind", "")),
            message=str(a.get("message", "")),
            raised_at=str(a.get("raisedAt", "")),
            instance_id=str(a.get("instanceId", "")),
        )
        for a in found
        if a.get("resolvedAt") is None and a.get("message")
    ]
    alerts.sort(key=lambda a: a.raised_at, reverse=True)
    return tuple(alerts)


async def read_attention(
    store: ControlStore,
    *,
    own_alerts: Sequence[Alert] = (),
    others: Mapping[str, Mapping[str, str]] | None = None,
) -> Attention:
    """What needs attention now: the stored dispatcher switch and the open alerts."""
    state = await store.dispatcher_state()
    return Attention(dispatcher=state, alerts=open_alerts(own_alerts, others or {}))
