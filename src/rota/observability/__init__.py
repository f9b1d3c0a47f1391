"""Observability: structured logs with context, Prometheus metrics, OpenTelemetry tracing."""
