"""The operator's commands over the REST API (``login``, ``jobs``, ``runs``, ``failed``,
``workers``, ``cron preview``, ``limits``, ``graph-runs``, ``keys``, ``dispatch``, ``audit``,
``notifications``, ``users``; docs/cli.md). They talk to a server only through
:class:`rota.client.SyncClient`: no settings, service or store is imported here."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the operator's commands to the ``rota`` command."""
    from rota.cli.ops import (
        account,
        audit,
        dispatch,
        failed,
        graphs,
        jobs,
        keys,
        limits,
        misc,
        notifications,
        runs,
        users,
    )

    app.command("login")(account.login)
    app.command("logout")(account.logout)
    app.command("whoami")(account.whoami)
    app.add_typer(jobs.app, name="jobs")
    app.add_typer(runs.app, name="runs")
    app.add_typer(failed.app, name="failed")
    app.add_typer(limits.app, name="limits")
    app.add_typer(graphs.app, name="graph-runs")
    app.add_typer(keys.app, name="keys")
    app.command("workers")(misc.workers)
    app.add_typer(misc.cron_app, name="cron")
    app.add_typer(dispatch.app, name="dispatch")
    app.command("audit")(audit.audit)
    app.add_typer(notifications.app, name="notifications")
    app.add_typer(users.app, name="users")
