"""``Prefer: return=minimal`` read as RFC 7240 writes it (the bulk create's answer)."""

from __future__ import annotations

import pytest

from rota.api.routes.jobs import prefers_minimal


@pytest.mark.parametrize(
    ("header", "minimal"),
    [
        (None, False),
        ("", False),
        ("return=minimal", True),
        ("Return = Minimal", True),
        ('return="minimal"', True),
        ("respond-async, wait=10, return=minimal;x=1", True),
        ("return=representation", False),
        ("return-minimal", False),
        ("handling=lenient", False),
    ],
)
def test_prefer_return_minimal_is_read_as_rfc_7240_writes_it(
    header: str | None, minimal: bool
) -> None:
    assert prefers_minimal(header) is minimal
