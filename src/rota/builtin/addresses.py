"""Which addresses ``http.request`` may connect to (:class:`AddressPolicy`).

By default only public addresses: loopback, private, shared (100.64/10), link-local (cloud
metadata at 169.254.169.254), unique-local, multicast, unspecified, reserved, documentation
and the other special-purpose ranges of IPv4 and IPv6 are refused, also when an IPv6 address
carries an IPv4 one (IPv4-mapped ``::ffff:…``, IPv4-compatible, NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16``, Teredo). An Admin may allow networks or host names, and deny more; a
denial always wins. Every address a host resolves to must pass, and the connection then goes
to a checked address (no second look-up a DNS rebinding could answer differently)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from rota.builtin.config import HttpSettings, split_list

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated IPv4-compatible addresses


def parse_address(text: str) -> IPAddress | None:
    """``text`` as an IP address (brackets and an IPv6 zone are dropped), else ``None``."""
    text = text.strip().removeprefix("[").removesuffix("]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


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
    """Globally routable, and so is the IPv4 address it carries, if any."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return inner.is_global and not inner.is_multicast
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return False  # fec0::/10, deprecated but still routed inside some networks
    return address.is_global and not address.is_multicast and not address.is_reserved


def _host_matches(host: str, patterns: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """The allow and deny lists (from :class:`~rota.builtin.config.HttpSettings`)."""

    allow_public: bool = True
    allow_networks: tuple[IPNetwork, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    deny_networks: tuple[IPNetwork, ...] = ()
    deny_hosts: tuple[str, ...] = field(default=())

    @classmethod
    def from_settings(cls, settings: HttpSettings) -> AddressPolicy:
        def networks(value: str) -> tuple[IPNetwork, ...]:
            return tuple(ipaddress.ip_network(n, strict=False) for n in split_list(value))

        def hosts(value: str) -> tuple[str, ...]:
            return tuple(h.lower().rstrip(".") for h in split_list(value))

        return cls(
            allow_public=settings.allow_public,
            allow_networks=networks(settings.allow_networks),
            allow_hosts=hosts(settings.allow_hosts),
            deny_networks=networks(settings.deny_networks),
            deny_hosts=hosts(settings.deny_hosts),
        )

    def host_refusal(self, host: str) -> str | None:
        """Why a host name is refused before any look-up, or ``None``."""
        if _host_matches(host, self.deny_hosts):
            return f"host {host} is denied by the settings (ROTA_HTTP__DENY_HOSTS)"
        return None

    def refusal(self, host: str, address: IPAddress) -> str | None:
        """Why connecting to ``address`` (which ``host`` resolved to) is refused, or ``None``."""
        inner = embedded_ipv4(address)
        candidates = [address] if inner is None else [address, inner]
        for candidate in candidates:
            if any(candidate in n for n in self.deny_networks if n.version == candidate.version):
                return f"address {address} of {host} is denied by the settings"
        if _host_matches(host, self.allow_hosts):
            return None
        for candidate in candidates:
            if any(candidate in n for n in self.allow_networks if n.version == candidate.version):
                return None
        if not is_public(address):
            return (
                f"address {address} of {host} is not public (loopback, private, link-local or "
                "another special range); an Admin may allow it with ROTA_HTTP__ALLOW_NETWORKS"
            )
        if not self.allow_public:
            return f"address {address} of {host} is not in the allowed networks or hosts"
        return None
