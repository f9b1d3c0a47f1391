"""The settings of the built-in workers (``ROTA_HTTP__…``, ``ROTA_SQL__…``, ``ROTA_SMTP__…``):
sections of :class:`rota.app.settings.Settings`, defined here so that each built-in worker
takes its own section as a typed argument (the composition root passes it) and imports no
settings. Light on purpose: pydantic only.

Everything is safe by default: ``http.request`` reaches public addresses only, ``sql.execute``
knows no connection and ``email.send`` no SMTP server until an Admin configures them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field, SecretStr, field_validator

from rota.core.addresses import check_networks


class HttpSettings(BaseModel):
    """``http.request``: where it may connect (:class:`rota.core.addresses.AddressPolicy`), and
    its limits."""

    env_prefix: ClassVar[str] = "ROTA_HTTP__"

    allow_public: bool = Field(
        True,
        description="Reach public (globally routable) addresses. False: only what allow_networks "
        "or allow_hosts name.",
    )
    allow_networks: str = Field(
        "",
        description="Comma-separated CIDRs it may reach although they are not public "
        "(e.g. '10.1.2.0/24,fd00::/64'); loopback, private, link-local and the other special "
        "ranges are refused unless listed here.",
    )
    allow_hosts: str = Field(
        "",
        description="Comma-separated host names whose addresses it may reach whatever they are "
        "('*.internal.example' for a domain's subdomains).",
    )
    deny_networks: str = Field(
        "", description="Comma-separated CIDRs always refused (wins over the allow lists)."
    )
    deny_hosts: str = Field(
        "", description="Comma-separated host names always refused ('*.example' too)."
    )
    max_redirects: int = Field(5, ge=0, le=20, description="Redirects followed at most.")
    max_timeout_seconds: float = Field(
        300.0, gt=0, description="The longest timeout a job may ask for."
    )
    max_request_bytes: int = Field(
        1024 * 1024, ge=0, description="The largest request body (body or json) a job may send."
    )
    max_response_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="Response body bytes kept in the result; the rest is not read (truncated).",
    )
    user_agent: str = Field("rota-http", description="The User-Agent header unless a job sets one.")
    ca_file: str | None = Field(
        None,
        description="A PEM file of certificate authorities trusted besides the system's "
        "(an internal CA).",
    )

    @field_validator("allow_networks", "deny_networks")
    @classmethod
    def _networks(cls, value: str) -> str:
        return check_networks(value)


class SqlSettings(BaseModel):
    """``sql.execute``: the named connections, and limits."""

    connections: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='Connection name -> database URL, as JSON: \'{"reports": '
        '"postgresql://user:pw@db/reports"}\' (postgresql:// and sqlite:/// URLs). Jobs name a '
        "connection; a URL never comes from job data.",
    )
    statement_timeout_seconds: float = Field(
        30.0, gt=0, description="The longest a statement may run (a job may ask for less)."
    )
    max_rows: int = Field(100, ge=1, le=10_000, description="Rows returned at most.")
    max_statement_length: int = Field(
        100_000, ge=1, description="The longest statement text (characters)."
    )
    max_parameters: int = Field(1000, ge=0, description="Parameters a statement may take.")

    @field_validator("connections")
    @classmethod
    def _names(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name in value:
            if not name or len(name) > 100:
                raise ValueError("a connection name has 1 to 100 characters")
        return value


class SmtpSettings(BaseModel):
    """``email.send``: the SMTP server mail goes through, and limits."""

    host: str | None = Field(None, description="The SMTP server; unset: email.send refuses.")
    port: int | None = Field(
        None, ge=1, le=65535, description="Default 465 with tls, else 587 (STARTTLS) or 25."
    )
    username: str | None = None
    password: SecretStr | None = None
    starttls: bool = Field(
        True, description="Upgrade the connection with STARTTLS (refused if the server cannot)."
    )
    tls: bool = Field(False, description="Implicit TLS from the first byte (port 465).")
    validate_certs: bool = Field(True, description="Check the server's TLS certificate.")
    from_address: str | None = Field(
        None, description="The sender of every mail (jobs cannot choose it)."
    )
    timeout_seconds: float = Field(30.0, gt=0)
    max_recipients: int = Field(50, ge=1, description="To, cc and bcc together.")
    max_body_bytes: int = Field(1024 * 1024, ge=1, description="Text and HTML together.")
    allowed_recipient_domains: str = Field(
        "",
        description="Comma-separated domains mail may go to (empty: any).",
    )

    @property
    def effective_port(self) -> int:
        if self.port is not None:
            return self.port
        if self.tls:
            return 465
        return 587 if self.starttls else 25
