"""The rendered boot scripts, executed for real on this machine through `trainstack local`.

Most tests here swap in a probe trainer (a few lines that record what the script gave it)
so they check the script itself in seconds; the tests at the end run the real trainer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from polling import wait_until

from stack_helpers import SHORT_RESUMABLE_JOB
from trainstack.cloud import bootscripts
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.outcome import LocalStackRunResult
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import STACKS_DIR, load_stack
from trainstack_contract import LAYOUT

PROBE_TRAINER = Path(__file__).resolve().parent / "fixtures" / "probe_trainer" / "trainer"


@pytest.fixture
def probe_trainer() -> Path:
    return PROBE_TRAINER


def stack(name: str):  # type: ignore[no-untyped-def]
    return load_stack(STACKS_DIR / f"Pulumi.{name}.yaml")[0]


def run(
    cfg, workdir: Path, trainer: Path | None = None, overrides: dict[str, str] | None = None, **kwargs
) -> LocalStackRunResult:  # type: ignore[no-untyped-def]
    extra = {"trainer_source": trainer} if trainer is not None else {}
    return (
        LocalStackRun(resolve_stack(cfg), workdir, TrainerOverrides(overrides or {}), echo=False, **extra, **kwargs)
        .start()
        .wait(timeout=600)
    )


def probe_records(result: LocalStackRunResult) -> dict[str, dict]:  # type: ignore[type-arg]
    return {p.stem: json.loads(p.read_text()) for p in (result.job_dir / "probe").glob("*.json")}


@pytest.mark.slow
@pytest.mark.parametrize("stack_name", ["multiworker", "paramserver"])
def test_each_node_gets_its_tf_config_from_metadata(stack_name: str, tmp_path: Path, probe_trainer: Path) -> None:
    cfg = stack(stack_name)
    local = LocalStackRun(resolve_stack(cfg), tmp_path, TrainerOverrides(), echo=False, trainer_source=probe_trainer)
    cluster = json.loads(local.machines.project_attributes[local.stack.cluster.tf_cluster_metadata_key])
    result = local.start().wait(timeout=300)
    assert result.succeeded, result.logs
    records = probe_records(result)
    assert set(records) == {n.name for n in local.nodes}
    for local_node in local.nodes:
        tf_config = json.loads(records[local_node.name]["tf_config"])
        assert tf_config == {"cluster": cluster, "task": {"type": local_node.role, "index": local_node.index}}
        argv = records[local_node.name]["argv"]
        assert argv[argv.index("--job-dir") + 1] == str(result.job_dir)
        assert argv[argv.index("--strategy") + 1] == cfg.settings.cluster.strategy  # type: ignore[union-attr]


@pytest.mark.slow
def test_single_machine_stack_gets_no_tf_config(tmp_path: Path, probe_trainer: Path) -> None:
    result = run(stack("dev"), tmp_path, probe_trainer)
    assert result.succeeded
    [record] = probe_records(result).values()
    assert record["tf_config"] is None
    assert record["argv"][record["argv"].index("--strategy") + 1] == "one_device"


@pytest.mark.slow
def test_status_objects_and_on_finish(tmp_path: Path, probe_trainer: Path) -> None:
    result = run(stack("paramserver"), tmp_path, probe_trainer)
    assert result.job_status is not None
    assert result.job_status["state"] == "SUCCEEDED"
    assert result.job_status["exit_code"] == 0
    assert all(s is not None and s["state"] == "SUCCEEDED" for s in result.node_status.values())
    # paramserver asks for on_finish: delete, once per node.
    assert sorted(line.split()[1:] for line in result.self_stops) == sorted(["delete", n] for n in result.node_status)


@pytest.mark.slow
def test_after_a_failed_chief_the_other_nodes_stop_waiting(
    tmp_path: Path, probe_trainer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parameter servers serve until the chief finishes; a failed chief must not leave them
    (and their VMs) running until the run-time cap."""
    monkeypatch.setenv("PROBE_CHIEF_EXIT", "3")
    monkeypatch.setenv("PROBE_OTHERS_SLEEP", "600")
    # The others would serve for ten minutes: the reasons below say they saw the chief's FAILED.
    result = run(stack("paramserver"), tmp_path, probe_trainer)
    assert result.job_status is not None
    assert (result.job_status["state"], result.job_status["exit_code"]) == (
        "FAILED",
        3,
    )
    for node in ("worker-0", "worker-1", "ps-0"):
        status = result.node_status[node]
        assert status is not None, node
        assert status["state"] == "FAILED", node
        assert any("the chief recorded the job FAILED" in line for line in result.logs[node])
    assert len(result.self_stops) == 4


@pytest.mark.slow
def test_after_the_chiefs_success_the_nodes_still_serving_end_and_succeed(
    tmp_path: Path, probe_trainer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a team's own parameter-server code serves (server.join()) until killed; after the
    chief's SUCCEEDED every other node served on until the heartbeat timeout (ten minutes on a
    cloud, each machine billing) and then recorded FAILED."""
    monkeypatch.setenv("PROBE_OTHERS_SLEEP", "600")
    # The others would serve for ten minutes, longer than the run waits for them.
    result = run(stack("paramserver"), tmp_path, probe_trainer)
    assert result.job_status is not None
    assert result.job_status["state"] == "SUCCEEDED"
    for node in ("worker-0", "worker-1", "ps-0"):
        status = result.node_status[node]
        assert status is not None, node
        assert (status["state"], status["reason"]) == ("SUCCEEDED", "the chief recorded the job SUCCEEDED"), node
    assert len(result.self_stops) == 4


def _probe_wheel(wheelhouse: Path) -> None:
    """A minimal valid wheel, so the install path needs no network and no build tools."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    files = {
        "trainstack_probe/__init__.py": b"VALUE = 1\n",
        "trainstack_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: trainstack-probe\nVersion: 1.0\n",
        "trainstack_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("trainstack_probe-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(wheelhouse / "trainstack_probe-1.0-py3-none-any.whl", "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("trainstack_probe-1.0.dist-info/RECORD", "\n".join(record) + "\n")


def stack_with_wheelhouse(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The dev stack with a wheelhouse of one probe wheel (storage.wheelhouse)."""
    _probe_wheel(tmp_path / "wheels")
    document = yaml.safe_load((STACKS_DIR / "Pulumi.dev.yaml").read_text())
    document["config"]["trainstack:storage"] = {"wheelhouse": str(tmp_path / "wheels")}
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_stack(path)[0]


PROBE_WHEEL = "trainstack_probe-1.0-py3-none-any.whl"


def probe_kind(requirement: str, wheel: Path | None = None) -> bootscripts.NodeKind:
    """A node kind whose lock holds one requirement, hashed as ``wheel`` (any other digest without one)."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest() if wheel is not None else "0" * 64
    lock = f"{requirement} \\\n    --hash=sha256:{digest}\n".encode()
    return bootscripts.NodeKind(lock=lock, system_site_packages=False, stop_command=bootscripts.ShellCode("true"))


@pytest.mark.slow
def test_a_boot_that_fails_before_the_trainer_still_records_failed_and_releases_the_node(
    tmp_path: Path, probe_trainer: Path
) -> None:
    # The wheelhouse lacks the requirement: the install fails.
    cfg = stack_with_wheelhouse(tmp_path)
    result = run(
        cfg, tmp_path / "run", probe_trainer, kind=probe_kind("trainstack-absent==1.0"), environment_installed=False
    )
    assert result.job_status is not None
    assert result.job_status["state"] == "FAILED"
    assert result.job_status["exit_code"] != 0
    assert result.job_status.get("reason") == (
        "preparing the job failed: installing the pinned requirements failed (exit 1)"
    )
    assert len(result.self_stops) == 1


@pytest.mark.slow
def test_environment_installs_from_the_stacks_wheelhouse_once(
    tmp_path: Path, probe_trainer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = stack_with_wheelhouse(tmp_path)
    kind = probe_kind("trainstack-probe==1.0", tmp_path / "wheels" / PROBE_WHEEL)
    monkeypatch.setenv("PROBE_IMPORTS", "trainstack_probe")
    first = run(cfg, tmp_path / "run", probe_trainer, kind=kind, environment_installed=False)
    assert first.succeeded, "\n".join(first.logs["chief"])
    assert probe_records(first)["chief"]["imports"] == ["trainstack_probe"]
    assert any("installing the python environment" in line for line in first.logs["chief"])
    # A restart (after host maintenance, say) of an unfinished job reuses the environment.
    (first.job_dir / "status" / "job.json").unlink()
    second = run(cfg, tmp_path / "run", probe_trainer, kind=kind, environment_installed=False)
    assert second.succeeded
    assert any("python environment ready" in line for line in second.logs["chief"])
    assert not any("installing" in line for line in second.logs["chief"])


@pytest.mark.slow
def test_a_wheel_the_lock_does_not_hash_is_refused(tmp_path: Path, probe_trainer: Path) -> None:
    # The wheelhouse's manifest matches its wheel, but the nodes' lock names other bytes for
    # it: pip installs nothing the lock does not hash.
    cfg = stack_with_wheelhouse(tmp_path)
    result = run(
        cfg, tmp_path / "run", probe_trainer, kind=probe_kind("trainstack-probe==1.0"), environment_installed=False
    )
    assert result.job_status is not None
    assert result.job_status["state"] == "FAILED"
    assert result.job_status.get("reason") == (
        "preparing the job failed: installing the pinned requirements failed (exit 1)"
    )
    assert any("--require-hashes" in line or "HASHES" in line for line in result.logs["chief"]), result.logs["chief"]


def wheelhouse_run(tmp_path: Path, probe_trainer: Path, hashed: bool) -> tuple[LocalStackRun, bootscripts.NodeKind]:
    """The dev stack with a wheelhouse, and the node kind its nodes install: a lock of the probe
    wheel, with the wheel's digest when ``hashed``, another digest otherwise."""
    cfg = stack_with_wheelhouse(tmp_path)
    kind = probe_kind("trainstack-probe==1.0", tmp_path / "wheels" / PROBE_WHEEL if hashed else None)
    return LocalStackRun(
        resolve_stack(cfg),
        tmp_path / "run",
        TrainerOverrides(),
        echo=False,
        trainer_source=probe_trainer,
        kind=kind,
        environment_installed=False,
    ), kind


def run_with_bucket_object_changed(
    local: LocalStackRun, object_name: str, change: Callable[[Path], object], refusal: str
) -> LocalStackRunResult:
    """``local`` run after someone with write access to the bucket changed one object that
    `pulumi up` uploaded: the node refuses it (``refusal`` in the job's FAILED reason) and
    releases itself."""
    local.prepare()
    change(local.workdir / "bucket" / local.stack.bucket_name / object_name)
    local.prepare = lambda: None  # type: ignore[method-assign]
    result = local.start().wait(timeout=300)
    assert result.job_status is not None
    assert result.job_status["state"] == "FAILED"
    assert refusal in result.job_status["reason"]
    assert len(result.self_stops) == 1
    return result


@pytest.mark.slow
def test_a_lock_replaced_in_the_bucket_is_refused_and_the_node_released(tmp_path: Path, probe_trainer: Path) -> None:
    local, kind = wheelhouse_run(tmp_path, probe_trainer, hashed=True)

    def drop_the_hashes(lock: Path) -> None:
        lock.write_text("trainstack-probe==1.0\n")

    refusal = "does not match the sha256 pinned in metadata"
    run_with_bucket_object_changed(local, kind.lock_artifact.object_name, drop_the_hashes, refusal)


@pytest.mark.slow
def test_a_wheel_replaced_in_the_bucket_is_refused_and_the_node_released(tmp_path: Path, probe_trainer: Path) -> None:
    local, _ = wheelhouse_run(tmp_path, probe_trainer, hashed=False)
    run_with_bucket_object_changed(
        local,
        LAYOUT.wheel(PROBE_WHEEL),
        lambda wheel: wheel.write_bytes(wheel.read_bytes() + b"\0"),
        f"{PROBE_WHEEL} does not match the sha256 pinned in metadata",
    )
    assert not (local.workdir / "nodes" / "chief" / "state" / "venv" / ".trainstack-requirements").exists()


@pytest.mark.slow
def test_a_code_archive_replaced_in_the_bucket_is_refused_and_the_node_released(
    tmp_path: Path, probe_trainer: Path
) -> None:
    local = LocalStackRun(
        resolve_stack(stack("dev")), tmp_path, TrainerOverrides(), echo=False, trainer_source=probe_trainer
    )
    assert local.job is not None
    assert local.job.package is not None
    package = local.job.package.object_name

    def add_a_module(archive: Path) -> None:
        with zipfile.ZipFile(archive, "a") as bundle:
            bundle.writestr("trainer/sitecustomize.py", "import os\n")

    run_with_bucket_object_changed(
        local, package, add_a_module, f"{package} does not match the sha256 pinned in metadata"
    )
    assert not (tmp_path / "bucket" / local.stack.bucket_name / "jobs" / local.job.name / "probe").exists()


@pytest.mark.slow
def test_local_multiworker_restart_resumes_and_a_finished_job_is_not_retrained(tmp_path: Path) -> None:
    cfg = stack("multiworker")
    overrides = SHORT_RESUMABLE_JOB
    first = LocalStackRun(resolve_stack(cfg), tmp_path, TrainerOverrides(overrides), echo=False).start()
    progress = first.job_dir / "progress.json"
    chief = first.nodes[0]
    # Kill once the chief reports a finished epoch (its backup is written before that).
    wait_until(
        lambda: progress.exists() and json.loads(progress.read_text() or "{}").get("epochs_completed", 0) >= 1,
        "a finished epoch",
        300,
        interval=0.2,
        gone_wrong=lambda: (
            None if chief.process is not None and chief.process.poll() is None else "\n".join(chief.lines)
        ),
    )
    first.kill_all()
    killed = first.result()
    assert killed.job_status is not None
    assert killed.job_status["state"] == "RUNNING"
    assert not (killed.job_dir / "metrics.json").exists()

    second = (
        LocalStackRun(resolve_stack(cfg), tmp_path, TrainerOverrides(overrides), echo=False).start().wait(timeout=600)
    )
    assert second.succeeded, "\n".join(second.logs["chief"])
    chief_log = "\n".join(second.logs["chief"])
    assert "python environment ready" in chief_log
    assert "installing" not in chief_log
    metrics = json.loads((second.job_dir / "metrics.json").read_text())
    assert metrics["epochs_resumed"] >= 1
    assert metrics["epochs_run"] <= 2
    assert metrics["replicas"] == 3
    # Evaluation lines are labelled, and the closing figures rounded.
    assert "evaluation: loss=" in chief_log
    [done] = [line for line in second.logs["chief"] if "trainer: done:" in line]
    assert len(done.split("examples/s=")[1].split(".")[1]) == 1, done
    assert len(second.self_stops) == 3

    third = (
        LocalStackRun(resolve_stack(cfg), tmp_path, TrainerOverrides(overrides), echo=False).start().wait(timeout=120)
    )
    assert third.succeeded
    for lines in third.logs.values():
        text = "\n".join(lines)
        assert "already SUCCEEDED" in text
        assert "starting the job" not in text
    assert len(third.self_stops) == 6, "on_finish is applied again on every node"
    assert third.found_finished
    assert not second.found_finished
    assert json.loads((third.job_dir / "metrics.json").read_text()) == metrics


@pytest.mark.slow
def test_a_failing_trainer_ends_failed_with_its_exit_code_and_still_releases_the_nodes(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-data"
    result = run(stack("multiworker"), tmp_path / "run", overrides={"--data": str(missing)})
    assert result.job_status is not None
    assert (result.job_status["state"], result.job_status["exit_code"]) == ("FAILED", 2)
    assert all(code is not None for code in result.exit_codes.values()), "a node was left hanging"
    assert any(str(missing) in line for line in result.logs["chief"]), "the trainer's error is not shown"
    assert len(result.self_stops) == 3


@pytest.mark.slow
def test_local_paramserver_stack_trains_to_completion(tmp_path: Path) -> None:
    overrides = {
        "--epochs": "2",
        "--steps-per-epoch": "5",
        "--image-size": "32",
        "--batch-size-per-replica": "8",
        "--eval-steps": "2",
    }
    result = run(stack("paramserver"), tmp_path, overrides=overrides)
    assert result.succeeded, "\n".join(result.logs["chief"])
    metrics = json.loads((result.job_dir / "metrics.json").read_text())
    assert metrics["parameter_servers"] == 1
    assert metrics["strategy"] == "parameter_server"
    assert (result.job_dir / "model").is_dir()
    assert {s["state"] for s in result.node_status.values() if s} == {"SUCCEEDED"}


def _with(cfg, **changes):  # type: ignore[no-untyped-def]
    """``cfg`` with trainstack: keys replaced (``job=None``) or, as ``cluster={...}``, updated."""
    update = {
        key: getattr(cfg.settings, key).model_copy(update=value) if isinstance(value, dict) else value
        for key, value in changes.items()
    }
    return cfg.model_copy(update={"settings": cfg.settings.model_copy(update=update)})


def test_every_node_of_a_stack_that_runs_the_queue_is_told_its_idle_wait() -> None:
    """The agent reads the idle wait from metadata: each cluster node and the TPU VM carry it
    where the stack runs a queue (a job, or idle_minutes set), in seconds; nowhere else."""
    key = "trainstack-idle-seconds"
    cluster_boot = bootscripts.boot_files(resolve_stack(_with(stack("multiworker"), cluster={"idle_minutes": 3})))
    assert {name: m[key] for name, m in cluster_boot.cluster_metadata.items()} == {
        name: "180" for name in cluster_boot.cluster_metadata
    }
    assert len(cluster_boot.cluster_metadata) > 1
    assert bootscripts.boot_files(resolve_stack(stack("tpu"))).tpu_metadata[key] == "600"
    no_job = _with(stack("multiworker"), job=None)
    assert all(key not in m for m in bootscripts.boot_files(resolve_stack(no_job)).cluster_metadata.values())
    waiting = resolve_stack(_with(no_job, cluster={"idle_minutes": 0}))
    assert all(m[key] == "0" for m in bootscripts.boot_files(waiting).cluster_metadata.values())


@pytest.mark.parametrize("stack_name", ["multiworker", "tpu"])
def test_a_one_shot_local_run_runs_no_queue_and_a_standing_one_idles_the_stacks(
    stack_name: str, tmp_path: Path
) -> None:
    from trainstack.localrun.layout import lay_out

    resolved = resolve_stack(stack(stack_name))
    one_shot = lay_out(resolved, tmp_path / "one", TrainerOverrides())
    # No queue at all: the stack's own job, then on_finish, as before the queue.
    assert all("trainstack-idle-seconds" not in n.metadata for n in one_shot.nodes)
    standing = lay_out(resolved, tmp_path / "standing", TrainerOverrides(), idle_seconds=600)
    assert {n.metadata["trainstack-idle-seconds"] for n in standing.nodes} == {"600"}
