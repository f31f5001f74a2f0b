"""`trainstack submit`, `jobs` and `cancel`: the queue's objects in the stand-in bucket of
`trainstack local` and in Cloud Storage (an emulator, through the real client library, behind a
proxy that answers ifGenerationMatch as Cloud Storage does: the emulator ignores it)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import storage
from http_stand_in import serving
from storage_proxies import PreconditionProxy

from stack_helpers import base_config, with_changes, write_stack
from test_job_code import probe_package
from test_status import BUCKET, emulator_server  # noqa: F401 (a fixture)
from trainstack.base import bucket as stores
from trainstack.commands.main import main
from trainstack.jobqueue.queue import CodeObject, read_index, submit
from trainstack.localrun.workdir import claim_workdir
from trainstack.stackmodel.cost import job_hourly, node_hourly
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_checked_stack
from trainstack_contract import LAYOUT, METADATA_KEYS
from trainstack_contract.lifecycle import JobState
from trainstack_contract.queue import (
    INDEX_OBJECT,
    TAKEN_BY,
    QueueIndex,
    read_spec,
    spec_object,
    taken_by,
    taken_by_bytes,
)
from trainstack_contract.status import first_status

NODES = ["chief", "worker-0", "worker-1"]


@pytest.fixture
def proxy(emulator_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[PreconditionProxy]:  # noqa: F811
    """The stack's bucket, empty, in the emulator, reached through the proxy (as `submit` reaches it)."""
    emulator_server.wipe()
    with serving(PreconditionProxy(emulator_server.url)) as server:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
        storage.Client(project="test-project-123").create_bucket(BUCKET)
        yield server


def gcs_store() -> stores.GcsBucket:
    return stores.GcsBucket("test-project-123", BUCKET)


# --- helpers ---------------------------------------------------------------------------------------
@pytest.fixture
def stack(tmp_path: Path) -> Path:
    return write_stack(tmp_path, base_config())


def local_args(stack: Path, tmp_path: Path) -> list[str]:
    return ["--stack-file", str(stack), "--local", "--workdir", str(tmp_path / "work")]


def bucket_dir(tmp_path: Path) -> Path:
    return tmp_path / "work" / "bucket" / BUCKET


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_status(root: Path, job_dir: str, node: str, *states: tuple[str, str]) -> None:
    """A status object whose history goes through ``states`` ((state, time) oldest first)."""
    (state, time), *rest = states
    document = first_status(node, state, time=time, incarnation="boot-1")
    for state, time in rest:
        document = document.then(state, time=time, incarnation="boot-1", attempt=0)
    path = root / LAYOUT.jobs / job_dir / ("status/job.json" if node == "job" else LAYOUT.node_status(node))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document.to_json())


# --- submit ----------------------------------------------------------------------------------------
def test_submit_local_writes_code_spec_and_index_and_prints_the_id(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "submit", *local_args(stack, tmp_path), "--epochs", "2", "--name", "exp1")
    assert code == 0, err
    assert out.splitlines()[0] == f"job 1 (q1_exp1) queued on stack test: {bucket_dir(tmp_path)}/jobs/q1_exp1"
    assert f"waits for `trainstack local --stack-file {stack} --standing`" in out
    root = bucket_dir(tmp_path)
    index = QueueIndex.from_json((root / INDEX_OBJECT).read_bytes())
    [entry] = index.entries
    assert (entry.id, entry.name, entry.cancelled) == (1, "exp1", None)
    values = read_spec((root / spec_object(entry.spec_sha256)).read_bytes(), entry.spec_sha256)
    # The stack's own job with --epochs in place of its 10: what its nodes would have in metadata.
    args = json.loads(values[METADATA_KEYS.trainer_args])
    assert args[args.index("--epochs") + 1] == "2"
    assert args[args.index("--model") + 1] == "cnn"
    assert METADATA_KEYS.job_dir not in values
    archive = (root / values[METADATA_KEYS.code_archive]).read_bytes()
    assert hashlib.sha256(archive).hexdigest() == values[METADATA_KEYS.code_archive_sha256]


def test_a_job_file_is_the_job_whole_and_options_replace_its_values(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: small\nmodel: cnn\nepochs: 1\nenv: {A: '1'}\n")
    code, _, err = run(capsys, "submit", *local_args(stack, tmp_path), "--job-file", str(job_file), "--env", "B=2")
    assert code == 0, err
    root = bucket_dir(tmp_path)
    [entry] = QueueIndex.from_json((root / INDEX_OBJECT).read_bytes()).entries
    values = read_spec((root / spec_object(entry.spec_sha256)).read_bytes(), entry.spec_sha256)
    assert entry.name == "small"
    assert json.loads(values[METADATA_KEYS.job_env]) == {"A": "1", "B": "2"}
    args = json.loads(values[METADATA_KEYS.trainer_args])
    # Not the stack's batch size (32): the file is the whole job, the rest are defaults.
    assert args[args.index("--epochs") + 1] == "1"


def test_submit_one_node_queues_a_single_machine_job_and_says_so(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "submit", *local_args(stack, tmp_path), "--name", "solo", "--one-node")
    assert code == 0, err
    assert out.splitlines()[0] == (
        f"job 1 (q1_solo) queued to run on one node on stack test: {bucket_dir(tmp_path)}/jobs/q1_solo"
    )
    root = bucket_dir(tmp_path)
    [entry] = QueueIndex.from_json((root / INDEX_OBJECT).read_bytes()).entries
    assert entry.one_node
    values = read_spec((root / spec_object(entry.spec_sha256)).read_bytes(), entry.spec_sha256)
    args = json.loads(values[METADATA_KEYS.trainer_args])
    # The cluster's multi-worker strategy is the whole cluster's: one node chooses its own.
    assert args[args.index("--strategy") + 1] == "auto"
    code, _, err = run(capsys, "submit", *local_args(stack, tmp_path), "--name", "whole")
    assert code == 0, err
    whole = QueueIndex.from_json((root / INDEX_OBJECT).read_bytes()).entries[1]
    assert not whole.one_node
    whole_args = json.loads(
        read_spec((root / spec_object(whole.spec_sha256)).read_bytes(), whole.spec_sha256)[METADATA_KEYS.trainer_args]
    )
    assert whole_args[whole_args.index("--strategy") + 1] == "multi_worker_mirrored"


def test_package_and_requirements_on_the_command_line_are_from_the_current_directory(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    team = tmp_path / "team"
    probe_package(team, "trainer")
    (team / "requirements.txt").write_text("six==1.16.0\n")
    monkeypatch.chdir(team)
    target = ["--stack-file", str(stack), "--local", "--workdir", "../work", "--no-start"]
    code_options = ["--package", "trainer", "--module", "trainer.main"]
    code, _, err = run(capsys, "submit", *target, *code_options)
    assert code == 0, err
    root = bucket_dir(tmp_path)
    [entry] = QueueIndex.from_json((root / INDEX_OBJECT).read_bytes()).entries
    values = read_spec((root / spec_object(entry.spec_sha256)).read_bytes(), entry.spec_sha256)
    assert values[METADATA_KEYS.module] == "trainer.main"
    assert values[METADATA_KEYS.code_archive].startswith("trainstack/code/trainer-")
    # The requirements file named from here is the one read (and refused: not beside the package).
    code, _, err = run(capsys, "submit", *target, *code_options, "--requirements", "requirements.txt")
    assert code == 1
    assert err.count("\n") == 1
    assert f"trainstack:job.requirements: {team / 'requirements.txt'} is outside the project" in err


def test_submit_one_node_on_a_parameter_server_stack_is_refused_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = with_changes(
        base_config(),
        {
            "trainstack:cluster.parameter_servers": {"count": 1, "machine_type": "n1-highmem-8"},
            "trainstack:cluster.strategy": "parameter_server",
        },
    )
    stack = write_stack(tmp_path, config)
    code, out, err = run(capsys, "submit", *local_args(stack, tmp_path), "--one-node")
    assert (code, out) == (1, "")
    assert err == (
        "trainstack: submit: --one-node: stack test trains with parameter servers, whose nodes are not alike "
        "(a chief, workers, parameter servers); one-node jobs need a cluster of alike nodes "
        "(multi_worker_mirrored) or one machine\n"
    )
    assert not (bucket_dir(tmp_path) / INDEX_OBJECT).exists()


BAD_INPUTS = {
    "unknown key": (["--job-file", "{job}"], "name: x\nmodel: cnn\nlearning_rate: 3\n", "learning_rate"),
    "oversize": (["--job-file", "{job}"], "name: x\n" + "# pad\n" * 20000, "at most 65536"),
    "bad env": (["--env", "NOEQUALS"], None, "--env 'NOEQUALS': give NAME=VALUE"),
    "reserved env": (["--env", "TF_CONFIG=x"], None, "trainstack:job.env"),
    "job dir": (["--job-file", "{job}"], "name: x\njob_dir: gs://team-bucket/runs\n", "trainstack:job.job_dir"),
    "corrupt index": ([], None, "trainstack/queue/index.json: the queue index is not JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_1_and_nothing_written(
    case: str, stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options, job_text, named = BAD_INPUTS[case]
    root = bucket_dir(tmp_path)
    # A work directory a standing run made (and `submit --local` adopts).
    claim_workdir(tmp_path / "work", "test")
    (root / "trainstack" / "queue").mkdir(parents=True)
    if case == "corrupt index":
        (root / INDEX_OBJECT).write_bytes(b"{not json")
    if job_text is not None:
        (tmp_path / "job.yaml").write_text(job_text)
    before = files_under(tmp_path / "work")
    argv = [option.replace("{job}", str(tmp_path / "job.yaml")) for option in options]
    code, out, err = run(capsys, "submit", *local_args(stack, tmp_path), *argv)
    assert code == 1
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("trainstack: submit: "), err
    assert named in err, err
    assert files_under(tmp_path / "work") == before


def test_a_stack_whose_nodes_run_no_queue_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = base_config()
    del config["trainstack:job"]
    path = write_stack(tmp_path, config)
    code, _, err = run(capsys, "submit", *local_args(path, tmp_path), "--model", "cnn")
    assert code == 1
    assert "runs no queue" in err
    assert not (tmp_path / "work").exists()


# --- two submits at once ------------------------------------------------------------------------------
class Racing:
    """A store whose appends wait for each other: both submits read the index at the same
    generation, so one write must lose its precondition and read again."""

    def __init__(self, inner: Any, parties: int) -> None:
        self.inner = inner
        self.barrier = threading.Barrier(parties, timeout=30)
        self.index_reads: dict[int, int] = {}

    def location(self, name: str) -> str:
        return str(self.inner.location(name))

    def read_versioned(self, name: str, limit: int) -> Any:
        result = self.inner.read_versioned(name, limit)
        if name == INDEX_OBJECT:
            me = threading.get_ident()
            self.index_reads[me] = self.index_reads.get(me, 0) + 1
            # The first read is submit's check before its uploads; the second, the append's.
            if self.index_reads[me] == 2:
                self.barrier.wait()
        return result

    def write_if_generation(self, name: str, data: bytes, generation: int) -> None:
        self.inner.write_if_generation(name, data, generation)


def race(store: Any) -> list[int]:
    racing = Racing(store, 2)
    results: dict[str, int] = {}
    errors: list[BaseException] = []

    def one(name: str) -> None:
        try:
            spec = {METADATA_KEYS.job_mode: "package", METADATA_KEYS.trainer_args: json.dumps([name])}
            entry = submit(racing, name, spec, [CodeObject("trainstack/code/x.zip", b"code")], _now())
            results[name] = entry.id
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=one, args=(name,)) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    index = read_index(store)
    assert [e.id for e in index.entries] == [1, 2], "both land, nothing lost"
    assert {e.name: e.id for e in index.entries} == results, "each submit got the id it printed"
    assert index.next_id == 3
    return sorted(results.values())


def _now() -> str:
    from trainstack_contract.status import utc_now

    return utc_now()


def test_two_submits_at_once_both_land_in_the_local_store(tmp_path: Path) -> None:
    assert race(stores.DirectoryBucket(tmp_path / "bucket")) == [1, 2]


def test_two_submits_at_once_both_land_in_cloud_storage(proxy: PreconditionProxy) -> None:
    assert race(gcs_store()) == [1, 2]
    assert proxy.refused >= 1, "one write lost its precondition and was read again"


def test_the_proxy_refuses_a_write_on_a_stale_generation_as_cloud_storage_does(proxy: PreconditionProxy) -> None:
    store = gcs_store()
    store.write_if_generation("trainstack/queue/index.json", b"1", 0)
    first = store.read_versioned("trainstack/queue/index.json", 100)
    assert first is not None
    assert first.data == b"1"
    store.write_if_generation("trainstack/queue/index.json", b"2", first.generation)
    with pytest.raises(stores.PreconditionFailed):
        store.write_if_generation("trainstack/queue/index.json", b"3", first.generation)
    with pytest.raises(stores.PreconditionFailed):
        store.write_if_generation("trainstack/queue/index.json", b"3", 0)
    blob = storage.Client(project="test-project-123").bucket(BUCKET).blob("trainstack/queue/index.json")
    assert blob.download_as_bytes() == b"2"
    with pytest.raises(exceptions.PreconditionFailed):
        blob.upload_from_string(b"4", if_generation_match=first.generation)


def test_the_local_store_refuses_a_write_on_a_stale_generation(tmp_path: Path) -> None:
    store = stores.DirectoryBucket(tmp_path)
    store.write_if_generation("a.json", b"1", 0)
    first = store.read_versioned("a.json", 100)
    assert first is not None
    store.write_if_generation("a.json", b"2", first.generation)
    with pytest.raises(stores.PreconditionFailed):
        store.write_if_generation("a.json", b"3", first.generation)
    assert (tmp_path / "a.json").read_bytes() == b"2"


class _NoToken:
    """The agent's metadata server as the emulator needs it: no token."""

    def authorization(self) -> dict[str, str]:
        return {}


def test_a_node_takes_a_one_node_job_once_in_cloud_storage(proxy: PreconditionProxy) -> None:
    from trainstack_agent.cloud import Http
    from trainstack_agent.gcs import Storage as AgentStorage

    nodes = AgentStorage(Http(timeout=10), _NoToken(), proxy.url)  # type: ignore[arg-type]
    uri = f"gs://{BUCKET}/jobs/q1_trial/{TAKEN_BY}"
    assert nodes.create(uri, taken_by_bytes("worker-0", _now()))
    assert not nodes.create(uri, taken_by_bytes("worker-1", _now()))
    assert proxy.refused == 1
    data = nodes.read(uri, 1024)
    assert data is not None
    assert taken_by(data) == "worker-0"


def test_a_node_takes_a_one_node_job_once_in_the_local_bucket(tmp_path: Path) -> None:
    from trainstack_agent.gcs import Storage as AgentStorage

    nodes = AgentStorage(None, None, "")  # type: ignore[arg-type]
    uri = str(tmp_path / "jobs" / "q1_trial" / TAKEN_BY)
    takers = [node for node in ("worker-0", "worker-1", "chief") if nodes.create(uri, taken_by_bytes(node, _now()))]
    assert takers == ["worker-0"]
    assert taken_by(Path(uri).read_bytes()) == "worker-0"
    assert sorted(path.name for path in Path(uri).parent.iterdir()) == ["taken_by.json"]


@pytest.mark.slow
def test_submit_jobs_and_cancel_on_cloud_storage(
    proxy: PreconditionProxy, stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("one", "two"):
        code, out, err = run(capsys, "submit", "--stack-file", str(stack), "--name", name, "--no-start")
        assert code == 0, err
    assert out.startswith(f"job 2 (q2_two) queued on stack test: gs://{BUCKET}/jobs/q2_two")
    code, out, err = run(capsys, "cancel", "--stack-file", str(stack), "1")
    assert code == 0, err
    code, out, err = run(capsys, "jobs", "--stack-file", str(stack), "--json")
    assert code == 0, err
    states = {row["id"]: row["state"] for row in json.loads(out)["jobs"]}
    assert states == {0: "NO STATUS", 1: "CANCELLED", 2: "QUEUED"}


# --- cancel and jobs ---------------------------------------------------------------------------------
def test_cancel_of_a_queued_job_marks_it_and_an_ended_one_is_refused(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = local_args(stack, tmp_path)
    for name in ("a", "b"):
        assert run(capsys, "submit", *args, "--name", name)[0] == 0
    code, out, err = run(capsys, "cancel", *args, "1")
    assert code == 0, err
    assert out.startswith("job 1 (q1_a) cancelled")
    root = bucket_dir(tmp_path)
    index = QueueIndex.from_json((root / INDEX_OBJECT).read_bytes())
    assert [e.cancelled is not None for e in index.entries] == [True, False]
    code, _, err = run(capsys, "cancel", *args, "1")
    assert code == 1
    assert "was cancelled already" in err
    write_status(
        root, "q2_b", "job", (JobState.RUNNING, "2026-01-01T10:00:00Z"), (JobState.SUCCEEDED, "2026-01-01T11:00:00Z")
    )
    before = (root / INDEX_OBJECT).read_bytes()
    code, _, err = run(capsys, "cancel", *args, "2")
    assert code == 1
    assert "has ended already: SUCCEEDED" in err
    code, _, err = run(capsys, "cancel", *args, "9")
    assert code == 1
    assert "no job 9 in the queue" in err
    assert (root / INDEX_OBJECT).read_bytes() == before


def test_jobs_lists_queued_running_succeeded_and_cancelled_jobs(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = local_args(stack, tmp_path)
    for name in ("done", "running", "waiting", "dropped"):
        assert run(capsys, "submit", *args, "--name", name)[0] == 0
    assert run(capsys, "cancel", *args, "4")[0] == 0
    root = bucket_dir(tmp_path)
    start, end = "2026-01-01T10:00:00Z", "2026-01-01T10:30:00Z"
    write_status(root, "q1_done", "job", (JobState.RUNNING, start), (JobState.SUCCEEDED, end))
    for node in NODES:
        write_status(root, "q1_done", node, (JobState.RUNNING, start), (JobState.SUCCEEDED, end))
    (root / LAYOUT.jobs / "q1_done" / LAYOUT.metrics).write_text(
        json.dumps({"status": "finished", "eval_accuracy": 0.5})
    )
    write_status(root, "q2_running", "job", (JobState.RUNNING, start))
    write_status(root, "q2_running", "chief", (JobState.RUNNING, start))
    code, out, err = run(capsys, "jobs", *args, "--json")
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)["jobs"]}
    assert {i: rows[i]["state"] for i in rows} == {
        0: "NO STATUS",
        1: "SUCCEEDED",
        2: "RUNNING",
        3: "QUEUED",
        4: "CANCELLED",
    }
    done = rows[1]
    assert (done["started"], done["ended"], done["duration_seconds"]) == (start, end, 1800.0)
    assert sorted(done["nodes"]) == sorted(NODES)
    cfg, facts = load_checked_stack(stack)
    hourly = job_hourly(resolve_stack(cfg, facts=facts))
    assert hourly is not None
    assert done["cost_usd"] == round(hourly / 2, 4)
    assert done["metric"] == {"name": "eval_accuracy", "value": 0.5}
    assert rows[2]["ended"] is None
    assert rows[2]["nodes"] == {"chief": "RUNNING"}
    assert rows[3]["started"] is None
    assert rows[4]["ended"] is not None
    code, out, _ = run(capsys, "jobs", *args)
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "STATE",
        "SUBMITTED",
        "STARTED",
        "ENDED",
        "DURATION",
        "NODES",
        "COST",
        "METRIC",
    ]
    assert "0:30:00" in lines[2]
    assert "eval_accuracy=0.5" in lines[2]
    assert f"${hourly / 2:.2f}" in lines[2]


def test_jobs_prices_a_one_node_job_at_the_node_that_ran_it(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = local_args(stack, tmp_path)
    assert run(capsys, "submit", *args, "--name", "solo", "--one-node")[0] == 0
    root = bucket_dir(tmp_path)
    start, end = "2026-01-01T10:00:00Z", "2026-01-01T10:30:00Z"
    for node in ("job", "worker-1"):
        write_status(root, "q1_solo", node, (JobState.RUNNING, start), (JobState.SUCCEEDED, end))
    code, out, err = run(capsys, "jobs", *args, "--json")
    assert code == 0, err
    [solo] = [row for row in json.loads(out)["jobs"] if row["id"] == 1]
    assert solo["nodes"] == {"worker-1": "SUCCEEDED"}
    cfg, facts = load_checked_stack(stack)
    prices = node_hourly(resolve_stack(cfg, facts=facts))
    worker = prices["worker-1"]
    assert worker is not None
    assert worker < sum(price or 0.0 for price in prices.values())
    assert solo["cost_usd"] == round(worker / 2, 4)


def test_the_three_commands_have_help(capsys: pytest.CaptureFixture[str]) -> None:
    for verb in ("submit", "jobs", "cancel"):
        with pytest.raises(SystemExit) as exit_:
            main([verb, "--help"])
        assert exit_.value.code == 0
        assert "--stack" in capsys.readouterr().out


@pytest.mark.slow
def test_submit_imports_neither_pulumi_nor_tensorflow(stack: Path, tmp_path: Path) -> None:
    """`submit` returns in about a second: it loads no Pulumi program and no trainer."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from trainstack.commands.main import main\n"
        f"code = main(['submit', '--stack-file', {str(stack)!r}, '--local', '--workdir', {str(tmp_path / 'w')!r}])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'pulumi_gcp', 'tensorflow', 'keras'})\n"
        "print('heavy:', heavy, 'code:', code)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120)
    assert result.stdout.splitlines()[-1] == "heavy: [] code: 0", result.stdout + result.stderr


def _waiting_process(tmp_path: Path, marker: str) -> Any:
    """A process that records a SIGUSR1 in ``marker``; its command line names trainstack or not."""
    import subprocess
    import sys

    code = (
        "import signal, sys, pathlib\n"
        "signal.signal(signal.SIGUSR1, lambda *_: pathlib.Path(sys.argv[1]).write_text('woken'))\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"  # waits until the test ends it, however long the test takes
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / marker), *marker.split()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    return process


@pytest.mark.parametrize("command_line", ["trainstack local", "someone-else trainstack-local"])
def test_submit_local_wakes_the_standing_run_and_only_a_trainstack_process(
    command_line: str, stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    process = _waiting_process(tmp_path, command_line)
    try:
        claim_workdir(tmp_path / "work", "test")
        (tmp_path / "work" / "standing.json").write_text(
            json.dumps({"version": 1, "pid": process.pid, "stack": "test"})
        )
        code, out, err = run(capsys, "submit", *local_args(stack, tmp_path))
        assert code == 0, err
        marker = tmp_path / command_line
        if command_line.startswith("trainstack"):
            assert f"the standing local cluster (process {process.pid}) boots its stopped nodes" in out
            deadline = time.monotonic() + 30
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert marker.read_text() == "woken"
        else:
            assert f"process {process.pid} of" in out
            assert "is not `trainstack local` any more" in out
            assert process.poll() is None
            assert not marker.exists()
    finally:
        process.kill()
        process.wait()


def test_submit_local_first_leaves_a_work_directory_the_standing_run_adopts_and_refuses_a_foreign_one(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainstack.localrun.workdir import check_adoptable

    code, _, err = run(capsys, "submit", *local_args(stack, tmp_path))
    assert code == 0, err
    check_adoptable(tmp_path / "work")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("a user's file")
    options = ["--stack-file", str(stack), "--local", "--workdir", str(foreign)]
    code, _, err = run(capsys, "submit", *options)
    assert code == 1, err
    assert "did not make it" in err, err
    assert sorted(path.name for path in foreign.iterdir()) == ["notes.txt"]


def test_jobs_shows_the_metric_a_jobs_code_reported_with_cloudml_hypertune(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: the METRIC column was '-' for every trial whose code reported with cloudml-hypertune."""
    args = local_args(stack, tmp_path)
    for name in ("trial", "plain"):
        assert run(capsys, "submit", *args, "--name", name)[0] == 0
    root = bucket_dir(tmp_path)
    start, end = "2026-01-01T10:00:00Z", "2026-01-01T10:30:00Z"
    for job_dir in ("q1_trial", "q2_plain"):
        write_status(root, job_dir, "job", (JobState.RUNNING, start), (JobState.SUCCEEDED, end))
        write_status(root, job_dir, "chief", (JobState.RUNNING, start), (JobState.SUCCEEDED, end))
    # As cloudml-hypertune writes it, and as the chief's agent copies it: one record a line,
    # values as text, the last one the final.
    records = [
        {"checkpoint_path": "", "global_step": "1", "rmse": "9.5", "timestamp": 1.0, "trial": "1"},
        {"checkpoint_path": "", "global_step": "2", "rmse": "4.25", "timestamp": 2.0, "trial": "1"},
    ]
    report = root / LAYOUT.jobs / "q1_trial" / LAYOUT.hypertune_metrics("chief")
    report.parent.mkdir(parents=True)
    report.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records) + "{not json\n")
    (root / LAYOUT.jobs / "q2_plain" / LAYOUT.metrics).write_text(json.dumps({"status": "finished", "eval_loss": 0.5}))
    code, out, err = run(capsys, "jobs", *args, "--json")
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)["jobs"]}
    assert rows[1]["metric"] == {"name": "rmse", "value": 4.25}
    assert rows[2]["metric"] == {"name": "eval_loss", "value": 0.5}
    code, out, _ = run(capsys, "jobs", *args)
    assert "rmse=4.25" in out


def test_jobs_shows_a_trials_metric_its_study_read_from_the_summaries(
    stack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trial whose code wrote only TensorBoard summaries has its metric in its study: `jobs`
    shows it, by the spec's tag, where the trial's job itself reported none."""
    import yaml

    from stack_helpers import LEARNING_RATE_STUDY
    from trainstack.tuning.spec import spec_from_mapping
    from trainstack.tuning.study import Study, Trial, study_object

    args = local_args(stack, tmp_path)
    assert run(capsys, "submit", *args, "--name", "lr_t1")[0] == 0
    root = bucket_dir(tmp_path)
    start, end = "2026-01-01T10:00:00Z", "2026-01-01T10:30:00Z"
    for node in ("job", "chief"):
        write_status(root, "q1_lr_t1", node, (JobState.RUNNING, start), (JobState.SUCCEEDED, end))
    spec = spec_from_mapping(
        yaml.safe_load(LEARNING_RATE_STUDY.format(trials=2, parallel=1))["trainingInput"]["hyperparameters"]
    )
    trial = Trial(1, {"learning-rate": 0.01}, start, state=JobState.SUCCEEDED, job_id=1, metric=0.875)
    study = Study("lr", spec, {}, start, 7, trials=(trial,))
    study_file = root / study_object("lr")
    study_file.parent.mkdir(parents=True)
    study_file.write_bytes(study.to_json())
    code, out, err = run(capsys, "jobs", *args, "--json")
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)["jobs"]}
    assert rows[1]["metric"] == {"name": "epoch_accuracy", "value": 0.875}
