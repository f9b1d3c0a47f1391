"""The worker's secrets: the values of the secret references in job data
(``{"$secret": "BILLING_TOKEN"}``, :mod:`rota.core.secretrefs`), read when a delivery's data
is parsed for its handler, and masked in everything the worker reports.

A secret ``NAME`` is the environment variable ``ROTA_SECRET_NAME`` of the worker's process,
else the file ``NAME`` in its secrets directory (Docker and Kubernetes secrets are mounted
so; one trailing newline is dropped), read at each use (a rotated file counts at once). No
other environment variable can be read this way: the people who write job data must not
learn the worker's own configuration (its database password, its signing secret).

The values resolved are remembered (the few the worker has) and masked as ``[secret NAME]``
in every status record's result and exception and in every log line it reports, whatever
job they come from: the store, the API and the dead-letter records never get them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from msgspec.structs import replace

from rota.core.errors import ValidationError
from rota.core.models import FailureType, JobMessage, LogRecord, StatusRecord
from rota.core.sealing import is_envelope
from rota.core.secretrefs import Masker, MissingSecretError, resolve
from rota.sdk.context import LogSink
from rota.sdk.registry import AnyJobDefinition
from rota.worker.early import Parsed

__all__ = ["ENV_PREFIX", "MAX_SECRET_BYTES", "WorkerSecrets"]

log = logging.getLogger(__name__)

ENV_PREFIX: Final = "ROTA_SECRET_"
"""The prefix of the environment variables a reference may read."""

MAX_SECRET_BYTES: Final = 64 * 1024
"""A secret file larger than this is refused (not a secret, a mistake)."""

SEALED: Final = (
    "the job data is encrypted (encryption at rest) and this worker cannot open it: give the "
    "worker the servers' ROTA_ENCRYPTION__KEYS, or set ROTA_ENCRYPTION__PLAIN_TO_WORKERS=true "
    "on the servers"
)
"""Why a delivery whose job data is still sealed does not run (the attempt fails for good)."""


class WorkerSecrets:
    """A worker's secrets: ``environ`` (default: the process's) and ``directory`` (none by
    default)."""

    def __init__(
        self, *, environ: Mapping[str, str] | None = None, directory: Path | None = None
    ) -> None:
        self._environ = os.environ if environ is None else environ
        self._directory = directory
        self.masker = Masker()

    def lookup(self, name: str) -> str | None:
        """The secret ``name``'s value, or ``None`` when the worker has none."""
        value = self._environ.get(ENV_PREFIX + name)
        if value is None and self._directory is not None:
            value = self._read(self._directory / name)
        return value

    def _read(self, path: Path) -> str | None:
        try:
            with path.open("rb") as file:
                raw = file.read(MAX_SECRET_BYTES + 1)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            log.warning("secret file %s cannot be read: %s", path.name, exc.strerror)
            return None
        if len(raw) > MAX_SECRET_BYTES:
            log.warning("secret file %s is larger than %d bytes: not used", path, MAX_SECRET_BYTES)
            return None
        text = raw.decode("utf-8", errors="replace")
        if text.endswith("\r\n"):
            return text[:-2]
        return text.removesuffix("\n")

    def parse(self, definition: AnyJobDefinition, message: JobMessage) -> Parsed:
        """The handler's data (its references resolved, then parsed by its job type), or why
        it cannot run: a reference to a secret this worker lacks fails the attempt for good
        (``permanent``), naming the reference, never a value."""
        if not definition.takes_data:
            return definition, None
        if is_envelope(message.job_data):  # sealed, and this worker could not open it
            return None, (FailureType.PERMANENT, SEALED)
        try:
            raw = resolve(message.job_data, self._remembered)
            data = definition.parse_data(raw)
        except MissingSecretError as exc:
            return None, (FailureType.PERMANENT, str(exc))
        except ValidationError as exc:
            return None, (FailureType.INVALID_DATA, self.masker.text(exc.message))
        return definition, data

    def _remembered(self, name: str) -> str | None:
        value = self.lookup(name)
        if value is not None:
            self.masker.add({name: value})
        return value

    def record(self, record: StatusRecord) -> StatusRecord:
        """``record`` with the secrets masked in its result and exception."""
        masker = self.masker
        if not masker.active or (record.result is None and not record.exception):
            return record
        return replace(
            record,
            result=masker.json(record.result),
            exception=None if record.exception is None else masker.text(record.exception),
        )

    def sink(self, sink: LogSink) -> LogSink:
        """A log sink that masks the secrets in each line before ``sink`` gets it."""
        masker = self.masker

        def masked(line: LogRecord) -> None:
            if masker.active:
                line = replace(
                    line,
                    message=masker.text(line.message),
                    data=None if line.data is None else masker.json(dict(line.data)),
                )
            sink(line)

        return masked
