"""The plan's own bucket grants, enforced: Cloud Storage's emulator behind a proxy that allows a
request only where the planned IAM bindings (and a job token's boundary) allow it, as IAM
does, and the node agent's own storage, status and token code making the calls a node makes.

A queued job and a tuning trial live in jobs/q<ID>_<NAME>/: the node's account must write
their status, claim and reports there (a 403 left them queued for ever), and a job's code,
which holds its own token and never the node's, must reach nothing but its own directory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import google.oauth2.credentials
import pytest
from google.api_core import exceptions
from google.cloud import storage
from http_stand_in import serving
from storage_proxies import Grant, IamStorageProxy

from stack_helpers import base_config, plan_of, write_stack
from test_status import BUCKET, emulator_server  # noqa: F401 (a fixture)
from trainstack.base import bucket as stores
from trainstack.localrun.standins import LOCAL_TOKEN, MetadataServer, TokenServiceServer
from trainstack.tuning.study import study_object
from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError, Http, Retry
from trainstack_agent.gcs import Storage
from trainstack_agent.jobtoken import Downscoper
from trainstack_agent.metadata import Metadata
from trainstack_contract import LAYOUT
from trainstack_contract.jobaccess import JobAccess
from trainstack_contract.lifecycle import JobState
from trainstack_contract.queue import INDEX_OBJECT, TAKEN_BY, queued_job_dir, taken_by_bytes

NODE = "serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"
# A trainstack:access member, and the token a teammate's `gcloud auth` would give them.
TEAMMATE = "user:ana@example.com"
TEAMMATE_TOKEN = "ya29.teammate-token"
QUEUED = queued_job_dir(f"gs://{BUCKET}", 1, "lr_low")
TRIAL = queued_job_dir(f"gs://{BUCKET}", 2, "study_t1")


# A team's own job, laid out as Google's taxifare tuning sample is: it reads its data and writes
# its output in buckets of the team's own, which the flags say.
TEAM_JOB = {
    "name": "taxifare",
    "package": "examples/tabular_mlp",
    "module": "tabular_mlp.task",
    "args": [
        "--train_data_path",
        "gs://team-data/taxifare/data/taxi-train*",
        "--output_dir",
        "gs://team-out/taxifare/",
    ],
}


def planned_grants(tmp_path: Path, config: dict[str, Any]) -> list[Grant]:
    """The bucket grants `pulumi up` would make for this stack, from the real program."""
    plan = plan_of(write_stack(tmp_path, config))
    grants = []
    for binding in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember"):
        condition = binding.inputs.get("condition")
        expression = condition and condition["expression"]
        grants.append(Grant(binding.inputs["bucket"], binding.inputs["member"], binding.inputs["role"], expression))
    return grants


class Cloud:
    """The emulator behind the enforcing proxy, the node's metadata and the token service."""

    def __init__(self, proxy: IamStorageProxy, metadata: MetadataServer, tokens: TokenServiceServer) -> None:
        self.proxy, self.tokens = proxy, tokens
        self.http = Http(retry=Retry(attempts=1))
        self.metadata = Metadata(self.http, metadata.root_for("chief"))
        # What the node's agent writes with: the node's own token.
        self.storage = Storage(self.http, self.metadata, proxy.url)

    def job_client(self, access: JobAccess) -> storage.Client:
        """A job's code's client library, with the token its agent downscoped for it."""
        token, _ = Downscoper(self.http, self.metadata, access.boundary(), self.tokens.root).token()
        credentials = google.oauth2.credentials.Credentials(token)
        return storage.Client(project="test-project-123", credentials=credentials)


@pytest.fixture
def cloud(tmp_path: Path, emulator_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:  # noqa: F811
    emulator_server.wipe()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_server.url)
    client = storage.Client(project="test-project-123")
    for name in (BUCKET, "team-data", "team-out"):
        client.create_bucket(name)
    config = base_config()
    config["trainstack:job"] = TEAM_JOB
    config["trainstack:access"] = {"members": [TEAMMATE]}
    grants = planned_grants(tmp_path, config)
    tokens = TokenServiceServer()

    def exchanged(token: str) -> tuple[str, dict[str, Any]] | None:
        return (NODE, tokens.issued[token]) if token in tokens.issued else None

    proxy = IamStorageProxy(emulator_server.url, grants, {LOCAL_TOKEN: NODE, TEAMMATE_TOKEN: TEAMMATE}, exchanged)
    with serving(tokens), serving(MetadataServer({"chief": {}}, {}, "us-central1-a")) as metadata, serving(proxy):
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        yield Cloud(proxy, metadata, tokens)


@pytest.mark.parametrize("job_dir", [QUEUED, TRIAL])
def test_the_node_writes_a_queued_jobs_status_claim_settings_and_report_under_the_plans_grants(
    cloud: Cloud, job_dir: str
) -> None:
    board = Board(cloud.storage, job_dir, "chief", "boot-1")
    board.write_node(JobState.RUNNING)
    board.write_job(JobState.RUNNING)
    board.write_node(JobState.SUCCEEDED, 0)
    board.write_job(JobState.SUCCEEDED, 0)
    assert cloud.storage.create(f"{job_dir}/{TAKEN_BY}", taken_by_bytes("chief", "2026-11-28T00:00:00Z"))
    cloud.storage.write(f"{job_dir}/{LAYOUT.job_settings}", b"{}")
    cloud.storage.write(f"{job_dir}/{LAYOUT.hypertune_metrics('chief')}", b'{"rmse": "1.5"}\n', "text/plain")
    job = cloud.storage.read(board.job_uri, 1 << 16)
    assert job is not None
    assert json.loads(job)["state"] == JobState.SUCCEEDED
    assert cloud.proxy.denied == []


def test_the_node_may_not_write_what_nodes_run_or_the_queue(cloud: Cloud) -> None:
    for name in (INDEX_OBJECT, "trainstack/code/x.zip", "notebooks/runs/x"):
        with pytest.raises(CloudError, match="403"):
            cloud.storage.write(f"gs://{BUCKET}/{name}", b"{}")
    assert cloud.proxy.denied == [
        f"{NODE} storage.objects.create gs://{BUCKET}/{name}"
        for name in (INDEX_OBJECT, "trainstack/code/x.zip", "notebooks/runs/x")
    ]


def test_a_jobs_code_reaches_its_own_directory_alone_and_never_what_the_agents_write(cloud: Cloud) -> None:
    # Another job's state, as the queue's agents wrote it with the node's token.
    other = "jobs/q2_other/status/job.json"
    cloud.storage.write(f"gs://{BUCKET}/{other}", b'{"state": "QUEUED"}')
    bucket = cloud.job_client(JobAccess(QUEUED)).bucket(BUCKET)
    own = QUEUED.removeprefix(f"gs://{BUCKET}/")
    bucket.blob(f"{own}/checkpoints/ckpt-1.index").upload_from_string(b"weights")
    bucket.blob(f"{own}/metrics.json").upload_from_string(b"{}")
    assert [b.name for b in bucket.list_blobs(prefix=f"{own}/checkpoints/")] == [f"{own}/checkpoints/ckpt-1.index"]
    for name in (
        other,
        f"{own}/status/job.json",
        f"{own}/{TAKEN_BY}",
        f"{own}/hypertune/chief.metrics",
        INDEX_OBJECT,
        "trainstack/tune/study/study.json",
        "jobs/q2_other/backup/chief/checkpoint",
    ):
        with pytest.raises(exceptions.Forbidden):
            bucket.blob(name).upload_from_string(b'{"state": "SUCCEEDED"}')
    with pytest.raises(exceptions.Forbidden):
        list(bucket.list_blobs(prefix="jobs/"))
    with pytest.raises(exceptions.Forbidden):
        bucket.blob(other).download_as_bytes()
    assert cloud.storage.read(f"gs://{BUCKET}/{other}", 1024) == b'{"state": "QUEUED"}'


def test_a_jobs_code_reads_and_writes_where_its_flags_say_and_nowhere_else_in_those_buckets(cloud: Cloud) -> None:
    # The team's data, put there by the team itself (straight into the emulator).
    status, _, _ = cloud.proxy.call(
        "POST", "/upload/storage/v1/b/team-data/o?uploadType=media&name=taxifare/data/taxi-train-0.csv", b"fare,km\n"
    )
    assert status == 200
    job_dir = queued_job_dir(f"gs://{BUCKET}", 3, "taxifare")
    client = cloud.job_client(JobAccess(job_dir, ("gs://team-data/taxifare/data/",), ("gs://team-out/taxifare/",)))
    data, out = client.bucket("team-data"), client.bucket("team-out")
    assert data.blob("taxifare/data/taxi-train-0.csv").download_as_bytes() == b"fare,km\n"
    out.blob("taxifare/3/model/saved_model.pb").upload_from_string(b"model")
    with pytest.raises(exceptions.Forbidden):
        data.blob("taxifare/data/poisoned.csv").upload_from_string(b"x")
    with pytest.raises(exceptions.Forbidden):
        out.blob("other_team/model.pb").upload_from_string(b"x")
    with pytest.raises(exceptions.Forbidden):
        data.blob("secrets/key.json").download_as_bytes()
    # What the job declares is no more than the plan grants: a token for a place it does not
    # grant reaches nothing there.
    beyond = cloud.job_client(JobAccess(job_dir, ("gs://team-data/",), ("gs://team-data/taxifare/data/",)))
    with pytest.raises(exceptions.Forbidden):
        beyond.bucket("team-data").blob("taxifare/data/x.csv").upload_from_string(b"x")


def test_a_teammate_who_may_submit_may_tune_and_nothing_more_under_trainstack(cloud: Cloud) -> None:
    """`tune` keeps its study in trainstack/tune/<study>/study.json, created and then replaced
    under generation preconditions by the queue's own store: the grants a trainstack:access
    member holds let them do that, as they let them queue jobs."""
    client = storage.Client(
        project="test-project-123", credentials=google.oauth2.credentials.Credentials(TEAMMATE_TOKEN)
    )
    store = stores.GcsBucket("test-project-123", BUCKET, client)
    store.write_if_generation(study_object("lr_study"), b'{"v": 1}', 0)
    first = store.read_versioned(study_object("lr_study"), 1024)
    assert first is not None
    store.write_if_generation(study_object("lr_study"), b'{"v": 2}', first.generation)
    store.write_if_generation(INDEX_OBJECT, b"{}", 0)
    assert cloud.proxy.denied == []
    with pytest.raises(stores.BucketError, match="403"):
        store.write_if_generation("trainstack/agent/trainstack-agent-0123456789abcdef.pyz", b"x", 0)
    with pytest.raises(stores.BucketError, match="403"):
        store.write_if_generation("jobs/q1_lr_low/status/job.json", b"{}", 0)
