"""Rota inside a FastAPI app.

The app's lifespan starts and stops Rota; the REST API and the dashboard are served under
``/rota``. Without ``ROTA_REDIS_URL`` / ``ROTA_AMQP_URL`` Rota runs embedded: SQLite in
``ROTA_DATA_DIR`` and the jobs of ``jobs.py`` run in this process.

    cd examples/fastapi_app
    export ROTA_ENVIRONMENT=development ROTA_ADMIN_USER=admin
    export ROTA_ADMIN_PASSWORD='choose-a-long-password'
    uvicorn app:app

The app answers at http://127.0.0.1:8000/, Rota's dashboard at http://127.0.0.1:8000/rota/
and its API at http://127.0.0.1:8000/rota/api/v1 (docs: /rota/docs).
"""

from __future__ import annotations

from fastapi import FastAPI

import rota

# Settings from the environment (ROTA_…) and rota.toml, as for `rota server`.
scheduler = rota.Rota(jobs=["jobs"])

app = FastAPI(title="My app", lifespan=scheduler.lifespan)
app.mount("/rota", scheduler.asgi())


@app.get("/")
async def home() -> dict[str, str]:
    """The app's own routes are untouched by Rota."""
    return {"app": "my app", "scheduler": "/rota/"}
