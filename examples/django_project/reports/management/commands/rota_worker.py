"""``python manage.py rota_worker``: a Rota worker for the project's jobs, with Django set up
(the distributed mode; see ``mysite/scheduler.py``). Stops gracefully on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from mysite.scheduler import scheduler

import rota


class Command(BaseCommand):
    help = "Run a Rota worker for this project's jobs until SIGTERM."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--worker-id", default=None, help="The worker group (default: ROTA_WORKER__GROUP)."
        )
        parser.add_argument("--concurrency", type=int, default=None, help="Jobs run at once.")
        parser.add_argument(
            "--grace", type=float, default=30.0, help="Seconds running jobs get at SIGTERM."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        self.stdout.write("Rota worker: SIGTERM or Ctrl-C stops it")
        try:
            asyncio.run(
                scheduler.run_worker(
                    options["worker_id"],
                    concurrency=options["concurrency"],
                    grace=options["grace"],
                )
            )
        except rota.RotaError as exc:  # a setting missing, a service that does not answer
            raise CommandError(str(exc)) from exc
        self.stdout.write("Rota worker stopped.")
