"""The rendered boot scripts under signals, dead peers, missing metadata and hostile values.

Each test runs the real rendered script (through `trainstack local`, or its functions
sourced into bash) with the probe trainer from tests/fixtures, and names the defect it
guards against.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from test_boot_scripts import PROBE_TRAINER, stack
from test_scripts import shellcheck
from trainstack import scripts
from trainstack.config import Settings, StackConfig, Tpu
from trainstack.local import LocalRun, TrainerOverrides
from trainstack.resolved import resolve_stack
from trainstack_contract import LAYOUT, METADATA_KEYS


def wait_for(condition: Any, seconds: float, what: str) -> None:
    """Polls ``condition`` until it holds; fails naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def start(cfg: StackConfig, workdir: Path, **kwargs: Any) -> LocalRun:
    return LocalRun(cfg, workdir, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER, **kwargs).start()


def trainers_started(local: LocalRun) -> bool:
    return all(any("starting the job" in line for line in n.lines) for n in local.nodes)


def test_sigterm_leaves_the_job_resumable_and_applies_no_on_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: SIGTERM (guest shutdown, reboot, host maintenance) recorded the job FAILED
    and applied on_finish, so a VM restart found a failed job and a stopped or deleted VM."""
    cfg = stack("dev")
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "600")
    local = start(cfg, tmp_path)
    wait_for(lambda: trainers_started(local), 60, "the trainer to start")
    local.signal_node("chief", signal.SIGTERM)
    interrupted = local.wait(timeout=60)
    assert interrupted.node_status["chief"] is not None and interrupted.node_status["chief"]["state"] == "INTERRUPTED"
    assert interrupted.job_status is not None and interrupted.job_status["state"] == "RUNNING"
    assert interrupted.self_stops == [], "on_finish was applied on a termination signal"
    assert any("received SIGTERM" in line for line in interrupted.logs["chief"])

    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "0")
    resumed = start(cfg, tmp_path).wait(timeout=120)
    assert resumed.succeeded, resumed.logs
    assert len(resumed.self_stops) == 1


def test_after_the_chief_is_killed_the_other_nodes_end_within_the_heartbeat_bound(
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
    wait_for(lambda: trainers_started(local), 60, "every trainer to start")
    killed_at = time.monotonic()
    local.signal_node("chief", signal.SIGKILL)
    others = [n for n in local.nodes if n.name != "chief"]
    wait_for(
        lambda: all(n.process is not None and n.process.poll() is not None for n in others),
        60,
        "the other nodes to end",
    )
    ended_after = time.monotonic() - killed_at
    result = local.wait(timeout=10)
    # The bound, one poll, and the grace end_process gives a trainer to exit.
    assert ended_after < timeout + scripts.heartbeat_seconds(timeout) + 10, f"{ended_after:.1f} s"
    for node in ("worker-0", "worker-1", "ps-0"):
        status = result.node_status[node]
        assert status is not None and status["state"] == "FAILED", (node, status)
        assert status["reason"] == f"no heartbeat from the chief for {timeout} s"
    # paramserver's on_finish is delete: each surviving node released itself.
    assert sorted(line.split()[1:] for line in result.self_stops) == [
        ["delete", n] for n in ("ps-0", "worker-0", "worker-1")
    ]


def test_the_chief_refreshes_its_heartbeat_while_it_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = stack("dev")
    assert base.settings.cluster is not None
    cfg = base.model_copy(
        update={
            "settings": base.settings.model_copy(
                update={"cluster": base.settings.cluster.model_copy(update={"heartbeat_timeout_seconds": 10})}
            )
        }
    )
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "5")
    local = start(cfg, tmp_path)
    job_status = local.job_dir / "status" / "job.json"
    seen: set[str] = set()

    def two_heartbeats() -> bool:
        if job_status.exists():
            status = json.loads(job_status.read_text())
            if status["state"] == "RUNNING":
                seen.add(status["time"])
        return len(seen) >= 2

    wait_for(two_heartbeats, 30, "two heartbeats")
    assert local.wait(timeout=60).succeeded


def test_missing_required_metadata_stops_the_node_and_writes_no_status(tmp_path: Path) -> None:
    """Defect: with the metadata server answering 404 the script ran with an empty role and
    job dir, wrote status to /status/-.json and kept the VM billing."""
    local = LocalRun(stack("dev"), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER)
    for key in (METADATA_KEYS.role, METADATA_KEYS.job_dir):
        del local.nodes[0].metadata[key]
    result = local.start().wait(timeout=60)
    assert result.exit_codes["chief"] == 1
    assert any(f"required instance metadata {METADATA_KEYS.role} is missing" in line for line in result.logs["chief"])
    assert [line.split()[1] for line in result.self_stops] == ["stop"]
    assert not list(tmp_path.rglob("-.json")) and not (Path("/status")).exists()
    assert not any("starting the job" in line for line in result.logs["chief"])


def test_an_unknown_on_finish_stops_the_node(tmp_path: Path) -> None:
    """Defect: an unknown on_finish fell through to keep, leaving the VM billing."""
    local = LocalRun(stack("dev"), tmp_path, TrainerOverrides(), echo=False, trainer_source=PROBE_TRAINER)
    local.nodes[0].metadata[METADATA_KEYS.on_finish] = "hibernate"
    result = local.start().wait(timeout=60)
    assert result.succeeded
    assert [line.split()[1] for line in result.self_stops] == ["stop"]


def test_a_second_boot_of_the_same_node_leaves_the_job_to_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: two boots of one node raced, two trainers on one job directory."""
    monkeypatch.setenv("PROBE_CHIEF_SLEEP", "600")
    local = start(stack("dev"), tmp_path)
    wait_for(lambda: trainers_started(local), 60, "the trainer to start")
    chief = local.nodes[0]
    second = subprocess.run(
        ["bash", str(local.script)],
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

    def do_GET(self) -> None:  # noqa: N802
        self.send_error(404)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def empty_metadata_server() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1"
    server.shutdown()


@pytest.mark.parametrize("pattern", HOSTILE)
def test_hostile_values_render_as_data_in_every_template(
    tmp_path: Path, pattern: str, empty_metadata_server: str
) -> None:
    """Defect: the stack name was rendered unquoted into a heredoc of the Workbench
    post-startup script: command execution as root."""
    marker = tmp_path / "executed"
    cfg = hostile_config(pattern.format(m=marker))
    rendered = scripts.boot_files(resolve_stack(cfg)).by_filename()
    assert set(rendered) == {"cluster-node.sh", "tpu-vm.sh", "workbench-post-startup.sh"}
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


# --- The TPU VM's run-time cap and the self-delete request ----------------------------------


def partials(cfg: StackConfig, kind: scripts.NodeKind | None = None) -> str:
    return "".join(
        scripts.render(t, resolve_stack(cfg), kind) for t in ("_common.sh.j2", "_environment.sh.j2", "_job.sh.j2")
    )


def test_the_tpu_run_time_cap_ends_the_boot_records_failed_and_stops(tmp_path: Path) -> None:
    """Defect: the TPU VM had no run-time cap at all (the TPU API has none)."""
    cfg = stack("tpu")
    library = tmp_path / "functions.sh"
    library.write_text(
        partials(cfg, scripts.NodeKind(("x",), False, scripts.ShellCode("true"), scripts.ShellCode("true")))
    )
    job_dir = tmp_path / "job"
    stop_log = tmp_path / "self-stop.log"
    boot_script = tmp_path / "boot.sh"
    boot_script.write_text(
        f'source "{library}"\nJOB_DIR="{job_dir}" NODE_NAME=tpu ON_FINISH=stop\nstart_run_time_cap 2\nsleep 600\n'
    )
    # The boot script's parent reaps it, as the VM's script runner does.
    parent = subprocess.Popen(
        ["bash", "-c", f'bash "{boot_script}"; echo "boot script ended: $?"; sleep 600'],
        env={**os.environ, "TRAINSTACK_SELF_STOP_LOG": str(stop_log)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: stop_log.exists(), 60, "the cap to stop the machine")
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "boot script ended: 143", "the boot script outlived the cap"
    finally:
        parent.kill()
        parent.wait()
    assert stop_log.read_text().split()[1:] == ["stop", "tpu"]
    for name in ("job.json", "tpu.json"):
        status = json.loads((job_dir / LAYOUT.status_dir / name).read_text())
        assert (status["state"], status["exit_code"], status["reason"]) == ("FAILED", 124, "run-time cap reached")


def test_the_tpu_script_gets_its_cap_from_the_stack() -> None:
    cfg = stack("tpu")
    assert cfg.settings.tpu is not None
    boot = scripts.boot_files(resolve_stack(cfg))
    assert boot.tpu_metadata[METADATA_KEYS.max_run_seconds] == str(round(cfg.settings.tpu.max_run_hours * 3600))
    assert boot.tpu_script is not None and "start_run_time_cap" in boot.tpu_script.split("run_job\n")[-2]


class _Recorder(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, str | None]] = []
    answers = {
        "/computeMetadata/v1/instance/name": "tc-worker-0",
        "/computeMetadata/v1/instance/zone": "projects/123/zones/us-central1-a",
        "/computeMetadata/v1/project/project-id": "test-project-123",
        "/computeMetadata/v1/instance/service-accounts/default/token": json.dumps(
            {"access_token": "tok3n", "expires_in": 3599}
        ),
    }

    def do_GET(self) -> None:  # noqa: N802
        body = self.answers.get(self.path)
        if body is None or self.headers.get("Metadata-Flavor") != "Google":
            self.send_error(404)
            return
        self._reply(body)

    def do_DELETE(self) -> None:  # noqa: N802
        _Recorder.requests.append(("DELETE", self.path, self.headers.get("Authorization")))
        self._reply('{"kind": "compute#operation", "status": "RUNNING"}')

    def _reply(self, body: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def test_self_delete_sends_one_delete_request_for_this_instance_with_its_own_token(tmp_path: Path) -> None:
    """The exact request a node sends to delete itself (on_finish: delete)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}"
    library = tmp_path / "functions.sh"
    library.write_text(partials(stack("multiworker")))
    try:
        result = subprocess.run(
            ["bash", "-c", f'source "{library}"; self_stop delete'],
            env={
                **os.environ,
                "TRAINSTACK_METADATA_ROOT": f"{root}/computeMetadata/v1",
                "TRAINSTACK_COMPUTE_API": f"{root}/compute/v1",
                "PATH": f"{tmp_path}:{os.environ['PATH']}",
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert _Recorder.requests == [
        ("DELETE", "/compute/v1/projects/test-project-123/zones/us-central1-a/instances/tc-worker-0", "Bearer tok3n")
    ]


# --- A Spot VM's preemption ------------------------------------------------------------------


class _Preempted(_Recorder):
    """The metadata server of a Spot VM that Compute Engine is reclaiming (or not)."""

    answers = {"/computeMetadata/v1/instance/preempted": "TRUE"}


@pytest.mark.parametrize(("answer", "state"), [("TRUE", "PREEMPTED"), ("FALSE", "INTERRUPTED")])
def test_a_termination_signal_on_a_preempted_spot_vm_is_recorded_as_preempted(
    tmp_path: Path, answer: str, state: str
) -> None:
    """Preemption is not failure: the node's status says PREEMPTED (the job stays RUNNING and
    on_finish is not applied); any other termination signal stays INTERRUPTED."""
    _Preempted.answers = {"/computeMetadata/v1/instance/preempted": answer}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Preempted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    library = tmp_path / "functions.sh"
    library.write_text(partials(stack("multiworker")))
    job_dir, stop_log = tmp_path / "job", tmp_path / "self-stop.log"
    try:
        result = subprocess.run(
            [
                "bash",
                "-c",
                f'source "{library}"; JOB_DIR="{job_dir}" NODE_NAME=worker-0 ON_FINISH=stop; '
                'NODE_STATUS="$(node_status_uri)"; on_termination TERM',
            ],
            env={
                **os.environ,
                "TRAINSTACK_METADATA_ROOT": f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1",
                "TRAINSTACK_SELF_STOP_LOG": str(stop_log),
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.shutdown()
    assert result.returncode == 143, result.stderr
    status = json.loads((job_dir / LAYOUT.status_dir / "worker-0.json").read_text())
    assert (status["state"], status["reason"]) == (state, "SIGTERM")
    assert not stop_log.exists()  # on_finish is not applied: the VM is started again, not released
    if state == "PREEMPTED":
        assert "Compute Engine preempted this Spot VM" in result.stderr


def test_the_chief_starts_only_preempted_peers_backs_off_and_stops_at_the_bound(tmp_path: Path) -> None:
    """watch_spot_peers against the local stand-ins of the metadata server and of the Compute
    Engine API: what it starts, how often, and when it gives up."""
    from trainstack.local import ComputeApiServer, MetadataServer

    states = tmp_path / "instances.json"
    starts: list[str] = []

    def status(instance: str) -> str | None:
        return json.loads(states.read_text()).get(instance)

    def start_call(instance: str) -> bool:
        starts.append(instance)  # accepted, but no Spot capacity: the instance stays stopped
        return status(instance) is not None

    metadata = MetadataServer({"chief": {}}, {}, "us-central1-a")
    compute = ComputeApiServer("us-central1-a", status, start_call, tmp_path / "compute-api.log")
    for server in (metadata, compute):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    job_dir = tmp_path / "job"
    for node, state in {"worker-0": "PREEMPTED", "worker-1": "SUCCEEDED", "worker-2": "INTERRUPTED"}.items():
        (job_dir / LAYOUT.node_status(node)).parent.mkdir(parents=True, exist_ok=True)
        (job_dir / LAYOUT.node_status(node)).write_text(json.dumps({"state": state, "time": "t1"}))
    # worker-0 booted again and was preempted again before the chief's next look: its
    # status is PREEMPTED still, with a new time.
    again = json.dumps({"history": [{"state": "RUNNING", "time": "t9"}], "state": "PREEMPTED", "time": "t2"})
    library = tmp_path / "functions.sh"
    library.write_text(partials(stack("multiworker")))
    script = f"""
source "{library}"
JOB_DIR="{job_dir}" NODE_NAME=chief MAX_RESTARTS=1
RECOVER_NODES="worker-0=i-w0 worker-1=i-w1 worker-2=i-w2"
set_states() {{ printf '%s' "$1" > "{states}"; }}
set_states '{{"i-w0": "TERMINATED", "i-w1": "TERMINATED", "i-w2": "TERMINATED"}}'
watch_spot_peers && echo "look 1: on"
watch_spot_peers && echo "look 2: on"
set_states '{{"i-w0": "RUNNING", "i-w1": "TERMINATED", "i-w2": "TERMINATED"}}'
watch_spot_peers && echo "look 3: on"
set_states '{{"i-w0": "TERMINATED", "i-w1": "TERMINATED", "i-w2": "TERMINATED"}}'
watch_spot_peers && echo "look 4: on"
printf '%s' '{again}' > "{job_dir / LAYOUT.node_status("worker-0")}"
watch_spot_peers || echo "look 5: $END_REASON"
"""
    try:
        result = subprocess.run(
            ["bash", "-c", script],
            env={
                **os.environ,
                "TRAINSTACK_METADATA_ROOT": metadata.root_for("chief"),
                "TRAINSTACK_COMPUTE_API": compute.root,
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for server in (metadata, compute):
            server.shutdown()
    assert result.returncode == 0, result.stderr
    # Only the preempted peer is started, once: looks 2 and 4 see the same preemption (the
    # same status) within the back-off. The SUCCEEDED peer stopped at the end of its work,
    # the INTERRUPTED one on purpose. Look 5 sees a new preemption, past the bound.
    assert starts == ["i-w0"], (starts, result.stderr)
    assert result.stdout.splitlines() == [
        "look 1: on",
        "look 2: on",
        "look 3: on",
        "look 4: on",
        "look 5: worker-0 was preempted 2 times, more than cluster.max_restarts (1)",
    ]
    assert "worker-0 (i-w0) was preempted: starting it again (restart 1 of at most 1)" in result.stderr
