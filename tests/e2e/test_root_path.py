"""``rota dev`` behind a reverse proxy that serves it under ``/rota`` and removes the prefix
before passing requests on (``ROTA_API__ROOT_PATH``): the pages it serves, its redirects and
its cookies carry the prefix the browser sees (``docs/configuration.md``)."""

from __future__ import annotations

import httpx

from .conftest import ADMIN_PASSWORD, ADMIN_USER, RotaProcess


def test_rota_dev_under_a_proxys_prefix(rota_process: RotaProcess) -> None:
    rota_process.start(ROTA_API__ROOT_PATH="/rota")
    # what the proxy passes on: the path without its prefix
    with httpx.Client(base_url=rota_process.base, timeout=10) as proxied:
        home = proxied.get("/", headers={"Accept": "text/html"})
        assert home.status_code == 303
        assert home.headers["location"].startswith("/rota/ui/session/resume?next=/rota/")
        login = proxied.get("/login")
        assert 'action="/rota/login"' in login.text
        assert 'href="/rota/static/rota.css"' in login.text
        signed = proxied.post(
            "/login",
            data={"username": ADMIN_USER, "password": ADMIN_PASSWORD, "next": "/rota/jobs"},
            headers={"X-Rota-CSRF": "1"},
        )
        assert signed.status_code == 204, signed.text
        assert signed.headers["X-Rota-Redirect"] == "/rota/jobs"
        assert "Path=/rota;" in signed.headers["set-cookie"]
        assert proxied.get("/static/rota.js").status_code == 200
