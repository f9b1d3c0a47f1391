from __future__ import annotations

from django.urls import path
from reports import views

urlpatterns = [path("", views.home)]
