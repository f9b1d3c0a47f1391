"""Secrets kept out of what is printed, logged or shown: the one helper that masks URLs.

:func:`mask_url` hides a URL's password (``scheme://user:***@host``) and the values of its
query-string and fragment parameters whose names say they are secrets (``?token=``,
``?password=``, ``?secret=``, ``?key=``, ``sslpassword``, ``api_key``, ``X-Amz-Signature``, …);
the scheme, user, host, port, path and other parameters stay readable. :func:`mask_urls`
does the same for every URL inside a text (a log message, an exception's text).
:func:`mask_settings` masks a settings tree (fields named like secrets, and every URL in it).
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import unquote

MASK: Final = "***"

SECRET_NAME: Final = re.compile(
    r"pass|pwd|secret|token|credential|auth|key|sig|session|cookie|private|bearer|jwt",
    re.IGNORECASE,
)
"""A parameter or field name that holds a secret (``sslpassword``, ``access_token``,
``apiKey``, ``X-Amz-Signature``, ``client_secret``)."""

_URL_IN_TEXT: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_PARAM: Final = re.compile(r"([^&;=]+)=([^&;]*)")


_NOT_SECRET: Final = ("_dir", "_path", "_file", "_minutes", "_days", "_seconds")
"""Names of where a secret is (``secrets_dir``) or how long it lives, not the secret."""


def is_secret_name(name: str) -> bool:
    """Whether a setting, field or parameter named ``name`` holds a secret."""
    name = name.replace("-", "_")
    return bool(SECRET_NAME.search(name)) and not name.lower().endswith(_NOT_SECRET)


def _mask_params(text: str, mask: str) -> str:
    def one(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if value and is_secret_name(unquote(name)):
            return f"{name}={mask}"
        return match.group(0)

    return _PARAM.sub(one, text)


def _mask_userinfo(rest: str, mask: str) -> str:
    """``user:password@host/path`` → ``user:***@host/path``; also a password holding an
    unescaped ``/`` (``user:pa/ss@host``), which a URL parser would take for the path."""
    netloc, slash, path = rest.partition("/")
    if "@" not in netloc and "@" in rest:
        userinfo, _, after = rest.rpartition("@")
        user, colon, password = userinfo.partition(":")
        port = password.partition("/")[0]
        if colon and "/" not in user and not port.isdigit():
            return f"{user}:{mask}@{after}"
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        if colon:
            netloc = f"{user}:{mask}@{host}"
    return f"{netloc}{slash}{path}"


def mask_url(url: str, mask: str = MASK) -> str:
    """``url`` with its password and secret parameters replaced by ``mask``; the rest of it
    kept as written (no parsing that could fail or normalise it); a text without ``://``
    or ``?`` comes back unchanged."""
    if "://" not in url and "?" not in url:
        return url
    head, hash_, fragment = url.partition("#")
    base, question, query = head.partition("?")
    scheme, slashes, rest = base.partition("://")
    if slashes:
        base = f"{scheme}://{_mask_userinfo(rest, mask)}"
    if "=" in fragment:
        fragment = _mask_params(fragment, mask)
    return f"{base}{question}{_mask_params(query, mask)}{hash_}{fragment}"


def mask_urls(text: str, mask: str = MASK) -> str:
    """``text`` with every URL in it masked as :func:`mask_url` does."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0), mask), text)


def mask_settings(value: Any, name: str = "", mask: str = MASK) -> Any:
    """A settings tree (``model_dump(mode="json")``) as it may be shown: the value of any
    field whose name says it is a secret masked, every URL masked (:func:`mask_url`)."""
    if isinstance(value, dict):
        return {k: mask_settings(v, str(k), mask) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_settings(v, name, mask) for v in value]
    if isinstance(value, str | bytes) and value and is_secret_name(name):
        return mask
    if isinstance(value, str):
        return mask_urls(value, mask)
    return value
