"""``http.request`` against an HTTP server of the test's own on loopback: allowed explicitly by
the test's settings, refused by the default ones (loopback, 169.254.169.254, a redirect to an
address that is not allowed); statuses, retries, truncation, redirects; end to end through the
embedded runtime."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota.builtin.config import HttpSettings
from rota.builtin.http import Fetcher, HttpRequest, HttpStatusError
from rota.core.errors import PermanentError, ValidationError
from rota.core.models import OccurrenceStatus
from tests.helpers import RuntimeFactory
from tests.integration.builtin_servers import (
    BIG,
    _Server,
    http_server,
    run_job,
    self_signed,
    wait_for_log,
)
from tests.integration.test_api import assert_problem, fields

S = OccurrenceStatus
LOOPBACK = {"allow_networks": "127.0.0.1/32"}
log = logging.getLogger("test")


@pytest.fixture
def server() -> Iterator[_Server]:
    with http_server() as s:
        yield s


def fetch(settings: HttpSettings, **data: Any) -> Any:
    return Fetcher(settings).fetch(HttpRequest.model_validate(data), log)


async def test_a_request_to_an_allowed_loopback_server(server: _Server) -> None:
    result = await fetch(
        HttpSettings(**LOOPBACK),
        method="POST",
        url=f"{server.url}/echo?x=1",
        headers={"X-Test": "yes"},
        json={"a": [1, 2]},
    )
    assert result["status"] == 200
    assert result["bodyTruncated"] is False
    assert result["headers"]["content-type"] == "application/json"
    echoed = json.loads(result["body"])
    assert echoed["method"] == "POST"
    assert echoed["path"] == "/echo?x=1"
    assert json.loads(echoed["body"]) == {"a": [1, 2]}
    assert echoed["headers"]["X-Test"] == "yes"
    assert echoed["headers"]["Content-Type"] == "application/json"
    assert echoed["headers"]["Host"] == server.url.removeprefix("http://")
    assert echoed["headers"]["User-Agent"] == "rota-http"
    own = await fetch(
        HttpSettings(**LOOPBACK), url=f"{server.url}/echo", headers={"user-agent": "mine/1"}
    )
    sent = {k.lower(): v for k, v in json.loads(own["body"])["headers"].items()}
    assert sent["user-agent"] == "mine/1"


async def test_loopback_is_refused_by_default(server: _Server) -> None:
    with pytest.raises(PermanentError, match=r"127.0.0.1 is not public"):
        await fetch(HttpSettings(), url=f"{server.url}/echo")
    assert server.seen == []  # refused before connecting


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[fd00::1]/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://0.0.0.0/",
        "http://localhost/",
        "http://2130706433/",  # 127.0.0.1 as one number
    ],
)
async def test_special_addresses_are_refused_by_default(url: str) -> None:
    with pytest.raises(PermanentError, match="not public"):
        await fetch(HttpSettings(), url=url)


async def test_a_denied_host_and_a_narrow_allow_list(server: _Server) -> None:
    denied = HttpSettings(**LOOPBACK, deny_networks="127.0.0.0/8")
    with pytest.raises(PermanentError, match="denied"):
        await fetch(denied, url=f"{server.url}/echo")
    by_name = HttpSettings(allow_hosts="localhost", deny_hosts="*.internal")
    with pytest.raises(PermanentError, match="denied"):
        await fetch(by_name, url="http://db.internal/")
    port = server.server_address[1]
    result = await fetch(by_name, url=f"http://localhost:{port}/echo")
    assert json.loads(result["body"])["headers"]["Host"] == f"localhost:{port}"


async def test_a_redirect_is_followed_and_each_hop_checked(server: _Server) -> None:
    settings = HttpSettings(**LOOPBACK)
    result = await fetch(settings, url=f"{server.url}/redirect?to=/echo&status=303")
    assert result["status"] == 200
    assert result["redirects"] == [f"{server.url}/echo"]
    for target in (
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.2/",  # loopback, but not the allowed 127.0.0.1
        "file:///etc/passwd",
    ):
        with pytest.raises(PermanentError, match=r"not public|refused"):
            await fetch(settings, url=f"{server.url}/redirect?to={target}")
    # Not following: the redirect itself is the answer (its target is not contacted).
    no_follow = await fetch(
        settings,
        url=f"{server.url}/redirect?to=http://169.254.169.254/",
        followRedirects=False,
        expectedStatus=[302],
    )
    assert no_follow["headers"]["location"] == "http://169.254.169.254/"


async def test_redirects_are_capped(server: _Server) -> None:
    settings = HttpSettings(**LOOPBACK, max_redirects=2)
    loop = f"{server.url}/redirect?to=/redirect%3Fto%3D/redirect%253Fto%253D/echo"
    with pytest.raises(PermanentError, match="more than 2 redirects"):
        await fetch(settings, url=loop)


async def test_statuses_decide_success_retry_or_failure(server: _Server) -> None:
    settings = HttpSettings(**LOOPBACK)
    with pytest.raises(HttpStatusError, match="HTTP 502"):
        await fetch(settings, url=f"{server.url}/status/502")
    with pytest.raises(HttpStatusError, match="HTTP 429"):
        await fetch(settings, url=f"{server.url}/status/429")
    with pytest.raises(PermanentError, match="unexpected status: HTTP 404"):
        await fetch(settings, url=f"{server.url}/status/404")
    with pytest.raises(PermanentError, match="HTTP 500"):
        await fetch(settings, url=f"{server.url}/status/500", retryOn5xx=False)
    ok = await fetch(settings, url=f"{server.url}/status/404", expectedStatus=[404])
    assert ok["status"] == 404
    assert ok["body"] == "status body"


async def test_a_large_body_is_truncated(server: _Server) -> None:
    result = await fetch(HttpSettings(**LOOPBACK), url=f"{server.url}/big")
    assert result["bodyTruncated"] is True
    assert len(result["body"]) == 64 * 1024 < BIG
    small = await fetch(HttpSettings(**LOOPBACK, max_response_bytes=10), url=f"{server.url}/big")
    assert small["body"] == "x" * 10


async def test_the_limits_of_a_request(server: _Server) -> None:
    settings = HttpSettings(**LOOPBACK, max_request_bytes=10, max_timeout_seconds=5)
    with pytest.raises(PermanentError, match="over the limit of 10"):
        await fetch(settings, url=f"{server.url}/echo", method="POST", body="x" * 11)
    with pytest.raises(PermanentError, match="timeoutSeconds"):
        await fetch(settings, url=f"{server.url}/echo", timeoutSeconds=6)


async def test_end_to_end_through_the_embedded_runtime(
    runtime_factory: RuntimeFactory, server: _Server
) -> None:
    rt = await runtime_factory({"http.allow_networks": "127.0.0.1/32"}, ["rota.builtin.http"])
    occ = await run_job(rt, "http.request", {"url": f"{server.url}/echo", "method": "PUT"})
    assert occ.status is S.COMPLETED, occ.exception
    assert occ.result["status"] == 200
    assert json.loads(occ.result["body"])["method"] == "PUT"
    await wait_for_log(rt, occ, "PUT", "200")

    # 5xx: retried (the job's retries), then completed
    flaky = await run_job(
        rt,
        "http.request",
        {"url": f"{server.url}/flaky?fails=1"},
        max_retries=2,
        retry_delay_seconds=0.1,
    )
    assert flaky.status is S.COMPLETED, flaky.exception
    assert flaky.attempt == 2
    assert flaky.result["body"] == "recovered"

    # an unexpected 4xx fails for good at once
    gone = await run_job(rt, "http.request", {"url": f"{server.url}/status/410"}, max_retries=3)
    assert gone.status is S.FAILED
    assert gone.attempt == 1
    assert "PermanentError: unexpected status: HTTP 410" in (gone.exception or "")

    # job data that does not fit the model is refused before any request
    bad = await run_job(rt, "http.request", {"url": f"{server.url}/echo", "headers": {"Host": "x"}})
    assert bad.status is S.FAILED
    assert "header Host is set by the worker" in (bad.exception or "")
    assert len(server.seen) == 4  # the PUT, the flaky one twice, the 410; not this one


async def test_the_default_settings_refuse_loopback_end_to_end(
    runtime_factory: RuntimeFactory, server: _Server
) -> None:
    rt = await runtime_factory(None, ["rota.builtin.http"])
    # refused when the job is created (the same policy as the worker's, no look-up)
    for url in (f"{server.url}/echo", "http://169.254.169.254/latest/", "ftp://example.com/"):
        with pytest.raises(ValidationError) as refused:
            await run_job(rt, "http.request", {"url": url}, max_retries=3)
        assert refused.value.field == "jobData.url"
    assert server.seen == []
    # and when it runs: a redirect from an allowed host name to an address that is not
    allowed = await runtime_factory({"http.allow_hosts": "localhost"}, ["rota.builtin.http"])
    port = server.url.rsplit(":", 1)[1]
    hop = f"http://localhost:{port}/redirect?to={server.url}/echo"
    occ = await run_job(allowed, "http.request", {"url": hop}, max_retries=3)
    assert occ.status is S.FAILED
    assert occ.attempt == 1
    assert "127.0.0.1" in (occ.exception or "")
    assert "not public" in (occ.exception or "")
    assert [path for _, path, _, _ in server.seen] == ["/redirect"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_https_checks_the_certificate_of_the_host_named(tmp_path: Path) -> None:
    """The connection goes to the checked address, yet TLS (SNI and the certificate check)
    is for the URL's host name."""
    with http_server(tls=self_signed(tmp_path, "DNS:localhost")) as tls_server:
        port = tls_server.server_address[1]
        ca = str(tmp_path / "cert.pem")
        settings = HttpSettings(allow_hosts="localhost", ca_file=ca)
        result = await fetch(settings, url=f"https://localhost:{port}/echo")
        assert json.loads(result["body"])["headers"]["Host"] == f"localhost:{port}"
        by_address = HttpSettings(**LOOPBACK, ca_file=ca)  # the certificate names localhost
        with pytest.raises(PermanentError, match=r"certificate of 127\.0\.0\.1 is not trusted"):
            await fetch(by_address, url=f"https://127.0.0.1:{port}/echo")
        with pytest.raises(PermanentError, match="CA_FILE"):  # not trusted without ca_file
            await fetch(HttpSettings(allow_hosts="localhost"), url=f"https://localhost:{port}/")


REFUSED_AT_CREATE = [
    "file:///etc/passwd",
    "ftp://example.org/x",
    "https://user:pass@example.org/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.google.internal./computeMetadata/v1/",
    "http://2852039166/",  # 169.254.169.254 as one number
    "http://0xa9fea9fe/",
    "http://[::ffff:169.254.169.254]/",
    "http://localhost:8080/",
    "http://127.0.0.1/",
    "http://10.1.2.3/",
]


@pytest.mark.parametrize("url", REFUSED_AT_CREATE)
async def test_a_refused_url_is_refused_when_the_job_is_created(
    client: httpx.AsyncClient, url: str
) -> None:
    """The static URL rules (scheme, credentials, addresses and names known without DNS) of
    the worker's policy, checked by the server: a 422 naming jobData.url, nothing stored."""
    job = {"jobType": "http.request", "cronExpression": "0 * * * *", "jobData": {"url": url}}
    problem = assert_problem(await client.post("/api/v1/jobs", json=job), 422)
    assert fields(problem) == ["jobData.url"], problem
    bulk = {"jobs": [job | {"jobData": {"url": "https://example.org/"}}, job]}
    problem = assert_problem(await client.post("/api/v1/jobs/bulk", json=bulk), 422)
    assert fields(problem) == ["jobs[1].jobData.url"], problem
    assert (await client.get("/api/v1/jobs")).json()["items"] == []


async def test_a_refused_url_is_refused_on_update_and_trigger(client: httpx.AsyncClient) -> None:
    good = {"url": "https://example.org/hook", "method": "POST"}
    job = {"jobType": "http.request", "cronExpression": "0 * * * *", "jobData": good}
    created = await client.post("/api/v1/jobs", json=job)
    assert created.status_code == 201, created.text
    path = f"/api/v1/jobs/{created.json()['id']}"
    for url in ("http://169.254.169.254/", "https://u:p@example.org/"):
        problem = assert_problem(await client.patch(path, json={"jobData": {"url": url}}), 422)
        assert fields(problem) == ["jobData.url"]
        trigger = await client.post(f"{path}/trigger", json={"jobData": {"url": url}})
        assert fields(assert_problem(trigger, 422)) == ["jobData.url"]
    assert (await client.get(path)).json()["jobData"] == good
    # another job type's data is not held to these rules; changing the type is
    other = await client.post("/api/v1/jobs", json=job | {"jobType": "mine", "jobData": {
        "url": "file:///x"}})  # fmt: skip
    assert other.status_code == 201, other.text
    retyped = await client.patch(
        f"/api/v1/jobs/{other.json()['id']}", json={"jobType": "http.request"}
    )
    assert fields(assert_problem(retyped, 422)) == ["jobData.url"]


async def test_the_settings_allow_what_the_worker_would_reach(
    runtime_factory: RuntimeFactory,
) -> None:
    """The server reads the same ROTA_HTTP__ lists as the worker (the runtime's wiring): what
    they allow is accepted; a host name is not looked up at create (it is when the job runs)."""
    rt = await runtime_factory(
        {"http.allow_networks": "10.0.0.0/8", "http.allow_hosts": "localhost"}
    )
    at = rt.jobs.now() + timedelta(days=1)
    for url in ("http://10.1.2.3/", "http://localhost:8080/x", "https://no-such.invalid/"):
        await rt.jobs.create_job({"job_type": "http.request", "execute_at": at,
                                  "job_data": {"url": url}})  # fmt: skip
    for url in ("http://127.0.0.1/", "http://user@10.1.2.3/"):
        with pytest.raises(ValidationError) as refused:
            await rt.jobs.create_job({"job_type": "http.request", "execute_at": at,
                                      "job_data": {"url": url}})  # fmt: skip
        assert refused.value.field == "jobData.url"
