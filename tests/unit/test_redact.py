"""The one helper that masks URLs (rota.core.redact) over the forms URLs take."""

from __future__ import annotations

import pytest

from rota.app.startup import redact_url
from rota.core.redact import is_secret_name, mask_settings, mask_url, mask_urls


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://rota:hunter2@db:5432/rota", "postgresql://rota:***@db:5432/rota"),
        (
            "postgresql+asyncpg://rota:p%40ss@db/rota?ssl=1",
            "postgresql+asyncpg://rota:***@db/rota?ssl=1",
        ),
        ("postgresql://rota:p@ss@db/rota", "postgresql://rota:***@db/rota"),  # an unescaped @
        ("postgresql://rota:pa/ss@db/rota", "postgresql://rota:***@db/rota"),  # an unescaped /
        ("postgresql://rota:x@h1:5432,h2:5433/rota", "postgresql://rota:***@h1:5432,h2:5433/rota"),
        (
            "postgresql:///rota?host=/run/pg&password=hunter2",
            "postgresql:///rota?host=/run/pg&password=***",
        ),
        (
            "postgresql://rota@db/rota?sslmode=verify-full&sslpassword=hunter2&sslkey=/k.pem",
            "postgresql://rota@db/rota?sslmode=verify-full&sslpassword=***&sslkey=***",
        ),
        ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
        ("rediss://default:hunter2@cache:6380/1", "rediss://default:***@cache:6380/1"),
        ("amqp://guest:guest@[::1]:5672/vh", "amqp://guest:***@[::1]:5672/vh"),
        (
            "amqps://user:hunter2@mq.internal/vh?heartbeat=30",
            "amqps://user:***@mq.internal/vh?heartbeat=30",
        ),
        (
            "https://hooks.example/in?channel=ops&token=hunter2",
            "https://hooks.example/in?channel=ops&token=***",
        ),
        (
            "https://h/x?password=a&secret=b&key=c&page=2",
            "https://h/x?password=***&secret=***&key=***&page=2",
        ),
        (
            "https://h/x?api_key=a&apiKey=b&access_token=c",
            "https://h/x?api_key=***&apiKey=***&access_token=***",
        ),
        (
            "https://s3.example/o?X-Amz-Signature=abc&X-Amz-Date=1",
            "https://s3.example/o?X-Amz-Signature=***&X-Amz-Date=1",
        ),
        ("https://h/cb#access_token=abc&state=xyz", "https://h/cb#access_token=***&state=xyz"),
        ("https://h/x?token=", "https://h/x?token="),  # nothing to hide
        ("https://h/x?a=1;token=2", "https://h/x?a=1;token=***"),
        ("/api/v1/events?token=abc", "/api/v1/events?token=***"),
        ("https://user@h/p", "https://user@h/p"),  # no password
        ("https://h:8080/p@q", "https://h:8080/p@q"),  # a port, and an @ in the path
        ("sqlite:///data/rota.db", "sqlite:///data/rota.db"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("http://u:p@[not-closed/x?key=1", "http://u:***@[not-closed/x?key=***"),  # unparsable
        ("not a url", "not a url"),
        ("", ""),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert redact_url(url) == masked  # the start-up's name for the same helper
    assert mask_url(masked) == masked  # masking twice changes nothing


def test_mask_urls_in_a_text() -> None:
    text = (
        "Error 111 connecting to redis://:hunter2@cache:6379/0. Connection refused; "
        "POST 'https://hooks.example/in?token=tok1' failed, see amqp://guest:guest@mq/"
    )
    assert mask_urls(text) == (
        "Error 111 connecting to redis://:***@cache:6379/0. Connection refused; "
        "POST 'https://hooks.example/in?token=***' failed, see amqp://guest:***@mq/"
    )
    assert mask_urls("nothing to see") == "nothing to see"
    assert (
        mask_url("postgresql://u:hunter2@db/x", mask="********") == "postgresql://u:********@db/x"
    )


def test_mask_settings() -> None:
    settings = {
        "database_url": "postgresql://rota:hunter2@db/rota",
        "alert_webhook_url": "https://hooks.example/in?token=tok1",
        "auth_secret": "s" * 40,
        "auth": {"previous_secrets": "old", "access_token_minutes": 15, "issuer": "rota"},
        "api": {"metrics_token": "m", "max_body_bytes": 10},
        "worker": {"secrets_dir": "/run/secrets"},
        "smtp": {"password": "p", "host": "mail"},
        "hosts": ["https://u:p@a/", "plain"],
        "empty_secret": None,
    }
    assert mask_settings(settings) == {
        "database_url": "postgresql://rota:***@db/rota",
        "alert_webhook_url": "https://hooks.example/in?token=***",
        "auth_secret": "***",
        "auth": {"previous_secrets": "***", "access_token_minutes": 15, "issuer": "rota"},
        "api": {"metrics_token": "***", "max_body_bytes": 10},
        "worker": {"secrets_dir": "/run/secrets"},
        "smtp": {"password": "***", "host": "mail"},
        "hosts": ["https://u:***@a/", "plain"],
        "empty_secret": None,
    }
    assert is_secret_name("sslpassword")
    assert is_secret_name("X-Api-Key")
    assert not is_secret_name("secrets_dir")
    assert not is_secret_name("access_token_minutes")


def test_configuration_errors_name_urls_masked() -> None:
    """A URL refused at start is named in the error (the console's last line), masked."""
    from rota.core.errors import ConfigurationError
    from rota.redis.client import connect
    from rota.stores.urls import dialect_of

    with pytest.raises(ConfigurationError) as database:
        dialect_of("postgres ql://rota:hunter2@db/rota")
    assert "rota:***@db" in str(database.value)
    with pytest.raises(ConfigurationError) as redis:
        connect("redis://:hunter2@cache:notaport/0")
    assert "redis://:***@cache:notaport/0" in str(redis.value)
    for error in (database, redis):
        assert "hunter2" not in str(error.value)
