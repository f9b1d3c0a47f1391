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
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

import msgspec

from rota.core.models import FailedOccurrence, Job, JsonValue, Occurrence
from rota.core.sealing import (
    DataSeal,
    SealError,
    failed_data_aad,
    is_envelope,
    job_data_aad,
    result_aad,
)
from rota.core.security import AuditEntry

_log = logging.getLogger(__name__)


def _failed_aad(job_id: UUID | None, failed_id: UUID) -> bytes:
    """A failed occurrence's job data is its job's (bound to the job, so the final-failure
    record copies the occurrence's envelope as it is); a poison message's, to the record."""
    return failed_data_aad(failed_id) if job_id is None else job_data_aad(job_id)


def _audit_aad(entry: AuditEntry) -> bytes | None:
    """The job data's associated data for an audit entry of a job; ``None`` for others."""
    if entry.resource_type != "job" or entry.resource_id is None:
        return None
    try:
        return job_data_aad(UUID(str(entry.resource_id)))
    except ValueError:
        return None


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
        return msgspec.structs.replace(
            job, job_data=self._opened(job.job_data, job_data_aad(job.id))
        )

    def _open_occurrence(self, occ: Occurrence) -> Occurrence:
        if self._seal is None or not (is_envelope(occ.job_data) or is_envelope(occ.result)):
            return occ
        return msgspec.structs.replace(
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

    def _open_audit(self, entry: AuditEntry) -> AuditEntry:
        """An audit entry of a job with the job data of its states opened."""
        if self._seal is None or (aad := _audit_aad(entry)) is None:
            return entry
        before, after = (self._audit_state(s, aad, open_=True) for s in (entry.before, entry.after))
        return replace(entry, before=before, after=after)

    def _audit_state(self, state: Any, aad: bytes, *, open_: bool) -> Any:
        if not isinstance(state, dict) or state.get("jobData") is None:
            return state
        data = state["jobData"]
        assert self._seal is not None
        new = self._opened(data, aad) if open_ else self._seal.seal(data, aad)
        return {**state, "jobData": new}

    # --- writes ---------------------------------------------------------------------------

    def _sealed_audit(self, entries: Sequence[AuditEntry]) -> Sequence[AuditEntry]:
        """Audit entries with the job data in the states of a job's entries sealed (what a
        change of a job records holds its data)."""
        if self._seal is None:
            return entries
        out = []
        for entry in entries:
            aad = _audit_aad(entry)
            if aad is not None:
                before = self._audit_state(entry.before, aad, open_=False)
                after = self._audit_state(entry.after, aad, open_=False)
                entry = replace(entry, before=before, after=after)
            out.append(entry)
        return out

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
