"""The TPU VM's run-time cap, its only cap, stops the TPU whatever it cannot read.

The cap runs in this process against a real HTTP stand-in on loopback for the metadata
server, Cloud Storage and the TPU API (every request recorded), on a fake clock: each test
looks for the exact stop request the cap sends to the TPU API, and at the agent it ends (a
real process). The cap gets its orders as the agent gives them, from the node's settings
read while the metadata server answers; the agent started at the fake clock's 0."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from http_stand_in import Scripted, scripted_server

from agent_fakes import FakeClock
from trainstack.cloud import bootscripts
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack
from trainstack_agent.agent import Agent
from trainstack_agent.cap import (
    CapOrders,
    CapOrdersError,
    cap_orders,
    parse_cap,
    refused_cap,
    run_cap,
    start_run_time_cap,
)
from trainstack_agent.cloud import Http
from trainstack_agent.compute import Place
from trainstack_agent.processes import Log
from trainstack_agent.release import Release
from trainstack_agent.settings import read_settings
from trainstack_contract import LAYOUT, METADATA_KEYS

TOKEN = "ya29.tpu-token"
PROJECT, ZONE = "test-project-123", "us-central1-a"
CAP_SECONDS = 3600


class TimedAgent(Agent):
    """The agent's pieces, noting the fake clock's time of each release of the machine."""

    def __init__(self, clock: FakeClock, released_at: list[float], **pieces: object) -> None:
        super().__init__(**pieces)  # type: ignore[arg-type]
        self.clock = clock
        self.released_at = released_at

    def release(self, kind: str, node: str, tpu_name: str | None, place: Place | None = None) -> Release:
        self.released_at.append(self.clock.now)
        return super().release(kind, node, tpu_name, place)


@dataclass
class Cap:
    """One run of the cap: the stand-in, the TPU's node name and where its job's status is."""

    server: Scripted
    clock: FakeClock
    tpu_name: str
    bucket: str
    job_status_path: str
    metadata_paths: list[str]
    shutdowns: list[list[str]]
    log: io.StringIO
    released_at: list[float]
    # The node's state directory (where a standing node records the job it runs).
    state_dir: Path | None = None

    @property
    def stop_path(self) -> str:
        return f"/tpu/v2/projects/{PROJECT}/locations/{ZONE}/nodes/{self.tpu_name}:stop"

    def agent(self) -> Agent:
        environment = {
            "TRAINSTACK_METADATA_ROOT": f"{self.server.root}/computeMetadata/v1",
            "TRAINSTACK_STORAGE_API": self.server.root,
            "TRAINSTACK_TPU_API": f"{self.server.root}/tpu/v2",
            **({"TRAINSTACK_STATE_DIR": str(self.state_dir)} if self.state_dir else {}),
        }
        agent = TimedAgent(
            self.clock,
            self.released_at,
            environment=environment,
            http=Http(timeout=5, sleep=self.clock.sleep),
            run=lambda argv: self.shutdowns.append(list(argv)),
        )
        agent.log = Log(self.log, journal=False)
        return agent

    def metadata_outage(self) -> None:
        """From now on the metadata server answers 503 for everything but the VM's token (the
        one thing only it can give, and no command line may carry)."""
        for path in self.metadata_paths:
            self.server.answer(path, (503, b""))

    def run(self, outage: bool = False, cap_starts_at: float = 0.0) -> tuple[int, int]:
        """The agent gives the cap its orders (at the fake clock's 0); the cap starts at
        ``cap_starts_at``, after a metadata outage began where asked. The cap's exit status
        and the agent's."""
        agent_process = subprocess.Popen(["sleep", "600"])
        ended: list[int] = []
        reaper = threading.Thread(target=lambda: ended.append(agent_process.wait()), daemon=True)
        reaper.start()
        try:
            agent = self.agent()
            orders = cap_orders(
                agent.metadata, read_settings(agent.metadata), self.clock.utc().timestamp(), agent_process.pid
            )
            if outage:
                self.metadata_outage()
            self.clock.sleep(cap_starts_at)
            code = run_cap(self.agent(), parse_cap(orders.arguments()), self.clock)
            reaper.join(timeout=30)
        finally:
            agent_process.kill()
        return code, ended[0] if ended else 0

    def stops(self) -> list[tuple[str, str, str | None]]:
        return [
            (request["method"], request["path"], request["headers"].get("Authorization"))
            for request in self.server.requests
            if request["path"].startswith("/tpu/")
        ]


@pytest.fixture
def cap(tmp_path: Path) -> Iterator[Cap]:
    stack = resolve_stack(load_stack(STACKS_DIR / "Pulumi.tpu.yaml")[0])
    assert stack.tpu is not None
    assert stack.job is not None
    metadata = {
        **bootscripts.tpu_node_metadata(stack, stack.tpu).to_metadata(),
        METADATA_KEYS.max_run_seconds: str(CAP_SECONDS),
    }
    bucket = metadata[METADATA_KEYS.bucket]
    assert bucket.startswith("gs://")
    job_dir = metadata[METADATA_KEYS.job_dir]
    name = urllib.parse.quote(f"{job_dir[len(bucket) + 1 :]}/{LAYOUT.job_status}", safe="")
    with scripted_server() as server:
        keys = [getattr(METADATA_KEYS, field.name) for field in dataclasses.fields(METADATA_KEYS)]
        paths = [f"/computeMetadata/v1/instance/attributes/{key}" for key in keys]
        for key, value in metadata.items():
            server.answer(f"/computeMetadata/v1/instance/attributes/{key}", (200, value.encode()))
        server.answer("/computeMetadata/v1/project/project-id", (200, PROJECT.encode()))
        server.answer("/computeMetadata/v1/instance/zone", (200, f"projects/123/zones/{ZONE}".encode()))
        paths += ["/computeMetadata/v1/project/project-id", "/computeMetadata/v1/instance/zone"]
        server.answer(
            "/computeMetadata/v1/instance/service-accounts/default/token",
            (200, json.dumps({"access_token": TOKEN, "expires_in": 3600}).encode()),
        )
        server.answer(f"/upload/storage/v1/b/{bucket[5:]}/o", (200, b"{}"))
        tpu_name = metadata[METADATA_KEYS.tpu_name]
        server.answer(f"/tpu/v2/projects/{PROJECT}/locations/{ZONE}/nodes/{tpu_name}:stop", (200, b"{}"))
        status_path = f"/storage/v1/b/{bucket[5:]}/o/{name}"
        yield Cap(server, FakeClock(), tpu_name, bucket, status_path, paths, [], io.StringIO(), [], tmp_path / "state")


def assert_stopped_through_the_tpu_api(cap: Cap, code: int, agent_exit: int) -> None:
    assert code == 0
    assert agent_exit == -signal.SIGTERM, "the cap did not end the agent"
    assert cap.stops() == [("POST", cap.stop_path, f"Bearer {TOKEN}")], cap.log.getvalue()
    assert cap.shutdowns == [], "a guest shutdown keeps the TPU billing"


def test_a_cap_that_reads_everything_stops_the_tpu_at_the_cap(cap: Cap) -> None:
    cap.server.answer(cap.job_status_path, (404, b""))
    assert_stopped_through_the_tpu_api(cap, *cap.run())
    assert cap.clock.now >= CAP_SECONDS
    assert f"run-time cap of {CAP_SECONDS} s reached" in cap.log.getvalue()


@pytest.mark.parametrize(
    "answer",
    [(200, b" " * (256 * 1024 + 1)), (403, b"")],
    ids=["oversize", "refused"],
)
def test_a_job_status_the_cap_cannot_read_still_stops_the_tpu_and_records_failed(
    cap: Cap, answer: tuple[int, bytes]
) -> None:
    """Defect: an oversize or unreadable status/job.json killed the cap in a traceback, and
    nothing stopped the TPU."""
    cap.server.answer(cap.job_status_path, answer)
    assert_stopped_through_the_tpu_api(cap, *cap.run())
    uploads = [request["body"] for request in cap.server.requests if request["path"].startswith("/upload/")]
    assert any(b'"FAILED"' in body and b"run-time cap reached" in body for body in uploads)


def test_cloud_storage_giving_up_at_the_cap_still_stops_the_tpu(cap: Cap) -> None:
    """Defect: Cloud Storage giving up (503 after every retry) at the cap killed the cap."""
    cap.server.answer(cap.job_status_path, (503, b""))
    cap.server.answer(f"/upload/storage/v1/b/{cap.bucket[5:]}/o", (503, b""))
    assert_stopped_through_the_tpu_api(cap, *cap.run())
    assert "Cloud Storage gave up" in cap.log.getvalue()


def test_a_metadata_server_that_answers_503_for_ever_does_not_stop_the_tpu_early(cap: Cap) -> None:
    """Defect: the cap read the node's settings again from the metadata server and, after
    about 6.5 minutes of 503s, stopped a healthy TPU job at once. The agent's orders on the
    cap's command line tell it when and what to stop: the stop comes at the cap, not earlier,
    and is the exact stop call, with the project and zone the agent gave."""
    cap.server.answer(cap.job_status_path, (404, b""))
    assert_stopped_through_the_tpu_api(cap, *cap.run(outage=True))
    [released_at] = cap.released_at
    assert CAP_SECONDS <= released_at < CAP_SECONDS + 60, cap.log.getvalue()
    [stop] = [request for request in cap.server.requests if request["path"].startswith("/tpu/")]
    assert stop["body"] == b"{}"
    assert stop["headers"].get("Content-Type") == "application/json"
    assert f"run-time cap of {CAP_SECONDS} s reached" in cap.log.getvalue()
    # Recording FAILED needs the node's settings: without them nothing is recorded.
    assert "cannot read this node's settings" in cap.log.getvalue()
    assert not [request for request in cap.server.requests if request["path"].startswith("/upload/")]


def test_a_cap_started_again_later_keeps_the_agents_deadline(cap: Cap) -> None:
    """The deadline is counted from the agent's start: a cap started 1000 s later stops the
    TPU at the cap all the same, not 1000 s after it."""
    cap.server.answer(cap.job_status_path, (404, b""))
    assert_stopped_through_the_tpu_api(cap, *cap.run(cap_starts_at=1000.0))
    [released_at] = cap.released_at
    assert CAP_SECONDS <= released_at < CAP_SECONDS + 60


def test_the_agent_starts_the_cap_with_its_orders(cap: Cap, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent hands the cap everything the stop needs, counted from the agent's start."""
    started: list[list[str]] = []
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **options: started.append(list(argv)))
    agent = cap.agent()
    start_run_time_cap(agent, read_settings(agent.metadata), 1_800_000_000.75)
    [argv] = started
    orders = parse_cap(argv[argv.index("cap") :])
    assert orders == CapOrders(
        agent_pid=os.getpid(),
        tpu_name=cap.tpu_name,
        place=Place(PROJECT, ZONE),
        release="stop",
        cap_seconds=CAP_SECONDS,
        deadline=1_800_000_000 + CAP_SECONDS,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--zone": "us-central1-a;reboot"}, "--zone 'us-central1-a;reboot' is not a zone name like us-central1-a"),
        ({"--deadline": "-5"}, "--deadline '-5' is not a whole number from 1 to 999999999999"),
        ({"--release": "keep"}, "--release 'keep' is not stop or delete"),
        ({"--tpu-name": None}, "--tpu-name is missing: the agent gives a TPU node name"),
    ],
    ids=["zone", "deadline", "release", "missing"],
)
def test_a_cap_that_refuses_its_arguments_stops_the_tpu_now(
    cap: Cap, change: dict[str, str | None], message: str
) -> None:
    """Fail closed: a cap that cannot tell when or what to stop stops the TPU at once (each
    argument is matched whole: the cap runs as root)."""
    agent = cap.agent()
    arguments = cap_orders(agent.metadata, read_settings(agent.metadata), 0.0, 4242).arguments()
    for option, value in change.items():
        at = arguments.index(option)
        arguments[at : at + 2] = [] if value is None else [option, value]
    with pytest.raises(CapOrdersError) as refused:
        parse_cap(arguments)
    assert str(refused.value) == message
    assert refused_cap(agent, refused.value) == 1
    assert cap.stops() == [("POST", cap.stop_path, f"Bearer {TOKEN}")]
    assert cap.clock.now < 60
    assert cap.shutdowns == []
    assert message in cap.log.getvalue()


def test_a_stop_the_tpu_api_refuses_for_a_while_is_asked_again(cap: Cap) -> None:
    """The stop itself is retried within a bound before the guest shutdown, which keeps the
    TPU billing."""
    cap.server.answer(cap.job_status_path, (404, b""))
    cap.server.answer(cap.stop_path, *[(503, b"")] * 8, (200, b"{}"))
    code, agent_exit = cap.run()
    assert code == 0
    assert agent_exit == -signal.SIGTERM
    assert cap.stops()[-1] == ("POST", cap.stop_path, f"Bearer {TOKEN}")
    assert len(cap.stops()) == 9
    assert cap.shutdowns == []


def test_a_stop_the_tpu_api_refuses_for_hours_is_still_asked_and_no_guest_shutdown_comes(cap: Cap) -> None:
    """Defect: after 4 minutes of a TPU API outage the guest shut down, which keeps the TPU
    billing and ended the cap, the one process that would have asked again."""
    cap.server.answer(cap.job_status_path, (404, b""))
    # Each round's call is retried 6 times by Http: 20 rounds refused, about 2.5 hours.
    cap.server.answer(cap.stop_path, *[(503, b"")] * (20 * 6), (200, b"{}"))
    code, _ = cap.run()
    assert code == 0
    assert cap.shutdowns == []
    assert len(cap.stops()) == 20 * 6 + 1
    assert cap.clock.now >= CAP_SECONDS + 2 * 3600


def test_a_tpu_api_that_never_answers_is_asked_for_a_day_then_the_guest_shuts_down(cap: Cap) -> None:
    cap.server.answer(cap.job_status_path, (404, b""))
    cap.server.answer(cap.stop_path, (503, b""))
    cap.run()
    assert cap.shutdowns == [["shutdown", "-h", "now"]]
    assert cap.clock.now >= CAP_SECONDS + 24 * 3600


def test_a_standing_tpu_vms_cap_records_failed_in_the_queued_job_it_runs(cap: Cap) -> None:
    """A standing TPU VM runs queued jobs after its own: at the cap, the one running is ended
    FAILED, not the stack's own job that ended long before."""
    from trainstack_agent.jobqueue import record_running

    assert cap.state_dir is not None
    cap.state_dir.mkdir()
    record_running(cap.state_dir, f"{cap.bucket}/jobs/q3_sweep")
    queued = urllib.parse.quote(f"jobs/q3_sweep/{LAYOUT.job_status}", safe="")
    cap.server.answer(f"/storage/v1/b/{cap.bucket[5:]}/o/{queued}", (404, b""))
    assert_stopped_through_the_tpu_api(cap, *cap.run())
    uploads = [request["body"] for request in cap.server.requests if request["path"].startswith("/upload/")]
    recorded = [body for body in uploads if b'"name": "jobs/q3_sweep/status/job.json"' in body]
    assert recorded, uploads
    assert all(b'"FAILED"' in body for body in recorded), uploads
    own = urllib.parse.unquote(cap.job_status_path.rsplit("/o/", 1)[1])
    assert own.startswith("jobs/")
    assert not [body for body in uploads if f'"name": "{own}"'.encode() in body]
