"""A job's own credentials: a token for that job alone, never the node's.

The node's account writes every job directory of the stack (the queue makes them), so the
job's code must not hold its token. The agent (root) keeps it and, for each job:

- exchanges it at Google's Security Token Service for a token downscoped by the job's
  Credential Access Boundary (:class:`trainstack_contract.jobaccess.JobAccess`: its own
  directory but what the agent writes there, and what it reads), again shortly before that
  token expires (:class:`Downscoper`);
- serves that token to the job's user alone, on loopback, where Google's client libraries and
  TensorFlow's Cloud Storage file system look for the metadata server (``GCE_METADATA_HOST``),
  answering the few paths they read (:class:`JobMetadataServer`); a connection from any other
  user is refused (the socket's owner, from the kernel's table of TCP sockets);
- closes the node's own metadata server to the job's user: an owner-matched firewall rule
  on a VM (:func:`close_metadata_server`), and in a local run the stand-in, which answers the
  node's token to the agent's user alone.

Standard library only, Python 3.10.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainstack_agent.cloud import CloudError, Http, Request, Retry
from trainstack_agent.metadata import TOKEN_MARGIN_SECONDS, Metadata
from trainstack_contract.iam import CLOUD_PLATFORM_SCOPE
from trainstack_contract.jobaccess import BoundaryError, JobAccess
from trainstack_contract.tokens import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT, socket_owner

STS_ROOT = "https://sts.googleapis.com"
MAX_ANSWER_BYTES = 64 * 1024
# Where a VM's metadata server is: the address a firewall rule closes to the job's user.
METADATA_ADDRESS = "169.254.169.254"
METADATA_HOSTS = frozenset({"metadata.google.internal", METADATA_ADDRESS, "metadata"})
# A firewall rule takes a moment; installing iptables where an image lacks it, minutes.
FIREWALL_SECONDS = 600
# The paths a client library reads from the metadata server to find and use its credentials.
_ROOT = "/computeMetadata/v1/"
_ACCOUNT = f"{_ROOT}instance/service-accounts/default/"


class CredentialError(CloudError):
    """The job's token cannot be made or served, or the node's cannot be closed to it."""


class Downscoper:
    """The job's token: the node's exchanged for one within ``boundary``, kept until shortly
    before it expires."""

    def __init__(
        self,
        http: Http,
        metadata: Metadata,
        boundary: dict[str, Any] | None,
        sts_root: str = STS_ROOT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.http = http
        self.metadata = metadata
        self.boundary = boundary
        self.url = f"{sts_root.rstrip('/')}/v1/token"
        self.clock = clock
        self._lock = threading.Lock()
        self._token: tuple[str, float, float] | None = None

    def token(self) -> tuple[str, int]:
        """The token and the seconds it has left."""
        if self.boundary is None:
            raise CredentialError("this job reaches no Cloud Storage bucket: it has no token")
        with self._lock:
            now = self.clock()
            if self._token is None or now >= self._token[1]:
                self._token = self._exchange(now)
            token, _, expires = self._token
            return token, max(0, int(expires - now))

    def _exchange(self, now: float) -> tuple[str, float, float]:
        form = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "subject_token": self.metadata.token(),
            # STS reads the boundary from a URL-quoted JSON value, as google-auth sends it.
            "options": urllib.parse.quote(json.dumps(self.boundary)),
        }
        body = urllib.parse.urlencode(form).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        try:
            data = self.http.call(Request("POST", self.url, headers, body), MAX_ANSWER_BYTES, retry=Retry(attempts=3))
            document = json.loads(data)
            token = document["access_token"]
            lifetime = float(document.get("expires_in") or 0)
        except CloudError as error:
            raise CredentialError(f"the job's token: {error}") from None
        except (ValueError, KeyError, TypeError):
            raise CredentialError("the job's token: the token service's answer is not a token") from None
        if not isinstance(token, str) or not token or lifetime <= 0:
            raise CredentialError("the job's token: the token service's answer is not a token")
        return token, now + max(0.0, lifetime - TOKEN_MARGIN_SECONDS), now + lifetime


class JobMetadataServer(ThreadingHTTPServer):
    """The metadata server as the job's code sees it: its own token, the project's id and the
    account's email, to connections of ``uid`` alone (None: any, where the job runs as the
    agent's own user and nothing tells them apart)."""

    daemon_threads = True

    def __init__(
        self,
        downscoper: Downscoper,
        project: str,
        email: str,
        uid: int | None,
        log: Callable[[str], None],
        proc_net: Path = Path("/proc/self/net"),
    ) -> None:
        self.downscoper = downscoper
        self.project = project
        self.email = email
        self.uid = uid
        self.log = log
        self.proc_net = proc_net
        self.refused = 0
        super().__init__(("127.0.0.1", 0), _JobMetadataHandler)

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: what ``GCE_METADATA_HOST`` names."""
        return f"127.0.0.1:{self.server_address[1]}"

    def environment(self) -> dict[str, str]:
        """The variables that point the job's client libraries here (google-auth reads both,
        TensorFlow's Cloud Storage file system the first)."""
        return {"GCE_METADATA_HOST": self.host, "GCE_METADATA_IP": self.host}

    def answer(self, path: str) -> tuple[int, str, str]:
        """(HTTP status, content type, body) for ``path``."""
        route, _, _ = path.partition("?")
        if route in ("", "/"):
            return 200, "application/text", "computeMetadata/\n"
        if route == f"{_ROOT}project/project-id":
            return 200, "application/text", self.project
        if route in (_ACCOUNT, f"{_ACCOUNT}email"):
            if route.endswith("email"):
                return 200, "application/text", self.email
            info = {"aliases": ["default"], "email": self.email, "scopes": [CLOUD_PLATFORM_SCOPE]}
            return 200, "application/json", json.dumps(info)
        if route == f"{_ACCOUNT}token":
            try:
                token, expires_in = self.downscoper.token()
            except CredentialError as error:
                self.log(f"job credentials: {error}")
                return 503, "application/text", str(error)
            return (
                200,
                "application/json",
                json.dumps({"access_token": token, "expires_in": expires_in, "token_type": "Bearer"}),
            )
        return 404, "application/text", "not served to a job"


class _JobMetadataHandler(BaseHTTPRequestHandler):
    server: JobMetadataServer

    def do_GET(self) -> None:
        server = self.server
        if server.uid is not None and socket_owner(self.client_address[:2], server.proc_net) != server.uid:
            server.refused += 1
            self._send(403, "application/text", "only the job's own user reaches its credentials")
            return
        if self.headers.get("Metadata-Flavor") != "Google":
            self._send(403, "application/text", "Missing Metadata-Flavor:Google header")
            return
        self._send(*server.answer(self.path))

    def _send(self, status: int, content_type: str, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        # Client libraries take a metadata server by this header on every answer.
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server names it so
        """Quiet: the agent logs what fails."""


def metadata_host(root: str) -> str:
    return urllib.parse.urlsplit(root).hostname or ""


def firewall_rule(uid: int, action: str) -> list[list[str]]:
    """The iptables commands that add (``-I``) or delete (``-D``) the rule that rejects
    ``uid``'s connections to the metadata server."""
    rule = ["OUTPUT", "-d", METADATA_ADDRESS, "-m", "owner", "--uid-owner", str(uid), "-j", "REJECT"]
    return [["iptables", "-w", action, *rule]]


def close_metadata_server(
    uid: int, metadata_root: str, run: Callable[[list[str]], int], log: Callable[[str], None]
) -> Callable[[], None]:
    """Closes the VM's metadata server to ``uid`` (an owner-matched iptables rule on this
    node) and returns what opens it again. A local run's stand-in does this itself (it answers
    the node's token to the agent's user alone), so nothing is done for one. Fails closed:
    without the rule, the job does not start."""
    if metadata_host(metadata_root) not in METADATA_HOSTS:
        return lambda: None
    if shutil.which("iptables") is None:
        # Debian's own package (its nftables backend), as Docker is installed where missing.
        log("installing iptables, to close the metadata server to the job's user")
        for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "iptables"]):
            run(step)
    if shutil.which("iptables") is None:
        raise CredentialError("iptables is not installed: cannot close the metadata server to the job's user")
    for command in firewall_rule(uid, "-I"):
        if run(command) != 0:
            raise CredentialError(f"cannot close the metadata server to the job's user ({' '.join(command)} failed)")
    log(f"the metadata server is closed to the job's user (uid {uid}); the job's code gets its own token")

    def reopen() -> None:
        for command in firewall_rule(uid, "-D"):
            if run(command) != 0:
                log(f"could not remove the metadata rule for uid {uid}")

    return reopen


def run_command(command: list[str]) -> int:
    try:
        return subprocess.run(command, capture_output=True, timeout=FIREWALL_SECONDS, check=False).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 1


@contextlib.contextmanager
def serving(server: JobMetadataServer) -> Iterator[JobMetadataServer]:
    """``server`` answering on a thread of its own until the block ends."""
    thread = threading.Thread(target=server.serve_forever, name="job-metadata", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def job_credentials(
    access: JobAccess,
    uid: int | None,
    http: Http,
    metadata: Metadata,
    endpoints: tuple[str, str],
    log: Callable[[str], None],
    run: Callable[[list[str]], int] = run_command,
) -> Iterator[dict[str, str]]:
    """While the block runs, the job's own token is served to ``uid`` and the node's metadata
    server closed to it; yields the variables that point the job's code there. ``endpoints``:
    the node's metadata root and the token service's root."""
    metadata_root, sts_root = endpoints
    try:
        boundary = access.boundary()
    except BoundaryError as error:
        raise CredentialError(str(error)) from None
    project = metadata.get("project/project-id") or ""
    email = metadata.get("instance/service-accounts/default/email") or "default"
    reopen = close_metadata_server(uid, metadata_root, run, log) if uid is not None else (lambda: None)
    try:
        server = JobMetadataServer(Downscoper(http, metadata, boundary, sts_root), project, email, uid, log)
        with serving(server):
            yield server.environment()
    finally:
        reopen()
