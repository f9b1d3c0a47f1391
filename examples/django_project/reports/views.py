from __future__ import annotations

from django.http import HttpRequest, JsonResponse


def home(request: HttpRequest) -> JsonResponse:
    """The project's own pages are Django's; Rota's dashboard is at /rota/."""
    return JsonResponse({"app": "django", "scheduler": "/rota/"})
