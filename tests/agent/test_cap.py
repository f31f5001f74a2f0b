"""The TPU VM's run-time cap, its only cap, stops the TPU whatever it cannot read.

The cap runs in this process against a real HTTP stand-in on loopback for the metadata
server, Cloud Storage and the TPU API (every request recorded), on a fake clock: each test
looks for the exact stop request the cap sends to the TPU API, and at the agent it ends (a
real process)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from http_stand_in import Scripted, scripted_server

from agent_fakes import FakeClock
from trainstack.cloud import bootscripts
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack
from trainstack_agent.cloud import Http
from trainstack_agent.main import Agent, run_cap
from trainstack_agent.processes import Log
from trainstack_contract import LAYOUT, METADATA_KEYS

TOKEN = "ya29.tpu-token"
PROJECT, ZONE = "test-project-123", "us-central1-a"
CAP_SECONDS = 3600


@dataclass
class Cap:
    """One run of the cap: the stand-in, the TPU's node name and where its job's status is."""

    server: Scripted
    clock: FakeClock
    tpu_name: str
    bucket: str
    job_status_path: str
    shutdowns: list[list[str]]
    log: io.StringIO

    @property
    def stop_path(self) -> str:
        return f"/tpu/v2/projects/{PROJECT}/locations/{ZONE}/nodes/{self.tpu_name}:stop"

    def attribute(self, key: str, *answers: tuple[int, bytes]) -> None:
        self.server.answer(f"/computeMetadata/v1/instance/attributes/{key}", *answers)

    def run(self) -> tuple[int, int]:
        """Runs the cap over a real agent process; the cap's exit status and the agent's."""
        agent_process = subprocess.Popen(["sleep", "600"])
        ended: list[int] = []
        reaper = threading.Thread(target=lambda: ended.append(agent_process.wait()), daemon=True)
        reaper.start()
        environment = {
            "TRAINSTACK_METADATA_ROOT": f"{self.server.root}/computeMetadata/v1",
            "TRAINSTACK_STORAGE_API": self.server.root,
            "TRAINSTACK_TPU_API": f"{self.server.root}/tpu/v2",
        }
        agent = Agent(
            environment,
            http=Http(timeout=5, sleep=self.clock.sleep),
            run=lambda argv: self.shutdowns.append(list(argv)),
        )
        agent.log = Log(self.log, journal=False)
        try:
            code = run_cap(agent, agent_process.pid, self.clock)
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
def cap() -> Iterator[Cap]:
    stack = resolve_stack(load_stack(STACKS_DIR / "Pulumi.tpu.yaml")[0])
    assert stack.tpu is not None and stack.job is not None
    metadata = {**bootscripts.tpu_metadata(stack, stack.tpu), METADATA_KEYS.max_run_seconds: str(CAP_SECONDS)}
    bucket = metadata[METADATA_KEYS.bucket]
    assert bucket.startswith("gs://")
    job_dir = metadata[METADATA_KEYS.job_dir]
    name = urllib.parse.quote(f"{job_dir[len(bucket) + 1 :]}/{LAYOUT.job_status}", safe="")
    with scripted_server() as server:
        for key, value in metadata.items():
            server.answer(f"/computeMetadata/v1/instance/attributes/{key}", (200, value.encode()))
        server.answer("/computeMetadata/v1/project/project-id", (200, PROJECT.encode()))
        server.answer("/computeMetadata/v1/instance/zone", (200, f"projects/123/zones/{ZONE}".encode()))
        server.answer(
            "/computeMetadata/v1/instance/service-accounts/default/token",
            (200, json.dumps({"access_token": TOKEN, "expires_in": 3600}).encode()),
        )
        server.answer(f"/upload/storage/v1/b/{bucket[5:]}/o", (200, b"{}"))
        tpu_name = metadata[METADATA_KEYS.tpu_name]
        server.answer(f"/tpu/v2/projects/{PROJECT}/locations/{ZONE}/nodes/{tpu_name}:stop", (200, b"{}"))
        yield Cap(server, FakeClock(), tpu_name, bucket, f"/storage/v1/b/{bucket[5:]}/o/{name}", [], io.StringIO())


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


def test_a_metadata_503_when_the_cap_starts_is_asked_again_and_the_cap_kept(cap: Cap) -> None:
    """Defect: a metadata 503 when the cap started made it exit: the TPU had no cap left."""
    cap.server.answer(cap.job_status_path, (404, b""))
    # More 503s than one round of reads retries (6 attempts): the cap must ask again.
    cap.attribute(METADATA_KEYS.max_run_seconds, *[(503, b"")] * 8, (200, str(CAP_SECONDS).encode()))
    assert_stopped_through_the_tpu_api(cap, *cap.run())
    assert cap.clock.now >= CAP_SECONDS
    assert f"run-time cap of {CAP_SECONDS} s reached" in cap.log.getvalue()


def test_a_cap_the_metadata_server_never_gives_is_reached_at_once(cap: Cap) -> None:
    """Fail closed: a TPU VM that cannot tell when to stop stops after a bounded wait."""
    cap.server.answer(cap.job_status_path, (404, b""))
    cap.attribute(METADATA_KEYS.max_run_seconds, (503, b""))
    assert_stopped_through_the_tpu_api(cap, *cap.run())
    assert cap.clock.now < CAP_SECONDS
    assert "the cap cannot be learned; stopping this machine now" in cap.log.getvalue()


def test_a_stop_the_tpu_api_refuses_for_a_while_is_asked_again(cap: Cap) -> None:
    """The stop itself is retried within a bound before the guest shutdown, which keeps the
    TPU billing."""
    cap.server.answer(cap.job_status_path, (404, b""))
    cap.server.answer(cap.stop_path, *[(503, b"")] * 8, (200, b"{}"))
    code, agent_exit = cap.run()
    assert code == 0 and agent_exit == -signal.SIGTERM
    assert cap.stops()[-1] == ("POST", cap.stop_path, f"Bearer {TOKEN}") and len(cap.stops()) == 9
    assert cap.shutdowns == []


def test_a_tpu_api_that_never_answers_ends_in_a_guest_shutdown(cap: Cap) -> None:
    cap.server.answer(cap.job_status_path, (404, b""))
    cap.server.answer(cap.stop_path, (503, b""))
    cap.run()
    assert cap.shutdowns == [["shutdown", "-h", "now"]]
