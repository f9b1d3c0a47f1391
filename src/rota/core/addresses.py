"""Which addresses an outbound request may go to (:class:`AddressPolicy`), pure, no I/O: the
one policy of the ``http.request`` built-in worker (``ROTA_HTTP__…``) and of webhook
notifications (``ROTA_NOTIFICATIONS__…``).

By default only public addresses: loopback, private, shared (100.64/10), link-local (cloud
metadata at 169.254.169.254), unique-local, site-local, multicast, unspecified, reserved,
documentation and the other special-purpose ranges of IPv4 and IPv6 are refused, also when an
IPv6 address carries an IPv4 one (IPv4-mapped ``::ffff:…``, IPv4-compatible, NAT64
``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo): the IPv4 one is judged. An Admin may allow
networks or host names (``*.example`` for its subdomains), deny more, or allow nothing but
what is listed; a denial always wins. Every address a host resolves to must pass (the look-up
and the connection to a checked address are :mod:`rota.builtin.outbound`'s)."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated IPv4-compatible addresses
_SPECIAL = ("loopback", "link_local", "private", "multicast", "reserved", "unspecified")


def split_list(value: str) -> list[str]:
    """The non-empty items of a comma-separated setting."""
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_networks(value: str) -> tuple[IPNetwork, ...]:
    """Comma-separated CIDR networks (``ValueError`` for one that is not)."""
    return tuple(ipaddress.ip_network(item, strict=False) for item in split_list(value))


def check_networks(value: str) -> str:
    """``value`` if its items are CIDR networks (``ValueError`` naming one that is not): the
    settings' validator."""
    for item in split_list(value):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not a CIDR network") from None
    return value


def parse_hosts(value: str) -> tuple[str, ...]:
    """Comma-separated host names or ``*.domain`` patterns, lower case, no trailing dot."""
    return tuple(h.lower().rstrip(".") for h in split_list(value))


def parse_address(text: str) -> IPAddress | None:
    """``text`` as an IP address (brackets, an IPv6 zone and a trailing dot are dropped), else
    ``None``. The IPv4 forms a resolver reads as an address without asking DNS count too
    (``2852039166``, ``0xa9fea9fe``, ``0251.0376.0251.0376``, ``127.1``)."""
    text = text.strip().removeprefix("[").removesuffix("]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    text = text.removesuffix(".")
    if not text or not _NUMERIC_HOST.fullmatch(text):
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    try:  # inet_aton: the numbers-and-dots forms getaddrinfo takes as an address
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.:]+")

KNOWN_NAMES: dict[str, tuple[str, ...]] = {
    "localhost": ("127.0.0.1", "::1"),
    "metadata": ("169.254.169.254",),
    "metadata.google.internal": ("169.254.169.254",),
    "metadata.goog": ("169.254.169.254",),
    "instance-data": ("169.254.169.254",),
    "instance-data.ec2.internal": ("169.254.169.254",),
}
"""Host names whose addresses are known without asking DNS: ``localhost`` (and every
``*.localhost``, RFC 6761) and the cloud metadata services' names (Google Cloud, AWS)."""


def known_addresses(host: str) -> list[IPAddress]:
    """The addresses of a :data:`KNOWN_NAMES` host (any case, a trailing dot allowed), else
    ``[]``."""
    name = host.strip().lower().rstrip(".")
    if name.endswith(".localhost"):
        name = "localhost"
    return [ipaddress.ip_address(a) for a in KNOWN_NAMES.get(name, ())]


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """Globally routable and of no special range, and so is the IPv4 address it carries."""
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return False  # fec0::/10, deprecated but still routed inside some networks
    judged = embedded_ipv4(address) or address
    if any(getattr(judged, f"is_{kind}") for kind in _SPECIAL):
        return False
    return judged.is_global


def address_refusal(address: IPAddress | str) -> str | None:
    """Why an address is refused by default (not an IP address, or not public), or ``None``."""
    ip = parse_address(address) if isinstance(address, str) else address
    if ip is None:
        return f"{address!r} is not an IP address"
    return None if is_public(ip) else f"{ip} is not a public address"


def _host_matches(host: str, patterns: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


class AddressSettings(Protocol):
    """A settings section with the policy's fields (``ROTA_HTTP``, ``ROTA_NOTIFICATIONS``)."""

    env_prefix: ClassVar[str]
    """How its settings are named in the environment (``ROTA_HTTP__``), for messages."""

    allow_public: bool
    allow_networks: str
    allow_hosts: str
    deny_networks: str
    deny_hosts: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AddressPolicy:
    """The allow and deny lists; ``AddressPolicy()`` allows public addresses only."""

    allow_public: bool = True
    """Reach public addresses (``False``: only what the allow lists name)."""
    allow_networks: tuple[IPNetwork, ...] = ()
    """Networks reachable although not public (e.g. ``10.1.0.0/16``, ``127.0.0.1/32``)."""
    allow_hosts: tuple[str, ...] = ()
    """Host names reachable whatever they resolve to (``*.example`` for subdomains)."""
    deny_networks: tuple[IPNetwork, ...] = ()
    """Networks always refused (wins over the allow lists)."""
    deny_hosts: tuple[str, ...] = ()
    """Host names always refused, before any look-up."""
    env_prefix: str = ""
    """The settings' prefix (``ROTA_HTTP__``), named in refusals."""

    @classmethod
    def parse(
        cls,
        networks: str,
        hosts: str,
        *,
        deny_networks: str = "",
        deny_hosts: str = "",
        allow_public: bool = True,
        env_prefix: str = "",
    ) -> AddressPolicy:
        """From comma-separated settings (``ValueError`` for a network that is not one)."""
        return cls(
            allow_public=allow_public,
            allow_networks=parse_networks(networks),
            allow_hosts=parse_hosts(hosts),
            deny_networks=parse_networks(deny_networks),
            deny_hosts=parse_hosts(deny_hosts),
            env_prefix=env_prefix,
        )

    @classmethod
    def from_settings(cls, settings: AddressSettings) -> AddressPolicy:
        return cls.parse(
            settings.allow_networks,
            settings.allow_hosts,
            deny_networks=settings.deny_networks,
            deny_hosts=settings.deny_hosts,
            allow_public=settings.allow_public,
            env_prefix=settings.env_prefix,
        )

    def host_refusal(self, host: str) -> str | None:
        """Why a host name is refused before any look-up, or ``None``."""
        if _host_matches(host, self.deny_hosts):
            return f"host {host} is denied by the settings ({self.env_prefix}DENY_HOSTS)"
        return None

    def static_refusal(self, host: str) -> str | None:
        """Why ``host`` is refused before any look-up, or ``None``: a name the settings deny,
        an IP address the policy refuses, or a name whose addresses are known without DNS
        (``localhost``, the cloud metadata names: :data:`KNOWN_NAMES`) that it refuses. What
        a create checks; a host name that passes is still resolved and checked when used."""
        refusal = self.host_refusal(host)
        if refusal is not None:
            return refusal
        literal = parse_address(host)
        known = [literal] if literal is not None else known_addresses(host)
        return self.refusal(host, known) if known else None

    def refusal(
        self, host: str, addresses: IPAddress | str | Sequence[IPAddress | str]
    ) -> str | None:
        """Why connecting to ``host``, resolved to ``addresses`` (one or several: every one
        must pass; none at all passes only for an allowed host name), is refused, or ``None``."""
        if isinstance(addresses, (str, ipaddress.IPv4Address, ipaddress.IPv6Address)):
            addresses = [addresses]
        refusal = self.host_refusal(host)
        if refusal is not None:
            return refusal
        if not addresses and not _host_matches(host, self.allow_hosts):
            return f"{host} resolves to no address"
        for item in addresses:
            address = parse_address(item) if isinstance(item, str) else item
            refusal = (
                address_refusal(item) if address is None else self._address_refusal(host, address)
            )
            if refusal is not None:
                return refusal
        return None

    def _address_refusal(self, host: str, address: IPAddress) -> str | None:
        inner = embedded_ipv4(address)
        candidates = [address] if inner is None else [address, inner]
        if any(_within(c, self.deny_networks) for c in candidates):
            return f"address {address} of {host} is denied by the settings"
        if _host_matches(host, self.allow_hosts):
            return None
        if any(_within(c, self.allow_networks) for c in candidates):
            return None
        if not is_public(address):
            return (
                f"address {address} of {host} is not public (loopback, private, link-local or "
                f"another special range); an Admin may allow it with "
                f"{self.env_prefix}ALLOW_NETWORKS"
            )
        if not self.allow_public:
            return f"address {address} of {host} is not in the allowed networks or hosts"
        return None


def _within(address: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(address in n for n in networks if n.version == address.version)
