"""The agent's HTTP never carries its token to a host it did not call: a redirect is refused.

Two real servers on loopback: the one called answers with a redirect to the other, which
records whether any request reached it and with which headers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from http_stand_in import Scripted, scripted_server, serving

from trainstack_agent.cloud import CloudError, Http, Redirected, Request, Retry
from trainstack_agent.gcs import Storage
from trainstack_agent.metadata import Metadata

TOKEN = "ya29.secret-token-value"


class _Redirector(ThreadingHTTPServer):
    """Answers every request with ``status`` and a Location at ``target`` (same path)."""

    def __init__(self, status: int, target: str) -> None:
        self.status = status
        self.target = target
        super().__init__(("127.0.0.1", 0), _RedirectHandler)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RedirectHandler(BaseHTTPRequestHandler):
    server: _Redirector

    def _serve(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(self.server.status)
        self.send_header("Location", f"{self.server.target}{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_DELETE = _serve  # noqa: N815 (http.server's naming)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def elsewhere() -> Iterator[Scripted]:
    """The host a redirect names: it answers 200 to anything and records what reached it."""
    with scripted_server() as scripted:
        yield scripted


@contextmanager
def redirector(status: int, target: str) -> Iterator[_Redirector]:
    with serving(_Redirector(status, target)) as server:
        yield server


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_and_the_token_reaches_no_other_host(elsewhere: Scripted, status: int) -> None:
    elsewhere.answer("/storage/v1/b/b/o/jobs%2Fx%2Fstatus%2Fjob.json", (200, b"{}"))
    with redirector(status, elsewhere.root) as called:
        waits: list[float] = []
        client = Http(timeout=5, retry=Retry(attempts=3), sleep=waits.append)
        request = Request(
            "GET",
            f"{called.root}/storage/v1/b/b/o/jobs%2Fx%2Fstatus%2Fjob.json?alt=media",
            {"Authorization": f"Bearer {TOKEN}"},
        )
        with pytest.raises(Redirected, match=f"HTTP {status} redirect refused"):
            client.call(request, 1 << 20)
        assert waits == [], "a redirect is an answer, not an outage: it is not retried"
    seen = [request["headers"].get("Authorization") for request in elsewhere.requests]
    assert seen == [], f"the redirect was followed, with Authorization headers {seen}"


def test_storage_reads_writes_and_downloads_follow_no_redirect(elsewhere: Scripted, tmp_path: Path) -> None:
    """Every way the agent reaches Cloud Storage with its token, against a redirecting API."""
    with scripted_server() as metadata_server:
        metadata_server.answer(
            "/m/instance/service-accounts/default/token",
            (200, f'{{"access_token": "{TOKEN}", "expires_in": 3600}}'.encode()),
        )
        with redirector(307, elsewhere.root) as called:
            client = Http(timeout=5, retry=Retry(attempts=1))
            storage = Storage(client, Metadata(client, f"{metadata_server.root}/m"), called.root)
            for call in (
                lambda: storage.read("gs://b/jobs/x/status/job.json", 1024),
                lambda: storage.write("gs://b/jobs/x/status/job.json", b"{}"),
                lambda: storage.download("gs://b/trainstack/code/x.zip", tmp_path / "x.zip", 1024),
            ):
                with pytest.raises(CloudError, match="redirect refused"):
                    call()
    seen = [request["headers"].get("Authorization") for request in elsewhere.requests]
    assert seen == [], f"requests reached the host a redirect named, with Authorization headers {seen}"
