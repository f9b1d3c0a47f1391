"""``http.request``: one HTTP request (redirects followed one hop at a time), its response as the
result. Only http and https; every address of every hop is checked against the
:class:`~rota.core.addresses.AddressPolicy` of ``ROTA_HTTP__…`` and the connection goes to
the checked address (the host name still in ``Host`` and TLS SNI / certificate checks;
:mod:`rota.builtin.outbound`).

An unexpected 5xx, 408 or 429 answer, a timeout or a connection failure is retried (the job's
retries); another unexpected status, a refused address or a bad request fails for good."""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from pydantic import ConfigDict, Field, JsonValue, field_validator, model_validator
from pydantic.alias_generators import to_camel

from rota.builtin.config import HttpSettings
from rota.builtin.outbound import (
    AddressRefusedError,
    UnresolvedError,
    bad_certificate,
    checked_addresses,
    send_pinned,
)
from rota.core.addresses import AddressPolicy, IPAddress
from rota.core.errors import PermanentError, RotaError
from rota.core.redact import mask_url
from rota.sdk.job import JobContext, JobData, JobDefinition, job

__all__ = ["HttpRequest", "HttpStatusError", "data_check", "definitions", "url_refusal"]

JOB_TYPE = "http.request"
MAX_URL_LENGTH = 2048
DEFAULT_TIMEOUT = 30.0
MAX_HEADERS = 50
MAX_HEADER_NAME = 256
MAX_HEADER_VALUE = 8192
MAX_RESULT_HEADERS = 100
RETRYABLE_STATUS = frozenset({408, 429})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_FORBIDDEN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
     "keep-alive", "proxy-authorization", "proxy-connection"}
)  # fmt: skip
_CREDENTIAL_HEADERS = ("authorization", "cookie")


class HttpRequest(JobData):
    """The job data of ``http.request``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] = "GET"
    url: str = Field(max_length=MAX_URL_LENGTH, description="An http:// or https:// URL.")
    headers: dict[str, str] = Field(default_factory=dict, max_length=MAX_HEADERS)
    body: str | None = Field(None, description="A text body (UTF-8); not with json.")
    json_body: JsonValue | None = Field(
        None, alias="json", description="A JSON body (Content-Type application/json)."
    )
    timeout_seconds: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="For the whole request, redirects included (default 30 s, at most "
        "ROTA_HTTP__MAX_TIMEOUT_SECONDS).",
    )
    expected_status: list[int] | None = Field(
        None, max_length=100, description="Statuses that count as success (default: any 2xx)."
    )
    follow_redirects: bool = True
    retry_on_5xx: bool = Field(
        True,
        alias="retryOn5xx",
        description="Retry (within the job's retries) on an unexpected 5xx, 408 or 429.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        check_url(value)
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if len(name) > MAX_HEADER_NAME or not _TOKEN.match(name):
                raise ValueError(f"bad header name {name[:40]!r}")
            if name.lower() in _FORBIDDEN_HEADERS:
                raise ValueError(f"header {name} is set by the worker, not by job data")
            if len(text) > MAX_HEADER_VALUE or any(c in text for c in "\r\n\0"):
                raise ValueError(f"header {name}: at most {MAX_HEADER_VALUE} characters, one line")
        return value

    @field_validator("expected_status")
    @classmethod
    def _statuses(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and not all(100 <= s <= 599 for s in value):
            raise ValueError("statuses are between 100 and 599")
        return value

    @model_validator(mode="after")
    def _one_body(self) -> HttpRequest:
        if self.body is not None and self.json_body is not None:
            raise ValueError("give body or json, not both")
        return self


class HttpStatusError(RotaError):
    """An unexpected status worth retrying (5xx, 408, 429)."""


def check_url(url: str) -> httpx.URL:
    """``url`` parsed, if it is http(s) with a host and no user info (else ``ValueError``)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise ValueError("only http:// and https:// URLs")
    if not parsed.host:
        raise ValueError("the URL has no host")
    if parsed.userinfo:
        raise ValueError("no user:password@ in the URL: send an Authorization header")
    return parsed


def url_refusal(policy: AddressPolicy, url: str) -> str | None:
    """Why ``url`` is refused without a look-up (not http(s), no host, credentials in it, or
    a host the policy refuses as it is written: :meth:`AddressPolicy.static_refusal`), or
    ``None``. The worker resolves a host name that passes and checks each address it gets."""
    try:
        parsed = check_url(url)
    except ValueError as exc:
        return str(exc)
    return policy.static_refusal(parsed.host)


def data_check(settings: HttpSettings) -> Callable[[Any], tuple[str, str] | None]:
    """The server's check of ``http.request`` job data at create, update and trigger (the
    composition root hands it to the job service): ``("url", why)`` for a URL
    :func:`url_refusal` refuses under ``settings``' policy, else ``None``. Data that is no
    object or whose ``url`` is no text is left to the data schema and the worker."""
    policy = AddressPolicy.from_settings(settings)

    def check(data: Any) -> tuple[str, str] | None:
        url = data.get("url") if isinstance(data, dict) else None
        if not isinstance(url, str):
            return None
        why = url_refusal(policy, url)
        return None if why is None else ("url", why)

    return check


@dataclass(slots=True)
class _Response:
    url: str
    status: int
    reason: str
    headers: dict[str, str]
    body: bytes
    truncated: bool
    encoding: str


class Fetcher:
    """Runs one request under the policy; ``transport`` replaces the network (tests)."""

    def __init__(
        self,
        settings: HttpSettings,
        policy: AddressPolicy | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy or AddressPolicy.from_settings(settings)
        self._transport = transport
        self._verify: ssl.SSLContext | bool = True
        if settings.ca_file:
            self._verify = ssl.create_default_context()
            self._verify.load_verify_locations(cafile=settings.ca_file)

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses ``host`` resolves to, each checked (``PermanentError`` if one is
        refused: a name that also points inside is refused whole)."""
        try:
            return await checked_addresses(self.policy, host, port)
        except AddressRefusedError as exc:
            raise PermanentError(f"refused: {exc}") from None
        except UnresolvedError as exc:
            raise RotaError(str(exc)) from exc

    async def fetch(self, data: HttpRequest, log: Any) -> dict[str, JsonValue]:
        s = self.settings
        seconds = data.timeout_seconds or min(DEFAULT_TIMEOUT, s.max_timeout_seconds)
        if seconds > s.max_timeout_seconds:
            raise PermanentError(
                f"timeoutSeconds {seconds} is over the limit of "
                f"{s.max_timeout_seconds} (ROTA_HTTP__MAX_TIMEOUT_SECONDS)"
            )
        content, headers = self._body(data)
        started = time.monotonic()
        try:
            async with asyncio.timeout(seconds):
                response, hops = await self._follow(data, content, headers, seconds, log)
        except TimeoutError:
            raise RotaError(f"no complete answer within {seconds} s") from None
        elapsed = time.monotonic() - started
        log.info(
            "%s %s: %s %s in %.3f s", data.method, mask_url(str(response.url)), response.status,
            response.reason, elapsed,
        )  # fmt: skip
        self._check_status(data, response)
        return _result(response, hops, elapsed)

    def _body(self, data: HttpRequest) -> tuple[bytes | None, dict[str, str]]:
        headers = dict(data.headers)
        if not any(k.lower() == "user-agent" for k in headers):
            headers["User-Agent"] = self.settings.user_agent
        if data.json_body is not None:
            import orjson

            content: bytes | None = orjson.dumps(data.json_body)
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        else:
            content = None if data.body is None else data.body.encode()
        limit = self.settings.max_request_bytes
        if content is not None and len(content) > limit:
            raise PermanentError(
                f"the request body has {len(content)} bytes, over the limit of {limit} "
                "(ROTA_HTTP__MAX_REQUEST_BYTES)"
            )
        return content, headers

    async def _follow(
        self,
        data: HttpRequest,
        content: bytes | None,
        headers: dict[str, str],
        seconds: float,
        log: Any,
    ) -> tuple[_Response, list[str]]:
        method, url = data.method, check_url(data.url)
        hops: list[str] = []
        while True:
            follow = data.follow_redirects
            response = await self._send(method, url, content, headers, seconds, follow)
            location = response.headers.get("location")
            if not (follow and response.status in REDIRECTS and location):
                return response, hops
            if len(hops) >= self.settings.max_redirects:
                raise PermanentError(
                    f"more than {self.settings.max_redirects} redirects (ROTA_HTTP__MAX_REDIRECTS)"
                )
            try:
                target = check_url(str(url.join(location)))
            except ValueError as exc:
                raise PermanentError(
                    f"redirect to a refused URL {location[:200]!r}: {exc}"
                ) from None
            log.info("redirect %s to %s", response.status, target)
            if target.host != url.host or target.port != url.port or target.scheme != url.scheme:
                headers = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
            if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                method, content = ("HEAD" if method == "HEAD" else "GET"), None
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            hops.append(str(target))
            url = target

    async def _send(
        self,
        method: str,
        url: httpx.URL,
        content: bytes | None,
        headers: dict[str, str],
        seconds: float,
        follow: bool,
    ) -> _Response:
        """Send to the first checked address that accepts a connection."""
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = await self.addresses(url.host, port)
        async with httpx.AsyncClient(
            trust_env=False, timeout=seconds, transport=self._transport, verify=self._verify
        ) as client:
            try:
                response = await send_pinned(
                    client, method, url, addresses, headers=headers, content=content
                )
            except httpx.ConnectError as exc:
                if bad_certificate(exc):  # the same for every address: a setting to fix
                    raise PermanentError(
                        f"the TLS certificate of {url.host} is not trusted: {exc} "
                        "(ROTA_HTTP__CA_FILE)"
                    ) from None
                raise RotaError(f"cannot connect to {url.host}: {exc}") from exc
            return await self._read(response, url, skip_redirect_body=follow)

    async def _read(
        self, response: httpx.Response, url: httpx.URL, *, skip_redirect_body: bool
    ) -> _Response:
        limit = self.settings.max_response_bytes
        try:
            chunks: list[bytes] = []
            size = 0
            truncated = False
            if not (skip_redirect_body and response.status_code in REDIRECTS):
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        truncated = True
                        break
            body = b"".join(chunks)[:limit]
        finally:
            await response.aclose()
        headers: dict[str, str] = {}
        for name, value in response.headers.multi_items():
            key = name.lower()
            if key in headers:
                headers[key] = f"{headers[key]}, {value}"
            elif len(headers) < MAX_RESULT_HEADERS:
                headers[key] = value
        return _Response(
            url=str(url),
            status=response.status_code,
            reason=response.reason_phrase,
            headers=headers,
            body=body,
            truncated=truncated,
            encoding=response.charset_encoding or "utf-8",
        )

    def _check_status(self, data: HttpRequest, response: _Response) -> None:
        status = response.status
        expected = data.expected_status
        if (status in expected) if expected is not None else 200 <= status < 300:
            return
        snippet = _text(response.body[:500], response.encoding)
        text = f"HTTP {status} {response.reason} from {response.url}: {snippet}".rstrip(": ")
        if data.retry_on_5xx and (status >= 500 or status in RETRYABLE_STATUS):
            raise HttpStatusError(text)
        raise PermanentError(f"unexpected status: {text}")


def _text(body: bytes, encoding: str) -> str:
    try:
        return body.decode(encoding, errors="replace")
    except LookupError:  # an unknown charset
        return body.decode("utf-8", errors="replace")


def _result(response: _Response, hops: Sequence[str], elapsed: float) -> dict[str, JsonValue]:
    result: dict[str, JsonValue] = {
        "status": response.status,
        "reason": response.reason,
        "url": response.url,
        "headers": dict(response.headers),
        "body": _text(response.body, response.encoding),
        "bodyTruncated": response.truncated,
        "redirects": list(hops),
        "elapsedSeconds": round(elapsed, 3),
    }
    return result


def definitions(
    settings: HttpSettings, *, transport: httpx.AsyncBaseTransport | None = None
) -> list[JobDefinition[..., Any]]:
    """The ``http.request`` job type, bound to ``settings``."""
    fetcher = Fetcher(settings, transport=transport)

    @job(JOB_TYPE, max_retries=3, retry_delay=5, retry_jitter=0.2)
    async def http_request(ctx: JobContext, data: HttpRequest) -> dict[str, JsonValue]:
        """Send one HTTP request; the response's status, headers and body are the result."""
        return await fetcher.fetch(data, ctx.log)

    return [http_request]
