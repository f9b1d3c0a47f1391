"""The web dashboard: server-rendered pages made live with htmx over the API's event stream."""

from rota.dashboard.app import install_dashboard

__all__ = ["install_dashboard"]
