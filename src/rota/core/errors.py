"""One error root for everything Rota raises.

HTTP status mapping lives only in the API's exception handlers; here errors carry meaning
(what was wrong, with which field) and nothing about transport.
"""

from __future__ import annotations

from collections.abc import Sequence


class RotaError(Exception):
    """Root of every error Rota raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFoundError(RotaError):
    """The named thing (job, occurrence, …) does not exist."""

    def __init__(self, kind: str, key: object) -> None:
        super().__init__(f"{kind} {key} not found")
        self.kind = kind
        self.key = key


class ConflictError(RotaError):
    """The change clashes with the current state (duplicate, stale version, bad transition)."""


class PreconditionFailedError(RotaError):
    """A conditional change (``If-Match``) was made against a copy that is no longer current."""


class ValidationError(RotaError):
    """Input was refused. ``field`` names the offending input field (API name, camelCase)."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        errors: Sequence[ValidationError] = (),
    ) -> None:
        super().__init__(message)
        self.field = field
        self.errors: tuple[ValidationError, ...] = tuple(errors)
        """When several inputs were refused at once (a bulk create): each one, with its
        field."""


class UnknownParameterError(ValidationError):
    """A request named a parameter the operation does not take (``field``: its name). The
    API answers 400: a misspelt filter must not pass as no filter."""


class CronError(ValidationError):
    """A cron expression or time zone was refused.

    ``field`` is the API field (``cronExpression`` or ``timeZone``); ``part`` names the cron
    field that is wrong (``second``, ``minute``, ``hour``, ``day``, ``month``, ``weekday``) when
    one can be named.
    """

    def __init__(self, message: str, *, field: str = "cronExpression", part: str | None = None):
        super().__init__(message, field=field)
        self.part = part


class BackendUnavailableError(RotaError):
    """A backend (store, index, broker, coordination) cannot be reached or timed out."""


class ConfigurationError(RotaError):
    """The settings describe a combination that cannot work; the message says what to set."""


class PermanentError(RotaError):
    """Raised by a job handler: the failure is final, do not retry."""


class JobCancelledError(RotaError):
    """Raised inside a handler by ``ctx.check_cancelled()`` once the occurrence is cancelled."""


class AuthenticationError(RotaError):
    """Who is calling could not be established: no, a bad or an expired token, or wrong
    credentials. The message never tells whether a user exists."""


class AccountLockedError(AuthenticationError):
    """Too many failed logins: the account (or the name) is locked for ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimitedError(RotaError):
    """Too many requests of this kind (from this client, or in all): try again after
    ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OverloadedError(RotaError):
    """The server has no room for this work now (a bounded queue is full): try again after
    ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermissionDeniedError(RotaError):
    """The caller is known but its role does not allow this."""
