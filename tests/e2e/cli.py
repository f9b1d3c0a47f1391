"""Drive the ``rota`` operator commands as a user does, in this process (typer's CliRunner:
no interpreter start per command), against a real server; each :class:`Cli` has its own
config dir, so its sign-in is its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from click.testing import Result
from typer.testing import CliRunner

from rota.cli import app

from .conftest import ADMIN_PASSWORD, ADMIN_USER


@dataclass
class Cli:
    url: str
    config: Path
    """``XDG_CONFIG_HOME`` of this user of the CLI."""

    def env(self, **extra: str | None) -> dict[str, str | None]:
        return {
            "XDG_CONFIG_HOME": str(self.config),
            "ROTA_URL": None,
            "ROTA_TOKEN": None,
            "ROTA_API_KEY": None,
            "COLUMNS": "200",
            **extra,
        }

    def run(self, *args: str, input: str | None = None, **env: str | None) -> Result:
        return CliRunner().invoke(app, list(args), input=input, env=self.env(**env))

    def ok(self, *args: str, **env: str | None) -> Result:
        """Run a command that must succeed."""
        result = self.run(*args, **env)
        assert result.exit_code == 0, (
            f"rota {' '.join(args)}: exit {result.exit_code}\n{result.stdout}\n{result.stderr}"
            f"\n{result.exception!r}"
        )
        return result

    def json(self, *args: str) -> Any:
        """Run a read with ``--json``; its decoded output."""
        return orjson.loads(self.ok(*args, "--json").stdout)

    def login(self) -> None:
        self.ok(
            "login",
            "--url",
            self.url,
            "--user",
            ADMIN_USER,
            "--password-stdin",
            input=ADMIN_PASSWORD + "\n",
        )

    def credentials(self) -> dict[str, Any]:
        data: dict[str, Any] = orjson.loads(
            (self.config / "rota" / "credentials.json").read_bytes()
        )
        return data
