"""The cloud services a local run's nodes call, on this machine: the metadata server, the
Compute Engine API (get and start an instance), Google's Security Token Service (a job's
downscoped token) and the stack's bucket.

The node agent reaches each through its ``TRAINSTACK_*`` variables; nothing in the agent
knows it is talking to a stand-in.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trainstack_contract as contract
from trainstack.base.bucket import Bucket, DirectoryBucket
from trainstack.stackmodel.resolved import ResolvedJob
from trainstack_contract.jobaccess import MAX_BOUNDARY_RULES
from trainstack_contract.names import ANY_BUCKET_NAME
from trainstack_contract.tokens import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT, socket_owner

# What the metadata server stand-in answers for the project id and the VM's token, and the
# Compute Engine stand-in accepts.
LOCAL_PROJECT = "trainstack-local"
# A stand-in's fixed token: it opens nothing outside this machine.
LOCAL_TOKEN = "trainstack-local-token"  # noqa: S105
# The nodes' account, as the metadata stand-in names it.
LOCAL_ACCOUNT = "trainstack-local-node"
# How long the token service's tokens last (Google's: as long as the token exchanged, at most an hour).
JOB_TOKEN_SECONDS = 3599
# The prefix of every job token the token service stand-in issues.
JOB_TOKEN_PREFIX = "trainstack-local-job-"  # noqa: S105 - a prefix, not a token
_BUCKET_RESOURCE = re.compile(rf"//storage\.googleapis\.com/projects/_/buckets/{ANY_BUCKET_NAME}")
_ROLE_PERMISSIONS = re.compile(r"inRole:roles/[A-Za-z0-9_.]{1,100}")
# The longest condition expression Google takes in a boundary rule (IAM Conditions' limit,
# 12,800 characters, unverified for boundaries).
MAX_CONDITION_CHARS = 12_800


class MetadataServer(ThreadingHTTPServer):
    """Answers ``/<node>/computeMetadata/v1/...`` like the metadata server answers that node."""

    def __init__(
        self,
        instances: dict[str, dict[str, str]],
        project: dict[str, str],
        zone: str,
        preempted: set[str] | None = None,
        proc_net: Path | None = None,
    ) -> None:
        """``preempted``: the nodes Compute Engine is preempting, whose instance/preempted
        says TRUE (a set the caller keeps up to date). ``proc_net``: the socket tables of the
        nodes' network namespace; where given, the node's token is answered to connections of
        this process's user alone (the agents'), as a VM's firewall closes the metadata server
        to the job's user (trainstack_agent.jobtoken): a job's code that asks gets a 403."""
        self.proc_net = proc_net
        self.instances = instances
        self.project_attributes = project
        self.zone = zone
        self.preempted: set[str] = set() if preempted is None else preempted
        # Paths ("instance/attributes/KEY") the server answers with an HTTP error status
        # instead (a test's unavailable metadata server).
        self.failures: dict[str, int] = {}
        super().__init__(("127.0.0.1", 0), _MetadataHandler)

    def root_for(self, node: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{node}/computeMetadata/v1"

    def lookup(self, node: str, path: str) -> str | None:
        attributes = self.instances.get(node)
        if attributes is None:
            return None
        if path.startswith("instance/attributes/"):
            return attributes.get(path.removeprefix("instance/attributes/"))
        if path.startswith("project/attributes/"):
            return self.project_attributes.get(path.removeprefix("project/attributes/"))
        if path == "instance/name":
            return node
        if path == "instance/zone":
            return f"projects/0/zones/{self.zone}"
        if path == "instance/preempted":
            return "TRUE" if node in self.preempted else "FALSE"
        if path == "project/project-id":
            return LOCAL_PROJECT
        if path == "instance/service-accounts/default/token":
            return json.dumps({"access_token": LOCAL_TOKEN, "expires_in": 3599, "token_type": "Bearer"})
        if path == "instance/service-accounts/default/email":
            return f"{LOCAL_ACCOUNT}@{LOCAL_PROJECT}.iam.gserviceaccount.com"
        return None

    def closed_to(self, client: tuple[str, int], path: str) -> bool:
        """Whether ``path`` is refused to the connection from ``client``: the node's token,
        to any user but this process's (an unknown one included)."""
        if self.proc_net is None or not path.startswith("instance/service-accounts/"):
            return False
        return socket_owner(client, self.proc_net) != os.geteuid()


class ComputeApiServer(ThreadingHTTPServer):
    """Answers the Compute Engine API calls a boot script makes on its cluster's instances:
    ``GET .../projects/P/zones/Z/instances/NAME`` (the instance's ``status``) and ``POST
    .../instances/NAME/start``. Both need the token the metadata stand-in hands out; any
    other instance, project, zone or verb is a 404, as a real API call on something that is
    not there. Every call is recorded (``calls``, and a line in ``log``)."""

    def __init__(
        self,
        zone: str,
        status: Callable[[str], str | None],
        start: Callable[[str], bool],
        log: Path,
    ) -> None:
        """``status(instance)``: its status, or None when there is no such instance;
        ``start(instance)``: boots it when stopped (False: no such instance)."""
        self.zone = zone
        self.status = status
        self.start = start
        self.log = log
        self.calls: list[str] = []
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ComputeHandler)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, call: str) -> None:
        with self._lock:
            self.calls.append(call)
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(f"{time.time():.3f} {call}\n")


# /projects/P/zones/Z/instances/NAME[/VERB]
_INSTANCE_PATH = re.compile(r"/projects/([a-z][-a-z0-9]*)/zones/([a-z0-9-]+)/instances/([a-z][-a-z0-9]*)(?:/(\w+))?")


class _ComputeHandler(BaseHTTPRequestHandler):
    server: ComputeApiServer

    def _target(self, method: str) -> tuple[str, str | None] | None:
        if self.headers.get("Authorization") != f"Bearer {LOCAL_TOKEN}":
            self.send_error(401, "Request is missing required authentication credential")
            return None
        match = _INSTANCE_PATH.fullmatch(self.path)
        if match is None or match[1] != LOCAL_PROJECT or match[2] != self.server.zone:
            self.send_error(404)
            return None
        instance, verb = match[3], match[4]
        self.server.record(f"{method} {instance}{'/' + verb if verb else ''}")
        return instance, verb

    def _answer(self, document: dict[str, Any]) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        target = self._target("GET")
        if target is None:
            return
        instance, verb = target
        status = self.server.status(instance) if verb is None else None
        if status is None:
            self.send_error(404)
            return
        self._answer({"kind": "compute#instance", "name": instance, "status": status})

    def do_POST(self) -> None:
        target = self._target("POST")
        if target is None:
            return
        instance, verb = target
        # The body, if any, is read and ignored: start takes none.
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if verb != "start" or not self.server.start(instance):
            self.send_error(404)
            return
        self._answer(
            {"kind": "compute#operation", "operationType": "start", "targetLink": instance, "status": "RUNNING"}
        )

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server names it so
        """Quiet: the calls are recorded in the log file instead."""


class _MetadataHandler(BaseHTTPRequestHandler):
    server: MetadataServer

    def do_GET(self) -> None:
        # The real server refuses requests without this header; so does the stand-in.
        if self.headers.get("Metadata-Flavor") != "Google":
            self.send_error(403, "Missing Metadata-Flavor:Google header")
            return
        node, _, rest = self.path.lstrip("/").partition("/computeMetadata/v1/")
        if self.server.closed_to(self.client_address[:2], rest):
            # A VM's firewall rejects the job's user outright; a 403 here says the same.
            self.send_error(403, "the node's metadata server is closed to the job's user")
            return
        failure = self.server.failures.get(rest)
        if failure is not None:
            self.send_error(failure)
            return
        value = self.server.lookup(node, rest)
        if value is None:
            self.send_error(404)
            return
        body = value.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/text")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server names it so
        """Quiet: the nodes' own logs say what they fetched."""


class TokenServiceServer(ThreadingHTTPServer):
    """Google's Security Token Service as a job's downscoped token is asked of it: ``POST
    /v1/token``, a form of RFC 8693's token exchange whose subject is the node's token and
    whose ``options`` hold the Credential Access Boundary (URL-quoted JSON). Anything else, a
    subject that is not the node's token, or a boundary Google would refuse (no rule, more
    than 10, a resource that is not a bucket, permissions not ``inRole:``), is answered 400
    as STS answers. Each token issued is recorded with its boundary (``issued``)."""

    def __init__(self) -> None:
        self.issued: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _TokenServiceHandler)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def exchange(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, answer) for one exchange's form fields."""

        def field(name: str) -> str:
            values = form.get(name, [])
            return values[0] if len(values) == 1 else ""

        if field("grant_type") != TOKEN_EXCHANGE_GRANT:
            return _sts_error("unsupported_grant_type", "grant_type must be token-exchange")
        if field("subject_token_type") != ACCESS_TOKEN_TYPE or field("requested_token_type") != ACCESS_TOKEN_TYPE:
            return _sts_error("invalid_request", "subject_token_type and requested_token_type must be access_token")
        if field("subject_token") != LOCAL_TOKEN:
            return _sts_error("invalid_grant", "the subject token is not valid")
        try:
            options = json.loads(urllib.parse.unquote(field("options")))
            rules = options["accessBoundary"]["accessBoundaryRules"]
        except (ValueError, KeyError, TypeError):
            return _sts_error("invalid_request", "options must hold an accessBoundary")
        problem = _boundary_problem(rules)
        if problem is not None:
            return _sts_error("invalid_request", problem)
        token = JOB_TOKEN_PREFIX + secrets.token_hex(16)
        with self._lock:
            self.issued[token] = options["accessBoundary"]
        return 200, {
            "access_token": token,
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer",
            "expires_in": JOB_TOKEN_SECONDS,
        }


def _sts_error(error: str, description: str) -> tuple[int, dict[str, Any]]:
    return 400, {"error": error, "error_description": description}


def _boundary_problem(rules: Any) -> str | None:
    """Why Google would refuse this list of boundary rules, or None."""
    if not isinstance(rules, list) or not 1 <= len(rules) <= MAX_BOUNDARY_RULES:
        return f"an access boundary holds 1 to {MAX_BOUNDARY_RULES} rules"
    for rule in rules:
        if not isinstance(rule, dict) or not _BUCKET_RESOURCE.fullmatch(str(rule.get("availableResource"))):
            return "availableResource must be a Cloud Storage bucket"
        permissions = rule.get("availablePermissions")
        if not isinstance(permissions, list) or not permissions:
            return "availablePermissions must list roles"
        if not all(isinstance(p, str) and _ROLE_PERMISSIONS.fullmatch(p) for p in permissions):
            return "availablePermissions must be inRole:roles/..."
        condition = rule.get("availabilityCondition")
        if condition is not None:
            expression = condition.get("expression") if isinstance(condition, dict) else None
            if not isinstance(expression, str) or not 0 < len(expression) <= MAX_CONDITION_CHARS:
                return "availabilityCondition.expression must be a CEL expression"
    return None


class _TokenServiceHandler(BaseHTTPRequestHandler):
    server: TokenServiceServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, 1 << 20))
        if urllib.parse.urlsplit(self.path).path != "/v1/token" or not self.headers.get("Content-Type", "").startswith(
            "application/x-www-form-urlencoded"
        ):
            self.send_error(404)
            return
        status, answer = self.server.exchange(urllib.parse.parse_qs(body.decode("utf-8", "replace")))
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server names it so
        """Quiet: the agents log what fails."""


def stand_in_json(bucket: Bucket, name: str) -> dict[str, Any] | None:
    """Object ``name`` as a JSON object; None when it is absent, cannot be read or is not one
    (a node may be writing it as the run ends)."""
    from trainstack.base.bucket import BucketError, read_json

    try:
        return read_json(bucket, name)
    except BucketError:
        return None


@dataclass(frozen=True)
class JobDirectory:
    """A local run's job directory: the stand-in bucket holding it, its object prefix there
    (``jobs/<job>``), and the path or URI the nodes' metadata names."""

    bucket: Bucket
    prefix: str
    uri: str


def job_directory(bucket: Bucket, job: ResolvedJob | None, workdir: Path) -> JobDirectory:
    """The job directory in ``bucket``; a ``job.job_dir`` in a team's own bucket gets a
    directory of that bucket's name in ``workdir`` as its stand-in too."""
    if job is not None and job.job_dir_bucket and job.job_dir_prefix:
        if not isinstance(bucket, DirectoryBucket):
            raise ValueError("job.job_dir in another bucket runs locally with the directory stand-in only")
        own = DirectoryBucket(workdir / "bucket" / job.job_dir_bucket)
        return JobDirectory(own, job.job_dir_prefix, str(own.root / job.job_dir_prefix))
    job_name = job.name if job else "none"
    return JobDirectory(
        bucket, posixpath.join(contract.LAYOUT.jobs, job_name), contract.LAYOUT.job_dir(bucket.uri, job_name)
    )
