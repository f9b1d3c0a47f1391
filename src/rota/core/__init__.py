"""Rota's domain: models, statuses and transitions, cron, planning, errors and ports. No I/O."""
