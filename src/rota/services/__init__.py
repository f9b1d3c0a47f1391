"""Use cases over the ports: what the API, dashboard, CLI and scheduler loops call."""
