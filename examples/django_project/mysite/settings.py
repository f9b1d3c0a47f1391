"""A minimal Django project with Rota inside (see ``asgi.py`` and ``scheduler.py``)."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "only-for-the-example-change-me")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = ["reports"]  # its management command: python manage.py rota_worker
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "mysite.urls"
ASGI_APPLICATION = "mysite.asgi.application"
DATABASES: dict[str, dict[str, object]] = {}  # this example keeps nothing in Django's models
USE_TZ = True

REPORT_TITLE = "Weekly numbers"
"""A setting of the project, read by a job (``reports/jobs.py``): jobs run with Django set up."""
