"""The project's one Rota: served by ``asgi.py``, its worker run by ``manage.py rota_worker``.

Its settings come from the environment (``ROTA_…``) and ``rota.toml``, as for ``rota server``.
This example runs the distributed mode: ``ROTA_DATABASE_URL`` (PostgreSQL), ``ROTA_REDIS_URL``
and ``ROTA_AMQP_URL``; the web process schedules and serves the dashboard, the worker process
runs the jobs. Without Redis and RabbitMQ (the embedded mode), the jobs run inside the web
process and ``rota_worker`` is not needed.
"""

from __future__ import annotations

import rota

scheduler = rota.Rota(jobs=["reports.jobs"])
