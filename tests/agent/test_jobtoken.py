"""A job's own token (trainstack_agent/jobtoken.py): downscoped at the token service as Google's
own auth library asks for one, served to the job's user alone where client libraries look
for the metadata server, and the node's own token closed to the job."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import google.auth.transport.requests
import pytest
from google.auth import downscoped
from google.oauth2 import sts
from http_stand_in import serving

from trainstack.localrun.standins import (
    JOB_TOKEN_PREFIX,
    LOCAL_TOKEN,
    MetadataServer,
    TokenServiceServer,
)
from trainstack_agent import jobtoken
from trainstack_agent.cloud import Http, Retry
from trainstack_agent.jobtoken import CredentialError, Downscoper, JobMetadataServer
from trainstack_agent.metadata import Metadata
from trainstack_contract.jobaccess import MAX_BOUNDARY_RULES, BoundaryError, JobAccess
from trainstack_contract.tokens import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT, socket_owner

JOB_DIR = "gs://team-bucket/jobs/q7_lr_low"
ACCESS = JobAccess(JOB_DIR, ("gs://team-data/taxifare/data/",), ("gs://team-out/taxifare/trained/",))


class RecordingTokenService(TokenServiceServer):
    """The stand-in, keeping each exchange's form as it arrived."""

    def __init__(self) -> None:
        self.forms: list[dict[str, list[str]]] = []
        super().__init__()

    def exchange(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        self.forms.append(form)
        return super().exchange(form)


@pytest.fixture
def token_service() -> Iterator[RecordingTokenService]:
    with serving(RecordingTokenService()) as server:
        yield server


@pytest.fixture
def node_metadata() -> Iterator[MetadataServer]:
    with serving(MetadataServer({"chief": {}}, {}, "us-central1-a")) as server:
        yield server


def agent_metadata(server: MetadataServer) -> Metadata:
    return Metadata(Http(retry=Retry(attempts=1)), server.root_for("chief"))


def test_the_boundary_is_the_one_googles_auth_library_builds_from_the_same_rules() -> None:
    boundary = ACCESS.boundary()
    assert boundary is not None
    rules = [
        downscoped.AccessBoundaryRule(
            rule["availableResource"],
            rule["availablePermissions"],
            downscoped.AvailabilityCondition(
                rule["availabilityCondition"]["expression"], rule["availabilityCondition"]["title"]
            )
            if "availabilityCondition" in rule
            else None,
        )
        for rule in boundary["accessBoundary"]["accessBoundaryRules"]
    ]
    assert downscoped.CredentialAccessBoundary(rules).to_json() == boundary


def test_the_agents_exchange_sends_what_googles_auth_library_sends(
    token_service: RecordingTokenService, node_metadata: MetadataServer
) -> None:
    boundary = ACCESS.boundary()
    # google-auth's own exchange (google/auth/downscoped.py's refresh), against the stand-in.
    sts.Client(f"{token_service.root}/v1/token").exchange_token(
        request=google.auth.transport.requests.Request(),
        grant_type=TOKEN_EXCHANGE_GRANT,
        subject_token=LOCAL_TOKEN,
        subject_token_type=ACCESS_TOKEN_TYPE,
        requested_token_type=ACCESS_TOKEN_TYPE,
        additional_options=boundary,
    )
    token, expires_in = Downscoper(Http(), agent_metadata(node_metadata), boundary, token_service.root).token()
    library, agent = token_service.forms
    assert agent == library
    assert token.startswith(JOB_TOKEN_PREFIX)
    assert token_service.issued[token] == boundary["accessBoundary"]
    assert 0 < expires_in <= 3599


def test_the_jobs_token_is_kept_until_shortly_before_it_expires_then_exchanged_again(
    token_service: RecordingTokenService, node_metadata: MetadataServer
) -> None:
    now = [0.0]
    downscoper = Downscoper(
        Http(), agent_metadata(node_metadata), ACCESS.boundary(), token_service.root, lambda: now[0]
    )
    first, _ = downscoper.token()
    now[0] = 3000.0
    assert downscoper.token()[0] == first
    now[0] = 3599.0 - 30
    second, left = downscoper.token()
    assert second != first
    assert left == 3599
    assert len(token_service.forms) == 2


def test_a_boundary_google_would_refuse_is_refused_by_the_stand_in_too(
    token_service: RecordingTokenService, node_metadata: MetadataServer
) -> None:
    metadata = agent_metadata(node_metadata)
    rules = [{"availableResource": "//storage.googleapis.com/projects/_/buckets/b" + "x" * 5}] * 11
    too_many = {"accessBoundary": {"accessBoundaryRules": rules}}
    with pytest.raises(CredentialError, match=r"the job's token: .*400"):
        Downscoper(Http(retry=Retry(attempts=1)), metadata, too_many, token_service.root).token()
    project = {
        "accessBoundary": {
            "accessBoundaryRules": [
                {
                    "availableResource": "//cloudresourcemanager.googleapis.com/projects/p",
                    "availablePermissions": ["inRole:roles/owner"],
                }
            ]
        }
    }
    with pytest.raises(CredentialError):
        Downscoper(Http(retry=Retry(attempts=1)), metadata, project, token_service.root).token()
    assert token_service.issued == {}


def test_more_places_than_a_boundary_holds_is_one_clear_error() -> None:
    reads = tuple(f"gs://data-bucket-{n}/x/" for n in range(MAX_BOUNDARY_RULES))
    with pytest.raises(BoundaryError, match="would need 12 access boundary rules; Google allows at most 10"):
        JobAccess(JOB_DIR, reads).rules()


def client_library_token(host: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter's google-auth, as a job's code would use it, asked for its credentials."""
    script = (
        "import google.auth, google.auth.transport.requests as r\n"
        "credentials, project = google.auth.default()\n"
        "credentials.refresh(r.Request())\n"
        "print(credentials.token, project, credentials.service_account_email)\n"
    )
    env = {**os.environ, "GCE_METADATA_HOST": host, "GCE_METADATA_IP": host}
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    env["HOME"] = "/nonexistent"
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_client_library_finds_the_jobs_own_token_where_it_looks_for_the_metadata_server(
    token_service: RecordingTokenService, node_metadata: MetadataServer
) -> None:
    downscoper = Downscoper(Http(), agent_metadata(node_metadata), ACCESS.boundary(), token_service.root)
    server = JobMetadataServer(downscoper, "my-project", "node@my-project.iam.gserviceaccount.com", os.geteuid(), print)
    with serving(server):
        done = client_library_token(server.host)
    assert done.returncode == 0, done.stderr
    token, project, email = done.stdout.split()
    assert token.startswith(JOB_TOKEN_PREFIX)
    assert token_service.issued[token] == ACCESS.boundary()["accessBoundary"]
    assert (project, email) == ("my-project", "node@my-project.iam.gserviceaccount.com")


def test_another_user_gets_nothing_from_the_jobs_metadata_server(
    token_service: RecordingTokenService, node_metadata: MetadataServer
) -> None:
    downscoper = Downscoper(Http(), agent_metadata(node_metadata), ACCESS.boundary(), token_service.root)
    server = JobMetadataServer(downscoper, "my-project", "node@x", os.geteuid() + 1, print)
    with serving(server):
        done = client_library_token(server.host)
    assert done.returncode != 0
    assert server.refused >= 1
    assert token_service.issued == {}


def test_the_socket_owner_of_a_loopback_connection_is_read_from_the_kernels_table(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()) as client:
        assert socket_owner(client.getsockname()) == os.geteuid()
    assert socket_owner(("127.0.0.1", 1), proc_net=tmp_path) is None


def test_on_a_vm_the_metadata_server_is_closed_to_the_jobs_user_or_the_job_does_not_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(jobtoken.shutil, "which", lambda name: f"/usr/sbin/{name}")
    reopen = jobtoken.close_metadata_server(
        1234, "http://metadata.google.internal/computeMetadata/v1", lambda c: ran.append(c) or 0, print
    )
    assert ran == [
        [
            "iptables",
            "-w",
            "-I",
            "OUTPUT",
            "-d",
            "169.254.169.254",
            "-m",
            "owner",
            "--uid-owner",
            "1234",
            "-j",
            "REJECT",
        ]
    ]
    reopen()
    assert ran[1][2] == "-D"
    with pytest.raises(CredentialError, match="cannot close the metadata server"):
        jobtoken.close_metadata_server(1234, "http://169.254.169.254/computeMetadata/v1", lambda c: 1, print)
    monkeypatch.setattr(jobtoken.shutil, "which", lambda name: None)
    ran.clear()
    with pytest.raises(CredentialError, match="iptables is not installed"):
        jobtoken.close_metadata_server(
            1234, "http://metadata.google.internal/computeMetadata/v1", lambda c: ran.append(c) or 0, print
        )
    # Installed from the OS's packages first, where an image lacks it.
    assert ran == [["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "iptables"]]
    # A local run's stand-in closes itself: nothing to run.
    jobtoken.close_metadata_server(1234, "http://127.0.0.1:8080/chief/computeMetadata/v1", lambda c: 1, print)()


# In a network namespace of its own (loopback alone, the metadata server's address on it, a
# listener there as root): the rule the agent puts on a VM, by the real iptables, refuses the
# job's user and no one else, and is gone once the job ends.
FIREWALL_PROBE = """
import json, os, socket, subprocess, sys, threading
from trainstack_agent import jobtoken
uid, python = int(sys.argv[1]), sys.argv[2]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(["ip", "addr", "add", "169.254.169.254/32", "dev", "lo"], check=True)
listener = socket.create_server(("169.254.169.254", 80))
threading.Thread(target=lambda: [listener.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()
probe = "import socket; socket.create_connection(('169.254.169.254', 80), timeout=5).close()"

def reaches(user):
    done = subprocess.run([python, "-c", probe], user=user, cwd="/", capture_output=True, timeout=30)
    return done.returncode == 0

root = "http://metadata.google.internal/computeMetadata/v1"
reopen = jobtoken.close_metadata_server(uid, root, jobtoken.run_command, lambda line: None)
during = {"job": reaches(uid), "root": reaches(0)}
reopen()
print(json.dumps({"during": during, "after": reaches(uid)}))
"""


def test_on_a_vm_the_rule_refuses_the_jobs_user_the_metadata_server_and_no_one_else(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "this test puts a firewall rule in a network namespace: run the suite as root"
    from trainstack.localrun.workdir import interpreter_for_job_user
    from trainstack_contract.jobuser import ensure_user

    uid, _ = ensure_user()
    probe = tmp_path / "probe.py"
    probe.write_text(FIREWALL_PROBE)
    # The job's user connects with an interpreter it may run (this one may be under /root).
    python = interpreter_for_job_user()
    assert python is not None
    done = subprocess.run(
        ["unshare", "--net", sys.executable, str(probe), str(uid), str(python)],
        env={**os.environ, "PYTHONPATH": str(Path(jobtoken.__file__).parents[1])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"during": {"job": False, "root": True}, "after": True}
