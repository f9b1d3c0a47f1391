"""The project's ASGI application: Django at ``/``, Rota's API and dashboard at ``/rota``,
Rota started and stopped with the server (Django's own ASGI handler has no lifespan: a small
Starlette router holds both and runs Rota's).

    uvicorn mysite.asgi:application
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django_app = get_asgi_application()  # sets Django up before Rota imports the jobs

from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

from mysite.scheduler import scheduler  # noqa: E402

application = Starlette(
    routes=[Mount("/rota", app=scheduler.asgi()), Mount("/", app=django_app)],
    lifespan=scheduler.lifespan,
)
