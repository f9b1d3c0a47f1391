"""Rota's REST API (FastAPI), under ``/api/v1``: build it with :func:`rota.api.app.create_app`."""
