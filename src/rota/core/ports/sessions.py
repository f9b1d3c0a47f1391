"""The store's slice that ends a user's sessions (:mod:`rota.services.auth`,
docs/security.md#sessions-end-at-once): the user's "tokens valid after" instant, which every
authenticated request checks against its access token's ``iat``, and the refresh tokens."""

from __future__ import annotations

import abc
from datetime import datetime

from rota.core.ports.store import SecurityStore
from rota.core.security import User


class SessionStore(abc.ABC):
    """Ending every access token, dashboard session and refresh token of a user at once."""

    @abc.abstractmethod
    async def update_user_ending_sessions(self, user: User, at: datetime) -> User:
        """:meth:`~rota.core.ports.store.UserStore.update_user` (the same rules: the last
        active Admin, a taken name), and in the same transaction the user's
        ``tokens_valid_after`` set to ``at`` (never moved back) and every live refresh token
        of the user revoked. Returns the user as stored. ``NotFoundError`` if none."""


class AccountStore(SecurityStore, SessionStore, abc.ABC):
    """What the auth service uses: users, tokens and sessions, and the audit log."""
