"""The built-in workers without a network: the address checks of ``http.request``, the names
``--builtin`` takes, the job data models (limits, JSON Schema) and the wiring's errors."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pydantic
import pytest
from typer.testing import CliRunner

from rota.app.builtins import load_registry
from rota.builtin import parse_names, split_modules
from rota.builtin.config import HttpSettings, SmtpSettings, SqlSettings
from rota.builtin.email import EmailSend
from rota.builtin.http import HttpRequest, data_check, url_refusal
from rota.builtin.sql import SqlExecute, engine_url, jsonable
from rota.cli import app
from rota.core.addresses import AddressPolicy, embedded_ipv4, is_public, parse_address
from rota.core.errors import ConfigurationError
from tests.helpers import settings_for

NOT_PUBLIC = [
    "127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "192.168.0.1", "100.64.0.1",
    "169.254.169.254", "0.0.0.0", "224.0.0.1", "239.255.255.250", "240.0.0.1",
    "255.255.255.255", "192.0.2.1", "198.18.0.1", "::1", "::", "fe80::1", "fc00::1",
    "fd12:3456::1", "ff02::1", "fec0::1", "2001:db8::1", "::ffff:127.0.0.1",
    "::ffff:169.254.169.254", "::ffff:10.0.0.1", "::127.0.0.1", "64:ff9b::a9fe:a9fe",
    "2002:7f00:1::1", "2002:a00:1::1",
]  # fmt: skip
PUBLIC = ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]


@pytest.mark.parametrize("text", NOT_PUBLIC)
def test_special_ranges_are_not_public(text: str) -> None:
    address = parse_address(text)
    assert address is not None
    assert not is_public(address)
    assert AddressPolicy().refusal("h", address) is not None


@pytest.mark.parametrize("text", PUBLIC)
def test_public_addresses(text: str) -> None:
    address = parse_address(text)
    assert address is not None
    assert is_public(address)
    assert AddressPolicy().refusal("h", address) is None


def test_addresses_in_ipv6_carry_their_ipv4() -> None:
    v4 = ipaddress.IPv4Address("169.254.169.254")
    for text in ("::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::"):
        address = parse_address(text)
        assert address is not None
        assert embedded_ipv4(address) == v4
    assert parse_address("[::1]") == ipaddress.IPv6Address("::1")
    assert parse_address("fe80::1%eth0") == ipaddress.IPv6Address("fe80::1")
    assert parse_address("example.com") is None


def test_the_allow_and_deny_lists() -> None:
    policy = AddressPolicy.from_settings(
        HttpSettings(
            allow_networks="127.0.0.1/32, 10.0.0.0/8",
            allow_hosts="api.internal,*.svc.local",
            deny_networks="10.9.0.0/16,8.8.8.8/32",
            deny_hosts="*.forbidden.example",
        )
    )

    def refused(host: str, text: str) -> bool:
        address = parse_address(text)
        assert address is not None
        return policy.refusal(host, address) is not None

    assert not refused("h", "127.0.0.1")
    assert refused("h", "127.0.0.2")
    assert not refused("h", "::ffff:127.0.0.1")  # the mapped form of an allowed address
    assert not refused("h", "10.1.1.1")
    assert refused("h", "10.9.1.1")  # denied wins over allowed
    assert refused("h", "8.8.8.8")
    assert not refused("api.internal", "192.168.1.5")  # allowed by name
    assert not refused("x.svc.local", "172.16.0.9")
    assert refused("svc.local.evil", "172.16.0.9")
    assert refused("api.internal", "10.9.0.1")
    assert policy.host_refusal("a.forbidden.example") is not None
    assert policy.host_refusal("forbidden.example.com") is None
    only_listed = AddressPolicy.from_settings(HttpSettings(allow_public=False))
    assert only_listed.refusal("h", ipaddress.IPv4Address("8.8.8.8")) is not None


def test_numbers_a_resolver_reads_as_an_address_are_addresses() -> None:
    metadata = ipaddress.IPv4Address("169.254.169.254")
    for text in ("2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518",
                 "169.254.169.254."):  # fmt: skip
        assert parse_address(text) == metadata, text
    assert parse_address("127.1") == ipaddress.IPv4Address("127.0.0.1")
    for name in ("deadbeef", "abc", "1e100.net", "0x", "example.com."):
        assert parse_address(name) is None, name


@pytest.mark.parametrize(
    "host",
    ["169.254.169.254", "[fd00:ec2::254]", "2852039166", "metadata.google.internal",
     "METADATA.Google.Internal.", "metadata.goog", "metadata", "instance-data",
     "localhost", "app.localhost", "127.1", "[::1]"],
)  # fmt: skip
def test_what_is_refused_without_a_look_up(host: str) -> None:
    assert AddressPolicy().static_refusal(host) is not None
    assert url_refusal(AddressPolicy(), f"http://{host}/x") is not None


def test_what_a_static_check_leaves_to_the_look_up() -> None:
    policy = AddressPolicy()
    for host in ("example.org", "hooks.example.org.", "8.8.8.8", "[2606:4700::1111]"):
        assert policy.static_refusal(host) is None, host
    # the settings decide as they do at run time: an allowed name or network passes
    allowed = AddressPolicy.from_settings(
        HttpSettings(allow_hosts="localhost", allow_networks="169.254.169.254/32")
    )
    assert allowed.static_refusal("localhost") is None
    assert allowed.static_refusal("metadata.google.internal") is None
    assert allowed.static_refusal("127.0.0.1") is not None
    loopback_v4 = AddressPolicy.from_settings(HttpSettings(allow_networks="127.0.0.0/8"))
    assert "::1" in (loopback_v4.static_refusal("localhost") or "")  # every address must pass
    denied = AddressPolicy.from_settings(HttpSettings(deny_hosts="*.example.org"))
    assert "denied" in (denied.static_refusal("a.example.org") or "")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("file:///etc/passwd", "only http:// and https://"),
        ("gopher://example.org/", "only http:// and https://"),
        ("https://user:pass@example.org/", "no user:password@"),
        ("https://token@example.org/", "no user:password@"),
        ("http:///x", "no host"),
        ("https://example.org/ok", None),
    ],
)
def test_the_url_rules_checked_at_create(url: str, why: str | None) -> None:
    refusal = url_refusal(AddressPolicy(), url)
    assert (refusal is None) if why is None else (why in (refusal or "")), refusal
    check = data_check(HttpSettings())
    assert check({"url": url}) == (None if why is None else ("url", refusal))
    assert check({"url": {"$secret": "X"}}) is None  # not text: the schema's and worker's
    assert check("not an object") is None


def test_a_bad_network_setting_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="not a CIDR"):
        HttpSettings(allow_networks="10.0.0.0/8,nonsense")


def test_builtin_names() -> None:
    assert parse_names(["http,sql", "email", "http", " maintenance "]) == [
        "http", "sql", "email", "maintenance",
    ]  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"unknown built-in worker 'ftp'.*http, sql"):
        parse_names(["http,ftp"])
    assert split_modules(["app.jobs", "rota.builtin.sql", "rota.builtin.http"]) == (
        ["sql", "http"],
        ["app.jobs"],
    )
    with pytest.raises(ConfigurationError, match=r"rota.builtin.http"):
        split_modules(["rota.builtin"])


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"url": "ftp://x/"}, "only http"),
        ({"url": "http://u:p@x/"}, "user:password"),
        ({"url": "http:///path"}, "no host"),
        ({"url": "http://x/" + "a" * 3000}, "at most 2048"),
        ({"url": "http://x/", "headers": {"Host": "y"}}, "set by the worker"),
        ({"url": "http://x/", "headers": {"X": "a\r\nB: c"}}, "one line"),
        ({"url": "http://x/", "headers": {"bad name": "v"}}, "bad header name"),
        ({"url": "http://x/", "headers": {f"h{i}": "v" for i in range(51)}}, "at most 50"),
        ({"url": "http://x/", "body": "a", "json": {}}, "not both"),
        ({"url": "http://x/", "method": "TRACE"}, "method"),
        ({"url": "http://x/", "expectedStatus": [99]}, "between 100 and 599"),
        ({"url": "http://x/", "extra": 1}, "extra"),
    ],
)
def test_http_request_data_limits(data: dict[str, object], error: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=error):
        HttpRequest.model_validate(data)


def test_sql_and_email_data_limits() -> None:
    with pytest.raises(pydantic.ValidationError, match="parameter name"):
        SqlExecute.model_validate({"connection": "c", "statement": "x", "parameters": {"a-b": 1}})
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        SqlExecute.model_validate({"connection": "c", "statement": "x", "url": "sqlite://"})
    ok = {"to": ["a@example.com"], "subject": "hi", "text": "body"}
    EmailSend.model_validate(ok)
    for bad, error in [
        (ok | {"to": ["not an address"]}, "not a plain mail address"),
        (ok | {"to": ["a@example.com>\r\nBcc: x@y.z"]}, "not a plain mail address"),
        (ok | {"subject": "a\nBcc: x@y.z"}, "one line"),
        (ok | {"text": None}, "text, html or both"),
        (ok | {"to": []}, "at least 1"),
    ]:
        with pytest.raises(pydantic.ValidationError, match=error):
            EmailSend.model_validate(bad)


def test_each_builtin_job_type_publishes_its_schema(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    settings.smtp = SmtpSettings(host="127.0.0.1", from_address="rota@example.com")
    registry = load_registry(settings, [], ["http", "sql", "email", "maintenance"])
    assert sorted(registry) == ["email.send", "http.request", "rota.maintenance", "sql.execute"]
    described = registry.describe()
    http = described["http.request"]["schema"]
    assert isinstance(http, dict)
    assert http["required"] == ["url"]
    assert {"method", "url", "headers", "json", "timeoutSeconds", "expectedStatus"} <= set(
        http["properties"]  # type: ignore[arg-type]
    )
    sql = described["sql.execute"]["schema"]
    assert isinstance(sql, dict)
    assert "url" not in sql["properties"]
    assert described["rota.maintenance"]["concurrency"] == 1


def test_the_wiring_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    with pytest.raises(ConfigurationError, match="ROTA_SMTP__HOST"):
        load_registry(settings, [], ["email"])
    distributed = settings_for(tmp_path, redis_url="redis://x", amqp_url="amqp://x")
    with pytest.raises(ConfigurationError, match="ROTA_DATABASE_URL"):
        load_registry(distributed, ["rota.builtin.maintenance"])
    with pytest.raises(ConfigurationError, match="unknown built-in worker"):
        load_registry(settings, ["rota.builtin.nope"])


def test_the_cli_refuses_an_unknown_builtin() -> None:
    result = CliRunner().invoke(app, ["worker", "--worker-id", "w", "--builtin", "http,ftp"])
    assert result.exit_code == 2
    assert "unknown built-in worker 'ftp'" in result.output


def test_sql_helpers() -> None:
    assert engine_url("postgresql://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert engine_url("sqlite:///tmp/x.db") == "sqlite+aiosqlite:///tmp/x.db"
    assert engine_url("mysql+aiomysql://h/db") == "mysql+aiomysql://h/db"
    from datetime import date
    from decimal import Decimal

    assert jsonable(Decimal("1.50")) == "1.50"
    assert jsonable(date(2026, 1, 2)) == "2026-01-02"
    assert jsonable(b"\x00\x01") == "AAE="
    assert SqlSettings().connections == {}


def test_rota_dev_refuses_an_unknown_builtin() -> None:
    result = CliRunner().invoke(app, ["dev", "--builtin", "nope"])
    assert result.exit_code == 2
    assert "unknown built-in worker 'nope'" in result.output


async def test_the_embedded_runtime_takes_builtin_names(tmp_path: Path) -> None:
    from rota.app.server import prepare

    runtime = await prepare(settings_for(tmp_path), ["rota.builtin.sql"], None, ["http"])
    assert runtime.registry is not None
    assert sorted(runtime.registry) == ["http.request", "sql.execute"]


def test_email_without_its_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from rota.builtin import email

    monkeypatch.setitem(sys.modules, "aiosmtplib", None)  # import fails as if not installed
    smtp = SmtpSettings(host="127.0.0.1", from_address="rota@example.com")
    with pytest.raises(ConfigurationError, match=r"pip install 'rota\[email\]'"):
        email.definitions(smtp)


def test_connection_urls_and_passwords_are_secrets(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    settings.sql = SqlSettings.model_validate(
        {"connections": {"reports": "postgresql://u:hunter2@db/reports"}}
    )
    settings.smtp = SmtpSettings.model_validate({"host": "h", "password": "hunter2"})
    shown = settings.model_dump_json()
    assert "hunter2" not in shown
    assert "reports" in shown
    assert "hunter2" not in repr(settings)
