"""Naming records on the command line: a whole id; what the dashboard shows of one (its last
hex digits, ``…0e59d72df1bc``, or its first ones), turned into the whole id by the API
(``GET /ids``, among the newest records of the kind); or, for a job, its display name when
unique."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

from rota.api.schemas.jobs import JobOut
from rota.cli.ops.session import API_ERROR, NOT_FOUND, USAGE, connect, fail
from rota.client import SyncClient

NAME_PAGE: Final = 500
MIN_DIGITS: Final = 4
_SHOWN: Final = re.compile(r"^(?:…|\.\.\.)?([0-9a-fA-F-]+?)(?:…|\.\.\.)?$")

ID_HELP: Final = "its id, or 4+ of its first or last hex digits as shown (…0e59d72df1bc)"


def digits_of(ref: str) -> str | None:
    """The hex digits ``ref`` shows of an id (``…0e59d72df1bc``, ``019ad1c3-4f2a…``), lower
    case; ``None`` when it is no part of an id."""
    found = _SHOWN.match(ref.strip())
    digits = found.group(1).replace("-", "").lower() if found else ""
    return digits if MIN_DIGITS <= len(digits) <= 32 else None


def match_id(client: SyncClient, kind: str, ref: str, noun: str) -> UUID:
    """The id ``ref`` names: a whole id as it is, else the one id of ``kind`` (``job``,
    ``occurrence``, ``failed``, ``graph_run``) that starts or ends with its digits. None:
    exit 4; several: exit 1 naming them; not an id at all: exit 2."""
    try:
        return UUID(ref)
    except ValueError:
        pass
    digits = digits_of(ref)
    if digits is None:
        fail(f"{ref!r} is not a {noun} id: give {ID_HELP}", USAGE)
    body: dict[str, Any] = client.call(
        client.client.request("GET", "/ids", params={"kind": kind, "id": digits})
    )
    ids = [UUID(i) for i in body["ids"]]
    if not ids:
        fail(
            f"no {noun} id starts or ends with {digits} (among the newest "
            f"{body['window']:,}: give an older one whole)",
            NOT_FOUND,
        )
    if len(ids) > 1:
        shown = ", ".join(str(i) for i in ids)
        fail(f"{len(ids)} {noun} ids start or end with {digits} ({shown}): give more", API_ERROR)
    return ids[0]


def match_ids(kind: str, refs: Sequence[str], noun: str) -> list[str]:
    """Each of ``refs`` as a whole id (connecting only when one is not whole already)."""
    whole: list[str] = []
    for ref in refs:
        try:
            whole.append(str(UUID(ref)))
        except ValueError:
            break
    else:
        return whole
    with connect() as client:
        return [str(match_id(client, kind, ref, noun)) for ref in refs]


def resolve(client: SyncClient, ref: str) -> JobOut:
    """The job ``ref`` names: an id; else the one job whose display name is ``ref`` (exactly;
    else ignoring case); else the one job whose id starts or ends with the digits ``ref``
    shows. None: exit 4; several: exit 1 naming their ids."""
    try:
        job_id = UUID(ref)
    except ValueError:
        pass
    else:
        return client.get_job(job_id)
    found: list[JobOut] = []
    cursor: str | None = None
    while True:
        page = client.list_jobs(search=ref, limit=NAME_PAGE, cursor=cursor)
        found += [job for job in page.items if job.display_name.lower() == ref.lower()]
        cursor = page.next_cursor
        if cursor is None:
            break
    exact = [job for job in found if job.display_name == ref] or found
    if not exact and digits_of(ref) is not None:
        return client.get_job(match_id(client, "job", ref, "job"))
    if not exact:
        fail(f"no job has the id or name {ref!r}", NOT_FOUND)
    if len(exact) > 1:
        ids = ", ".join(str(job.id) for job in exact)
        fail(f"{len(exact)} jobs are named {ref!r} ({ids}): name one by its id", API_ERROR)
    return exact[0]
