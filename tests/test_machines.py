"""`trainstack start` and `trainstack stop`: the exact requests and commands they send.

Cluster VMs: the real Compute Engine client library (google-cloud-compute) talks over HTTP
to a fake Compute Engine API on 127.0.0.1, which records every request and answers as the
REST API does (an instance's status, an Operation, the zoneOperations wait). The TPU VM and
the Workbench instance: a stand-in `gcloud` on the PATH records its argv. Nothing here
reaches Google Cloud.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import google.auth
import pytest
import yaml
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError
from google.cloud import compute_v1

from recording_commands import install_recording_command, recorded_calls
from stack_helpers import base_config, write_stack
from tests.googleapi_fakes import perimeter_refused_body
from trainstack.cloud import machines
from trainstack.commands.main import main
from trainstack.experiments.waking import run_machines
from trainstack.stackmodel.stackfile import STACKS_DIR

PROJECT = "your-gcp-project"
ZONE = "us-central1-a"
ZONE_PATH = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}"
CHIEF, WORKER_0, WORKER_1 = "multiworker-chief", "multiworker-worker-0", "multiworker-worker-1"

INSTANCE = re.compile(r"/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)")
ACTION = re.compile(r"/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)/(start|stop)")
OPERATION = re.compile(r"/compute/v1/projects/([^/]+)/zones/([^/]+)/operations/([^/]+?)(/wait)?")
AFTER = {"start": "RUNNING", "stop": "TERMINATED"}


@dataclass
class FakeCompute:
    """The part of the Compute Engine REST API that start and stop use, with instance state."""

    statuses: dict[str, str]  # instance name -> status; a missing name is 404
    requests: list[tuple[str, str]] = field(default_factory=list)
    forbidden: bool = False
    # Refused by a VPC Service Controls perimeter, whatever the caller's roles.
    outside_perimeter: bool = False
    # The status of the Operation that start/stop answers with, and that wait answers with.
    first_status: str = "DONE"
    wait_status: str = "DONE"
    # instance name -> the errors its operation ends with
    failures: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    operations: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (instance, action)

    def answer(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        self.requests.append((method, path))
        if self.outside_perimeter:
            return 403, perimeter_refused_body("compute.googleapis.com")
        if self.forbidden:
            return 403, _error(403, f"Required 'compute.instances.get' permission for '{path}'", "forbidden")
        if method == "GET" and (match := INSTANCE.fullmatch(path)):
            name = match[3]
            if name not in self.statuses:
                message = f"The resource 'projects/{match[1]}/zones/{match[2]}/instances/{name}' was not found"
                return 404, _error(404, message, "notFound")
            return 200, {"kind": "compute#instance", "name": name, "status": self.statuses[name]}
        if method == "POST" and (match := ACTION.fullmatch(path)):
            name, action = match[3], match[4]
            if name not in self.statuses:
                return 404, _error(404, f"The resource '{name}' was not found", "notFound")
            operation = f"operation-{name}-{action}"
            self.operations[operation] = (name, action)
            return 200, self._operation(operation, self.first_status)
        if (
            (match := OPERATION.fullmatch(path))
            and match[3] in self.operations
            and (method, bool(match[4])) in {("POST", True), ("GET", False)}
        ):
            return 200, self._operation(match[3], self.wait_status)
        return 404, _error(404, f"no such API path in the fake: {method} {path}", "notFound")

    def _operation(self, operation: str, status: str) -> dict[str, Any]:
        name, action = self.operations[operation]
        body: dict[str, Any] = {
            "kind": "compute#operation",
            "name": operation,
            "operationType": action,
            "status": status,
            "targetLink": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{name}",
        }
        if status == "DONE":
            if name in self.failures:
                body["error"] = {"errors": self.failures[name]}
                body["httpErrorStatusCode"] = 503
                body["httpErrorMessage"] = "SERVICE UNAVAILABLE"
            else:
                self.statuses[name] = AFTER[action]
        return body


def _error(code: int, message: str, reason: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "errors": [{"message": message, "reason": reason}]}}


def serve(fake: FakeCompute) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            code, body = fake.answer(self.command, urlsplit(self.path).path)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # port 0: a free port
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def clients_for(endpoint: str) -> machines.ComputeClients:
    options = {"api_endpoint": endpoint}
    return machines.ComputeClients(
        compute_v1.InstancesClient(credentials=AnonymousCredentials(), client_options=options),
        compute_v1.ZoneOperationsClient(credentials=AnonymousCredentials(), client_options=options),
    )


@pytest.fixture
def compute(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCompute]:
    fake = FakeCompute({})
    server = serve(fake)
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(machines, "compute_clients", lambda: clients_for(endpoint))
    yield fake
    server.shutdown()
    server.server_close()


def get(name: str) -> tuple[str, str]:
    return ("GET", f"{ZONE_PATH}/instances/{name}")


def post(name: str, action: str) -> tuple[str, str]:
    return ("POST", f"{ZONE_PATH}/instances/{name}/{action}")


def wait(name: str, action: str) -> tuple[str, str]:
    return ("POST", f"{ZONE_PATH}/operations/operation-{name}-{action}/wait")


# --- Cluster VMs, through the client library --------------------------------------------------
def test_start_starts_each_stopped_node_and_waits_for_its_operation(
    compute: FakeCompute, capsys: pytest.CaptureFixture[str]
) -> None:
    compute.statuses = {CHIEF: "RUNNING", WORKER_0: "TERMINATED", WORKER_1: "TERMINATED"}
    compute.first_status = "RUNNING"  # as Compute Engine answers: the operation is under way
    assert main(["start", "--stack", "multiworker"]) == 0
    assert compute.requests == [
        get(CHIEF),
        get(WORKER_0),
        post(WORKER_0, "start"),
        get(WORKER_1),
        post(WORKER_1, "start"),
        wait(WORKER_0, "start"),
        wait(WORKER_1, "start"),
    ]
    assert compute.statuses == {CHIEF: "RUNNING", WORKER_0: "RUNNING", WORKER_1: "RUNNING"}
    out, err = capsys.readouterr()
    assert err == ""
    assert re.search(rf"chief +{CHIEF} +already RUNNING", out)
    assert re.search(rf"worker-0 +{WORKER_0} +started \(was TERMINATED\)", out)
    assert re.search(rf"worker-1 +{WORKER_1} +started \(was TERMINATED\)", out)
    assert "runs job flowers_mwms" in out


def test_stop_stops_every_running_node(compute: FakeCompute, capsys: pytest.CaptureFixture[str]) -> None:
    compute.statuses = {CHIEF: "RUNNING", WORKER_0: "RUNNING", WORKER_1: "STAGING"}
    assert main(["stop", "--stack", "multiworker"]) == 0
    # Each operation came back DONE: nothing to wait for.
    assert compute.requests == [
        get(CHIEF),
        post(CHIEF, "stop"),
        get(WORKER_0),
        post(WORKER_0, "stop"),
        get(WORKER_1),
        post(WORKER_1, "stop"),
    ]
    assert set(compute.statuses.values()) == {"TERMINATED"}
    out = capsys.readouterr().out
    assert "stopped (was STAGING)" in out
    assert "disks and the bucket still bill" in out


def test_a_node_already_in_the_target_state_is_reported_not_touched(
    compute: FakeCompute, capsys: pytest.CaptureFixture[str]
) -> None:
    compute.statuses = {CHIEF: "TERMINATED", WORKER_0: "STOPPING", WORKER_1: "RUNNING"}
    assert main(["stop", "--stack", "multiworker"]) == 0
    assert compute.requests == [get(CHIEF), get(WORKER_0), get(WORKER_1), post(WORKER_1, "stop")]
    out = capsys.readouterr().out
    assert re.search(rf"chief +{CHIEF} +already TERMINATED", out)
    assert re.search(rf"worker-0 +{WORKER_0} +already STOPPING", out)


def test_node_option_touches_only_that_vm(compute: FakeCompute) -> None:
    compute.statuses = {CHIEF: "TERMINATED", WORKER_0: "TERMINATED", WORKER_1: "TERMINATED"}
    assert main(["start", "--stack", "multiworker", "--node", "worker-1"]) == 0
    assert compute.requests == [get(WORKER_1), post(WORKER_1, "start")]
    assert compute.statuses == {CHIEF: "TERMINATED", WORKER_0: "TERMINATED", WORKER_1: "RUNNING"}


def test_an_unknown_node_is_refused_before_any_request(
    compute: FakeCompute, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stop", "--stack", "multiworker", "--node", "worker-2"]) == 2
    assert compute.requests == []
    assert "its nodes are chief, worker-0, worker-1" in capsys.readouterr().err


def test_vms_not_created_yet_say_run_pulumi_up(compute: FakeCompute, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["start", "--stack", "multiworker"]) == 1
    assert compute.requests == [get(CHIEF), get(WORKER_0), get(WORKER_1)]
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"trainstack: start: {node} ({vm}): no such VM in project {PROJECT}, zone {ZONE}: run `pulumi up` first "
        "(`pulumi up --refresh` when it deleted itself with on_finish: delete)"
        for node, vm in (("chief", CHIEF), ("worker-0", WORKER_0), ("worker-1", WORKER_1))
    ]


def test_permission_denied_is_one_line_per_node(compute: FakeCompute, capsys: pytest.CaptureFixture[str]) -> None:
    compute.statuses = {CHIEF: "RUNNING", WORKER_0: "RUNNING", WORKER_1: "RUNNING"}
    compute.forbidden = True
    assert main(["stop", "--stack", "multiworker"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert all("permission denied in project your-gcp-project" in line for line in lines)
    assert "Traceback" not in "\n".join(lines)


def test_a_perimeter_refusal_says_so_not_permission_denied(
    compute: FakeCompute, capsys: pytest.CaptureFixture[str]
) -> None:
    compute.statuses = {CHIEF: "RUNNING", WORKER_0: "RUNNING", WORKER_1: "RUNNING"}
    compute.outside_perimeter = True
    assert main(["stop", "--stack", "multiworker"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert all("refused by a VPC Service Controls perimeter" in line for line in lines), lines
    assert not any("permission denied" in line for line in lines)


def test_an_operation_that_fails_is_reported_for_its_node(
    compute: FakeCompute, capsys: pytest.CaptureFixture[str]
) -> None:
    compute.statuses = {CHIEF: "TERMINATED", WORKER_0: "TERMINATED", WORKER_1: "TERMINATED"}
    compute.first_status = "PENDING"
    message = "The zone 'us-central1-a' does not have enough resources available to fulfill the request."
    compute.failures = {WORKER_1: [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": message}]}
    assert main(["start", "--stack", "multiworker"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"trainstack: start: worker-1 ({WORKER_1}): ZONE_RESOURCE_POOL_EXHAUSTED: {message}"]
    assert out.count("started (was TERMINATED)") == 2


def test_a_node_still_stopping_is_not_started(compute: FakeCompute, capsys: pytest.CaptureFixture[str]) -> None:
    compute.statuses = {CHIEF: "STOPPING", WORKER_0: "RUNNING", WORKER_1: "RUNNING"}
    assert main(["start", "--stack", "multiworker"]) == 1
    assert compute.requests == [get(CHIEF), get(WORKER_0), get(WORKER_1)]
    assert "still STOPPING: run `trainstack start` again" in capsys.readouterr().err


def test_operations_not_done_in_time_are_reported(compute: FakeCompute, capsys: pytest.CaptureFixture[str]) -> None:
    compute.statuses = {CHIEF: "RUNNING", WORKER_0: "RUNNING", WORKER_1: "RUNNING"}
    compute.first_status = compute.wait_status = "RUNNING"
    assert main(["stop", "--stack", "multiworker", "--node", "chief", "--timeout", "1"]) == 1
    assert compute.requests[:3] == [get(CHIEF), post(CHIEF, "stop"), wait(CHIEF, "stop")]
    assert set(compute.requests[3:]) <= {wait(CHIEF, "stop")}
    assert "not done within the time limit (operation operation-multiworker-chief-stop)" in capsys.readouterr().err


def test_missing_credentials_say_how_to_log_in(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The real client factory; Application Default Credentials find nothing.
    def no_credentials(*args: Any, **kwargs: Any) -> Any:
        raise DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    monkeypatch.setattr(machines, "compute_clients", machines.default_compute_clients)
    assert main(["start", "--stack", "multiworker"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    hint = "no Google Cloud credentials found: run `gcloud auth application-default login`"
    assert all(line.endswith(hint) for line in lines)


def test_dry_run_prints_the_calls_and_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(machines, "compute_clients", lambda: pytest.fail("a client was made in a dry run"))
    assert main(["start", "--stack", "multiworker", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == [
        f"compute.instances.start project={PROJECT} zone={ZONE} instance={vm}" for vm in (CHIEF, WORKER_0, WORKER_1)
    ]
    assert main(["stop", "--stack", "multiworker", "--dry-run", "--node", "worker-0"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"compute.instances.stop project={PROJECT} zone={ZONE} instance={WORKER_0}"


# --- The TPU VM and the Workbench instance, through gcloud ---------------------------------------
@pytest.fixture
def gcloud_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `gcloud` that records each call's argv (one JSON line) and exits with $GCLOUD_EXIT."""
    return install_recording_command("gcloud", tmp_path, monkeypatch, exit_variable="GCLOUD_EXIT")


@pytest.fixture
def no_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machines, "compute_clients", lambda: pytest.fail("a stack without a cluster made a client"))


@pytest.mark.parametrize("action", ["start", "stop"])
def test_tpu_vm_goes_through_gcloud(
    gcloud_calls: Path, no_compute: None, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([action, "--stack", "tpu"]) == 0
    assert recorded_calls(gcloud_calls) == [
        ["compute", "tpus", "tpu-vm", action, "tpu-tpu", "--zone", "us-central1-b", "--project", PROJECT, "--quiet"]
    ]
    assert re.search(r"tpu +tpu-tpu +(started|stopped)", capsys.readouterr().out)


@pytest.mark.parametrize("action", ["start", "stop"])
def test_workbench_notebook_goes_through_gcloud(gcloud_calls: Path, no_compute: None, action: str) -> None:
    assert main([action, "--stack", "notebook"]) == 0
    assert recorded_calls(gcloud_calls) == [
        ["workbench", "instances", action, "notebook-notebook", "--location", "us-west1-b", "--project", PROJECT]
    ]


def spot_tpu_stack(directory: Path) -> Path:
    config = yaml.safe_load((STACKS_DIR / "Pulumi.tpu.yaml").read_text())["config"]
    config["trainstack:tpu"]["spot"] = True
    return write_stack(directory, config, stack="spottpu")


def test_a_spot_tpu_is_not_started_but_can_be_stopped(
    gcloud_calls: Path, no_compute: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(spot_tpu_stack(tmp_path))
    assert main(["start", "--stack-file", path]) == 1
    assert recorded_calls(gcloud_calls) == []
    err = capsys.readouterr().err
    assert "a Spot TPU cannot be started again once it has stopped or been preempted" in err
    assert "gcloud compute tpus tpu-vm delete spottpu-tpu --zone us-central1-b --project your-gcp-project" in err
    assert main(["stop", "--stack-file", path]) == 0
    assert recorded_calls(gcloud_calls) == [
        ["compute", "tpus", "tpu-vm", "stop", "spottpu-tpu", "--zone", "us-central1-b", "--project", PROJECT, "--quiet"]
    ]


def test_dry_run_prints_the_gcloud_commands(
    gcloud_calls: Path, no_compute: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stop", "--stack", "tpu", "--dry-run"]) == 0
    assert main(["start", "--stack", "notebook", "--dry-run"]) == 0
    assert recorded_calls(gcloud_calls) == []
    assert capsys.readouterr().out.splitlines() == [
        "gcloud compute tpus tpu-vm stop tpu-tpu --zone us-central1-b --project your-gcp-project --quiet",
        "gcloud workbench instances start notebook-notebook --location us-west1-b --project your-gcp-project",
    ]


def test_a_failing_gcloud_is_reported(
    gcloud_calls: Path, no_compute: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GCLOUD_EXIT", "3")
    assert main(["stop", "--stack", "notebook"]) == 1
    assert "failed with exit code 3" in capsys.readouterr().err


def test_without_gcloud_the_message_says_to_install_it(
    no_compute: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert main(["start", "--stack", "tpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trainstack: start: tpu (tpu-tpu): gcloud not found")
    assert "https://cloud.google.com/sdk/docs/install" in err


def test_a_stack_with_a_cluster_and_a_tpu_uses_both_and_node_picks_one(
    compute: FakeCompute, gcloud_calls: Path, tmp_path: Path
) -> None:
    config = base_config()
    config["gcp:project"] = PROJECT
    config["trainstack:zone"] = "us-central1-b"
    config["trainstack:tpu"] = {"accelerator_type": "v2-8", "runtime_version": "tpu-vm-tf-2.17.0-pjrt"}
    path = str(write_stack(tmp_path, config, stack="both"))
    compute.statuses = {"both-chief": "TERMINATED", "both-worker-0": "RUNNING", "both-worker-1": "TERMINATED"}
    assert main(["start", "--stack-file", path, "--node", "tpu"]) == 0
    assert compute.requests == []
    tpu_start = [
        *("compute", "tpus", "tpu-vm", "start", "both-tpu"),
        *("--zone", "us-central1-b", "--project", PROJECT, "--quiet"),
    ]
    assert recorded_calls(gcloud_calls) == [tpu_start]
    assert main(["start", "--stack-file", path]) == 0
    path_b = f"/compute/v1/projects/{PROJECT}/zones/us-central1-b/instances"
    assert compute.requests == [
        ("GET", f"{path_b}/both-chief"),
        ("POST", f"{path_b}/both-chief/start"),
        ("GET", f"{path_b}/both-worker-0"),
        ("GET", f"{path_b}/both-worker-1"),
        ("POST", f"{path_b}/both-worker-1/start"),
    ]
    assert recorded_calls(gcloud_calls) == [tpu_start, tpu_start]


def test_submit_starts_each_stopped_vm_without_awaiting_its_operation(
    compute: FakeCompute, capsys: pytest.CaptureFixture[str]
) -> None:
    """A teammate who queues jobs holds get and start on each VM alone: awaiting the operation
    would need compute.zoneOperations.get, project-wide, so `submit` only sends the starts."""
    compute.statuses = {CHIEF: "TERMINATED", WORKER_0: "TERMINATED", WORKER_1: "RUNNING"}
    compute.first_status = "RUNNING"
    from trainstack.stackmodel.resolved import resolve_stack
    from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack

    stack = resolve_stack(load_stack(STACKS_DIR / "Pulumi.multiworker.yaml")[0])
    assert run_machines(stack, "start", wait=False) == 0
    assert compute.requests == [get(CHIEF), post(CHIEF, "start"), get(WORKER_0), post(WORKER_0, "start"), get(WORKER_1)]
    out, _ = capsys.readouterr()
    assert re.search(rf"chief +{CHIEF} +start requested \(was TERMINATED; operation operation-{CHIEF}-start\)", out)


def _queued_place(tmp_path: Path) -> tuple[Any, Any]:
    """A queue (a directory standing in for the bucket) holding one job, and that job."""
    from trainstack.base.bucket import DirectoryBucket
    from trainstack.experiments.place import QueuePlace
    from trainstack.jobqueue.queue import submit

    store = DirectoryBucket(tmp_path)
    entry = submit(store, "late", {"trainstack-job-mode": "package"}, [], "2026-11-28T00:00:00Z")
    return QueuePlace(store), entry


def test_a_node_that_stops_as_the_job_comes_is_started_again_once_stopped(
    compute: FakeCompute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The idle-stop race: the job is queued while every node is up and idle; the chief ends its
    idle wait anyway (it looked at the queue just before) and stops. `submit` sees it stopping,
    says so, and starts it once it has stopped: the job never waits for a `submit` to come."""
    from trainstack.experiments.waking import watch_until_taken
    from trainstack.stackmodel.resolved import resolve_stack
    from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack

    stack = resolve_stack(load_stack(STACKS_DIR / "Pulumi.multiworker.yaml")[0])
    place, entry = _queued_place(tmp_path)
    compute.statuses = {CHIEF: "STOPPING", WORKER_0: "RUNNING", WORKER_1: "RUNNING"}
    compute.first_status = "RUNNING"
    timer = threading.Timer(0.3, lambda: compute.statuses.update({CHIEF: "TERMINATED"}))
    timer.start()
    try:
        assert watch_until_taken(stack, place, entry, seconds=30, poll=0.05) == 0
    finally:
        timer.cancel()
    assert post(CHIEF, "start") in compute.requests
    assert post(WORKER_0, "start") not in compute.requests
    out = capsys.readouterr().out
    assert f"chief is stopping (its idle wait ended as job {entry.id} came); it is started again once stopped" in out
    assert f"chief stopped at the end of its idle wait as job {entry.id} came: starting it again" in out


def test_a_job_a_node_has_taken_needs_no_start(
    compute: FakeCompute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainstack.experiments.waking import watch_until_taken
    from trainstack.jobqueue.queue import job_prefix
    from trainstack.stackmodel.resolved import resolve_stack
    from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack

    stack = resolve_stack(load_stack(STACKS_DIR / "Pulumi.multiworker.yaml")[0])
    place, entry = _queued_place(tmp_path)
    status = tmp_path / job_prefix(entry) / "status" / "job.json"
    status.parent.mkdir(parents=True)
    status.write_text(json.dumps({"state": "RUNNING", "time": "2026-11-28T00:00:01Z"}))
    compute.statuses = {CHIEF: "RUNNING", WORKER_0: "RUNNING", WORKER_1: "RUNNING"}
    assert watch_until_taken(stack, place, entry, seconds=30, poll=0.05) == 0
    assert not [request for request in compute.requests if request[0] == "POST"]
