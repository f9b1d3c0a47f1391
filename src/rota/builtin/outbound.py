"""Outbound HTTP under an :class:`~rota.core.addresses.AddressPolicy`: the host is resolved,
every address it resolves to is checked, and the connection goes to a checked address (no
second look-up that a DNS rebinding could answer differently), the URL's host name still in
``Host`` and in TLS SNI and the certificate check. Used by ``http.request`` and by webhook
notifications (:mod:`rota.app.notify`)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Sequence

import httpx

from rota.core.addresses import AddressPolicy, IPAddress, parse_address


class AddressRefusedError(Exception):
    """The policy refuses the host or one of its addresses (the reason is the message)."""


class UnresolvedError(Exception):
    """The host name did not resolve (the message says why)."""


async def checked_addresses(policy: AddressPolicy, host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to (itself if it is an IP address), each checked:
    :class:`AddressRefusedError` if one is refused (a name that also points inside is refused
    whole), :class:`UnresolvedError` if the look-up fails or finds nothing."""
    refusal = policy.static_refusal(host)  # denied names, literal and well-known addresses
    if refusal:
        raise AddressRefusedError(refusal)
    literal = parse_address(host)
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise UnresolvedError(f"cannot resolve {host}: {exc.strerror or exc}") from exc
        found = []
        for info in infos:
            address = parse_address(str(info[4][0]))
            if address is not None and address not in found:
                found.append(address)
    if not found:
        raise UnresolvedError(f"{host} resolved to no address")
    refusal = policy.refusal(host, found)
    if refusal:
        raise AddressRefusedError(refusal)
    return found


async def send_pinned(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL,
    addresses: Sequence[IPAddress],
    *,
    headers: dict[str, str],
    content: bytes | None,
) -> httpx.Response:
    """Send to the first of ``addresses`` (checked ones of ``url``'s host) that accepts a
    connection; the response is streamed (the caller reads and closes it). A TLS certificate
    that is not trusted raises its :class:`httpx.ConnectError` at once (the same for every
    address); else the last address's, when none connected."""
    extensions = {}
    if url.scheme == "https" and parse_address(url.host) is None:
        extensions["sni_hostname"] = url.host
    headers = headers | {"Host": url.netloc.decode("ascii")}
    last: httpx.ConnectError | None = None
    for address in addresses:
        request = client.build_request(
            method,
            url.copy_with(host=str(address)),
            headers=headers,
            content=content,
            extensions=extensions,
        )
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as exc:
            if bad_certificate(exc):
                raise
            last = exc
    if last is None:
        raise ValueError("no address to connect to")
    raise last


def bad_certificate(exc: BaseException) -> bool:
    """Whether ``exc`` was caused by a TLS certificate that is not trusted."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
