"""The rendered boot scripts and the node agent under signals, dead peers, missing or
unreachable metadata, hostile values and the TPU VM's run-time cap.

Each test runs the real rendered script and agent (through `trainstack local`, or the agent
against local stand-ins) with the probe trainer from tests/fixtures, and names the defect it
guards against. The agent's decisions are unit-tested in seconds in tests/agent; these few
check that the pieces hold together as processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from polling import wait_until

from test_boot_scripts import PROBE_TRAINER, stack
from test_scripts import shellcheck
from trainstack.base.project import PROJECT_ROOT
from trainstack.cloud import bootscripts
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.run import LocalStackRun
from trainstack.localrun.standins import LOCAL_TOKEN
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.schema import Settings, StackConfig, Tpu
from trainstack_agent.cap import cap_orders
from trainstack_agent.cloud import Http, Retry
from trainstack_agent.endpoints import Endpoints
from trainstack_agent.metadata import Metadata
from trainstack_agent.release import Release
from trainstack_agent.settings import read_settings
from trainstack_contract import LAYOUT, METADATA_KEYS
from trainstack_contract.timescale import TIME_SCALE_VARIABLE


def start(cfg: StackConfig, workdir: Path, **kwargs: Any) -> LocalStackRun:
    return LocalStackRun(
        resolve_stack(cfg), workdir, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER, **kwargs
    ).start()


def trainers_started(local: LocalStackRun) -> bool:
    return all(any("starting the job" in line for line in n.lines) for n in local.nodes)


@pytest.mark.slow
def test_sigterm_leaves_the_job_resumable_and_applies_no_on_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: SIGTERM (guest shutdown, reboot, host maintenance) recorded the job FAILED
    and applied on_finish, so a VM restart found a failed job and a stopped or deleted VM."""
    cfg = stack("dev")
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "600")
    local = start(cfg, tmp_path)
    wait_until(lambda: trainers_started(local), "the trainer's start", 60)
    local.signal_node("chief", signal.SIGTERM)
    interrupted = local.wait(timeout=60)
    assert interrupted.node_status["chief"] is not None
    assert interrupted.node_status["chief"]["state"] == "INTERRUPTED"
    # Resumable, not ended: the chief records the job INTERRUPTED (`status` shows it is not
    # training), never FAILED, and the next boot trains it to the end.
    assert interrupted.job_status is not None
    assert interrupted.job_status["state"] == "INTERRUPTED"
    assert interrupted.self_stops == [], "on_finish was applied on a termination signal"
    assert any("received SIGTERM" in line for line in interrupted.logs["chief"])

    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "0")
    resumed = start(cfg, tmp_path).wait(timeout=120)
    assert resumed.succeeded, resumed.logs
    assert len(resumed.self_stops) == 1


@pytest.mark.slow
def test_after_the_chief_is_killed_the_other_nodes_end_after_the_heartbeat_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: after the chief died (kill -9) workers and parameter servers served until
    something else killed them; on a cloud they billed until max_run_hours."""
    base = stack("paramserver")
    assert base.settings.cluster is not None
    timeout = 10
    cfg = base.model_copy(
        update={
            "settings": base.settings.model_copy(
                update={"cluster": base.settings.cluster.model_copy(update={"heartbeat_timeout_seconds": timeout})}
            )
        }
    )
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "600")
    monkeypatch.setenv("PROBE_OTHERS_SLEEP", "600")
    local = start(cfg, tmp_path)
    wait_until(lambda: trainers_started(local), "every trainer's start", 60)
    local.signal_node("chief", signal.SIGKILL)
    others = [n for n in local.nodes if n.name != "chief"]
    wait_until(
        lambda: all(n.process is not None and n.process.poll() is not None for n in others),
        "the other nodes' end",
        60,
    )
    result = local.wait(timeout=10)
    for node in ("worker-0", "worker-1", "ps-0"):
        status = result.node_status[node]
        assert status is not None, (node, status)
        assert status["state"] == "FAILED", (node, status)
        assert status["reason"] == f"no heartbeat from the chief for {timeout} s"
    # paramserver's on_finish is delete: each surviving node released itself.
    assert sorted(line.split()[1:] for line in result.self_stops) == [
        ["delete", n] for n in ("ps-0", "worker-0", "worker-1")
    ]


def test_missing_required_metadata_stops_the_node_and_writes_no_status(tmp_path: Path) -> None:
    """Defect: with the metadata server answering 404 the script ran with an empty role and
    job dir, wrote status to /status/-.json and kept the VM billing."""
    local = LocalStackRun(
        resolve_stack(stack("dev")), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    for key in (METADATA_KEYS.role, METADATA_KEYS.job_dir):
        del local.nodes[0].metadata[key]
    result = local.start().wait(timeout=60)
    assert result.exit_codes["chief"] == 1
    missing = (f"required metadata {key} is missing" for key in (METADATA_KEYS.role, METADATA_KEYS.job_dir))
    assert any(text in line for text in missing for line in result.logs["chief"]), result.logs["chief"]
    assert [line.split()[1] for line in result.self_stops] == ["stop"]
    assert not list(tmp_path.rglob("-.json"))
    assert not (Path("/status")).exists()
    assert not any("starting the job" in line for line in result.logs["chief"])


def test_a_node_whose_agent_is_not_in_metadata_stops_from_its_boot_script(tmp_path: Path) -> None:
    local = LocalStackRun(
        resolve_stack(stack("dev")), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    del local.nodes[0].metadata[METADATA_KEYS.agent]
    result = local.start().wait(timeout=120)
    assert result.exit_codes["chief"] == 1
    assert any("metadata trainstack-agent is unreadable" in line for line in result.logs["chief"])
    assert [line.split()[1:] for line in result.self_stops] == [["stop", "boot-script"]]


def test_an_agent_archive_that_does_not_match_its_digest_never_runs(tmp_path: Path) -> None:
    local = LocalStackRun(
        resolve_stack(stack("dev")), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    local.nodes[0].metadata[METADATA_KEYS.agent_sha256] = "0" * 64
    result = local.start().wait(timeout=60)
    assert result.exit_codes["chief"] == 1
    assert any("does not match its sha256 in metadata" in line for line in result.logs["chief"])
    assert not any("node chief starting" in line for line in result.logs["chief"])
    assert [line.split()[1:] for line in result.self_stops] == [["stop", "boot-script"]]


@pytest.mark.slow
def test_an_optional_key_the_metadata_server_cannot_serve_fails_closed(tmp_path: Path) -> None:
    """Defect: a 503 on an optional key read as "absent": a job ran without its secret, and a
    worker started its trainer with no TF_CONFIG. Now the read is retried, then the node
    records FAILED naming the key and stops."""
    local = LocalStackRun(
        resolve_stack(stack("multiworker")), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    local.server.failures[f"instance/attributes/{METADATA_KEYS.secrets}"] = 503
    result = local.start().wait(timeout=300)
    for node in ("chief", "worker-0", "worker-1"):
        status = result.node_status[node]
        assert status is not None, node
        assert status["state"] == "FAILED", node
        assert METADATA_KEYS.secrets in status["reason"]
        assert "HTTP 503" in status["reason"]
        assert not any("starting the job" in line for line in result.logs[node])
    assert sorted(line.split()[1] for line in result.self_stops) == ["stop"] * 3


def test_an_unknown_on_finish_stops_the_node_before_anything_runs(tmp_path: Path) -> None:
    """Defect: an unknown on_finish fell through to keep, leaving the VM billing."""
    local = LocalStackRun(
        resolve_stack(stack("dev")), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    local.nodes[0].metadata[METADATA_KEYS.on_finish] = "hibernate"
    result = local.start().wait(timeout=60)
    status = result.node_status["chief"]
    assert status is not None
    assert status["state"] == "FAILED"
    assert METADATA_KEYS.on_finish in status["reason"]
    assert [line.split()[1] for line in result.self_stops] == ["stop"]


def test_an_agent_time_scale_that_is_not_a_factor_stops_the_node_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait longer than Compute Engine's, or none at all, is never what was meant."""
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "5")
    local = LocalStackRun(
        resolve_stack(stack("dev")), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER
    )
    result = local.start().wait(timeout=60)
    status = result.node_status["chief"]
    assert status is not None
    assert status["state"] == "FAILED"
    assert TIME_SCALE_VARIABLE in status["reason"]
    assert [line.split()[1] for line in result.self_stops] == ["stop"]
    assert not any("starting the job" in line for line in result.logs["chief"])


@pytest.mark.slow
def test_no_access_token_appears_on_any_command_line_during_a_local_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: the node's token travelled on curl's command line, visible in `ps` to every
    process on the VM. The chief of a Spot cluster calls the Compute Engine API all the time."""
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "12")
    local = start(stack("multiworker"), tmp_path)
    seen: list[str] = []
    while local.supervisor.running("chief"):
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if LOCAL_TOKEN in text:
                seen.append(text)
        time.sleep(0.05)
    result = local.wait(timeout=60)
    assert result.succeeded
    assert any(call.startswith("GET ") for call in result.compute_calls), "the token was never used"
    assert seen == []


# --- The node agent's cloud calls: the exact requests ------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, str, str | None]]] = []
    answers: ClassVar[dict[str, str]] = {
        "/computeMetadata/v1/instance/name": "tc-worker-0",
        "/computeMetadata/v1/instance/zone": "projects/123/zones/us-central1-a",
        "/computeMetadata/v1/project/project-id": "test-project-123",
        "/computeMetadata/v1/instance/service-accounts/default/token": json.dumps(
            {"access_token": "tok3n", "expires_in": 3599}
        ),
    }

    def do_GET(self) -> None:
        body = self.answers.get(self.path)
        if body is None or self.headers.get("Metadata-Flavor") != "Google":
            self.send_error(404)
            return
        self._reply(body)

    def do_DELETE(self) -> None:
        _Recorder.requests.append(("DELETE", self.path, self.headers.get("Authorization")))
        self._reply('{"kind": "compute#operation", "status": "RUNNING"}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Recorder.requests.append(("POST", self.path, self.headers.get("Authorization")))
        self._reply("{}")

    def _reply(self, body: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def recorder() -> Any:
    _Recorder.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def release_for(kind: str, root: str, tpu_name: str | None = None) -> tuple[Release, list[list[str]]]:
    http = Http(timeout=5, retry=Retry(attempts=1))
    endpoints = Endpoints(metadata=f"{root}/computeMetadata/v1", compute=f"{root}/compute/v1", tpu=f"{root}/tpu/v2")
    shutdowns: list[list[str]] = []
    release = Release(
        kind,
        "worker-0",
        tpu_name,
        Metadata(http, endpoints.metadata),
        http,
        endpoints,
        lambda message: None,
        run=lambda argv: shutdowns.append(list(argv)),
    )
    return release, shutdowns


def test_self_delete_sends_one_delete_request_for_this_instance_with_its_own_token(recorder: str) -> None:
    """The exact request a node sends to delete itself (on_finish: delete)."""
    release, shutdowns = release_for("cluster", recorder)
    release("delete")
    assert _Recorder.requests == [
        ("DELETE", "/compute/v1/projects/test-project-123/zones/us-central1-a/instances/tc-worker-0", "Bearer tok3n")
    ]
    assert shutdowns == []


def test_a_cluster_node_stops_by_a_guest_shutdown_with_no_api_call(recorder: str) -> None:
    release, shutdowns = release_for("cluster", recorder)
    release("stop")
    assert _Recorder.requests == []
    assert shutdowns == [["shutdown", "-h", "now"]]


@pytest.mark.parametrize(
    ("action", "request_line"),
    [
        ("stop", ("POST", "/tpu/v2/projects/test-project-123/locations/us-central1-a/nodes/tpu-vm-1:stop")),
        ("delete", ("DELETE", "/tpu/v2/projects/test-project-123/locations/us-central1-a/nodes/tpu-vm-1")),
    ],
)
def test_a_tpu_vm_releases_itself_through_the_tpu_api(
    recorder: str, action: str, request_line: tuple[str, str]
) -> None:
    """A guest shutdown would keep the TPU billing: the TPU API stops or deletes the node."""
    release, shutdowns = release_for("tpu", recorder, tpu_name="tpu-vm-1")
    release(action)
    assert _Recorder.requests == [(*request_line, "Bearer tok3n")]
    assert shutdowns == []


def test_a_delete_the_api_refuses_still_stops_the_machine(tmp_path: Path) -> None:
    release, shutdowns = release_for("cluster", "http://127.0.0.1:9")
    release("delete")
    assert shutdowns == [["shutdown", "-h", "now"]]


# --- The TPU VM's run-time cap ----------------------------------------------------------------


@pytest.mark.slow
def test_the_tpu_run_time_cap_ends_the_agent_records_failed_and_stops(tmp_path: Path) -> None:
    """Defect: the TPU VM had no run-time cap at all (the TPU API has none)."""
    from trainstack.localrun.standins import MetadataServer

    stack_ = resolve_stack(stack("tpu"))
    assert stack_.tpu is not None
    bucket = tmp_path / "bucket"
    metadata = {**bootscripts.tpu_node_metadata(stack_, stack_.tpu).to_metadata(), METADATA_KEYS.max_run_seconds: "2"}
    metadata[METADATA_KEYS.bucket] = str(bucket)
    metadata[METADATA_KEYS.job_dir] = LAYOUT.job_dir(str(bucket), stack_.job.name)  # type: ignore[union-attr]
    server = MetadataServer({"tpu": metadata}, {}, stack_.zone)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    stop_log = tmp_path / "self-stop.log"
    agent = subprocess.Popen(["sleep", "600"])
    # Reaped as soon as it ends, as the agent's own parent reaps it on a VM.
    ended: list[int] = []
    reaper = threading.Thread(target=lambda: ended.append(agent.wait()), daemon=True)
    reaper.start()
    try:
        # The orders the agent gives its cap: from the node's settings, counted from its start.
        node_metadata = Metadata(Http(), server.root_for("tpu"))
        orders = cap_orders(node_metadata, read_settings(node_metadata), time.time(), agent.pid)
        cap = subprocess.run(
            [sys.executable, "-m", "trainstack_agent", *orders.arguments()],
            env={
                **os.environ,
                "TRAINSTACK_METADATA_ROOT": server.root_for("tpu"),
                "TRAINSTACK_SELF_STOP_LOG": str(stop_log),
            },
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        reaper.join(timeout=60)
        assert ended == [-signal.SIGTERM], "the cap did not end the agent"
    finally:
        agent.kill()
        server.shutdown()
        server.server_close()
    assert cap.returncode == 0, cap.stderr
    assert "run-time cap of 2 s reached" in cap.stderr
    assert stop_log.read_text().split()[1:] == ["stop", "tpu"]
    job_dir = Path(metadata[METADATA_KEYS.job_dir])
    for name in ("job.json", "tpu.json"):
        status = json.loads((job_dir / LAYOUT.status_dir / name).read_text())
        assert (status["state"], status["exit_code"], status["reason"]) == ("FAILED", 124, "run-time cap reached")


def test_the_tpu_vms_cap_comes_from_the_stack() -> None:
    cfg = stack("tpu")
    assert cfg.settings.tpu is not None
    boot = bootscripts.boot_files(resolve_stack(cfg))
    assert boot.tpu_metadata[METADATA_KEYS.max_run_seconds] == str(round(cfg.settings.tpu.max_run_hours * 3600))


@pytest.mark.slow
def test_a_second_boot_of_the_same_node_leaves_the_job_to_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: two boots of one node raced, two trainers on one job directory."""
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "600")
    local = start(stack("dev"), tmp_path)
    wait_until(lambda: trainers_started(local), "the trainer's start", 60)
    chief = local.nodes[0]
    second = subprocess.run(
        local.boot_command(),
        env=local._environment(chief),
        cwd=chief.state_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 0
    assert "another boot of this node holds" in second.stderr
    assert "starting the job" not in second.stderr
    local.signal_node("chief", signal.SIGTERM)
    local.wait(timeout=60)


# --- Hostile values rendered into every template ---------------------------------------------

HOSTILE = [
    "$(touch {m})",
    "`touch {m}`",
    "'; touch {m}; '",
    '"; touch {m}; "',
    "x\ntouch {m}\n",
    "NOTE\ntouch {m}\nNOTE",
]


def hostile_config(value: str) -> StackConfig:
    """A config no validation would pass, built directly: the renderer must hold on its own."""
    tpu = Tpu(accelerator_type="v2-8", runtime_version="tpu-vm-tf-2.18.0-pjrt")
    settings = Settings.model_construct(
        zone=value,
        name=value,
        labels={},
        cluster=stack("dev").settings.cluster,
        tpu=tpu,
        notebook=stack("notebook").settings.notebook,
    )
    return StackConfig.model_construct(stack=value, project=value, region="us-central1", settings=settings)


class _NotFound(BaseHTTPRequestHandler):
    """A metadata server that has nothing: every required read fails at once."""

    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def empty_metadata_server() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1"
    server.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("pattern", HOSTILE)
def test_hostile_values_render_as_data_in_every_template(
    tmp_path: Path, pattern: str, empty_metadata_server: str
) -> None:
    """Defect: the stack name was rendered unquoted into a heredoc of the Workbench
    post-startup script: command execution as root."""
    marker = tmp_path / "executed"
    cfg = hostile_config(pattern.format(m=marker))
    rendered = bootscripts.boot_files(resolve_stack(cfg)).by_filename()
    assert set(rendered) == {"cluster-node.sh", "tpu-vm.sh", "workbench-post-startup.sh", "workbench-startup.sh"}
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for tool in ("gcloud", "chown", "shutdown"):
        (stubs / tool).write_text("#!/bin/sh\nexit 1\n")
        (stubs / tool).chmod(0o755)
    environment = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        # The node scripts must stop for want of metadata, running only their top part.
        "TRAINSTACK_METADATA_ROOT": empty_metadata_server,
        "TRAINSTACK_STATE_DIR": str(tmp_path / "state"),
        "TRAINSTACK_SELF_STOP_LOG": str(tmp_path / "self-stop.log"),
        "TRAINSTACK_NOTEBOOK_HOME": str(tmp_path / "home"),
    }
    for filename, text in rendered.items():
        path = tmp_path / filename
        path.write_text(text)
        # SC2016 (info) flags "$(" inside single quotes: here that is the point.
        lint = shellcheck(path, "--exclude=SC2016")
        assert lint.returncode == 0, f"{filename}:\n{lint.stdout}"
        run = subprocess.run(["bash", str(path)], env=environment, capture_output=True, text=True, timeout=120)
        assert not marker.exists(), f"{filename} executed a rendered value:\n{run.stderr}"
    note = (tmp_path / "home" / "trainstack" / "README.txt").read_text()
    assert pattern.format(m=marker) in note, "the stack name is not shown as written"


@pytest.mark.slow
def test_a_local_runs_grpc_ports_are_reachable_from_loopback_inside_its_namespace_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorFlow's gRPC servers listen on 0.0.0.0 whatever TF_CONFIG says; its worker service
    runs whatever graph it is sent. The probe listens on its TF_CONFIG port the same way: from
    this machine's own network the port must not answer."""
    monkeypatch.setenv("PROBE_LISTEN", "1")
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "20")
    local = start(stack("multiworker"), tmp_path)
    assert local.network is not None, local.network_note
    cluster = json.loads(next(iter(local.machines.project_attributes.values())))
    port = int(cluster["chief"][0].rsplit(":", 1)[1])
    listening = local.job_dir / "listening" / "chief"
    wait_until(listening.exists, "the probe listening on its TF_CONFIG port", 60)
    for address in ("127.0.0.1", socket.gethostbyname(socket.gethostname())):
        with socket.socket() as client, pytest.raises(ConnectionRefusedError):
            client.connect((address, port))
    # Inside the namespace the nodes reach it (the probe chief connects to itself).
    assert listening.read_text() == "reached"
    local.signal_node("chief", signal.SIGTERM)
    local.wait(timeout=60)
