"""Job data and results sealed at rest (``ROTA_ENCRYPTION__KEYS``): the store seals them as it
writes and opens them as it reads, so everything above the store sees plain values.

What is sealed: a job's ``job_data`` (and the ``jobData`` of its versions' snapshots, its
occurrences' ``job_data``: all bound to the job's id), an occurrence's ``result`` (bound to
the occurrence's id), a failed occurrence's ``job_data`` (its job's, or the record's own id
when it names no job). With no keys (``_seal`` is ``None``) every step is one test of
``None``; values are read as stored.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any
from uuid import UUID

from rota.core.models import FailedOccurrence, Job, JsonValue, Occurrence
from rota.core.sealing import (
    DataSeal,
    SealError,
    failed_data_aad,
    is_envelope,
    job_data_aad,
    result_aad,
)

_log = logging.getLogger(__name__)


def _failed_aad(job_id: UUID | None, failed_id: UUID) -> bytes:
    """A failed occurrence's job data is its job's (bound to the job, so the final-failure
    record copies the occurrence's envelope as it is); a poison message's, to the record."""
    return failed_data_aad(failed_id) if job_id is None else job_data_aad(job_id)


class Sealing:
    """What the query mixins use to seal and open (a base of ``SqlParts``)."""

    _seal: DataSeal | None = None

    def _opened(self, value: JsonValue, aad: bytes) -> JsonValue:
        """An envelope's plain value; an envelope that does not open is returned as it is
        (logged), so a read never fails on it."""
        seal = self._seal
        if seal is None or not is_envelope(value):
            return value
        try:
            return seal.open(value, aad)
        except SealError as exc:
            _log.warning("a sealed value could not be opened: %s", exc)
            return value

    def _open_job(self, job: Job) -> Job:
        if self._seal is None or not is_envelope(job.job_data):
            return job
        return replace(job, job_data=self._opened(job.job_data, job_data_aad(job.id)))

    def _open_occurrence(self, occ: Occurrence) -> Occurrence:
        if self._seal is None or not (is_envelope(occ.job_data) or is_envelope(occ.result)):
            return occ
        return replace(
            occ,
            job_data=self._opened(occ.job_data, job_data_aad(occ.job_id)),
            result=self._opened(occ.result, result_aad(occ.id)),
        )

    def _open_failed(self, record: FailedOccurrence) -> FailedOccurrence:
        if self._seal is None or not is_envelope(record.job_data):
            return record
        aad = _failed_aad(record.job_id, record.id)
        return replace(record, job_data=self._opened(record.job_data, aad))

    def _open_snapshot(self, job_id: UUID, version: int, snapshot: Any) -> Any:
        if self._seal is None or not isinstance(snapshot, dict):
            return snapshot
        data = snapshot.get("jobData")
        if not is_envelope(data):
            return snapshot
        return {**snapshot, "jobData": self._opened(data, job_data_aad(job_id))}

    # --- writes ---------------------------------------------------------------------------

    def _sealed_job_data(self, job_id: UUID, value: JsonValue) -> JsonValue:
        seal = self._seal
        return value if seal is None else seal.seal(value, job_data_aad(job_id))

    def _sealed_result(self, occurrence_id: UUID, value: JsonValue) -> JsonValue:
        """A result sealed; one a worker sealed already (an envelope) is kept as it came."""
        seal = self._seal
        return value if seal is None else seal.seal(value, result_aad(occurrence_id))

    def _seal_failed_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A failed occurrence's row (``_failed_row``) with its job data sealed."""
        if self._seal is not None:
            aad = _failed_aad(row["job_id"], row["id"])
            row["job_data"] = self._seal.seal(row["job_data"], aad)
        return row

    def _seal_snapshot(self, job_id: UUID, snapshot: dict[str, Any]) -> dict[str, Any]:
        if self._seal is None or snapshot.get("jobData") is None:
            return snapshot
        return {**snapshot, "jobData": self._sealed_job_data(job_id, snapshot["jobData"])}

    def _seal_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Occurrence rows (``_occurrence_row``) with their job data and result sealed, in
        place."""
        if self._seal is not None:
            for row in rows:
                row["job_data"] = self._sealed_job_data(row["job_id"], row["job_data"])
                row["result"] = self._sealed_result(row["id"], row["result"])
        return rows
