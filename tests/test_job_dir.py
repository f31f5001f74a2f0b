"""job.job_dir: a job that writes into a folder of a bucket the team already has (AI Platform's
--job-dir), with write access under that folder alone, run by `local`, read by `status`, and
kept by `import`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack_helpers import admits, base_config, plan_of, write_stack
from trainstack.commands.main import main
from trainstack.commands.plan import _print_bucket_access
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack

JOB_DIR = "gs://acme-ml-models/vision/run1"
INSTANCE = "gcp:compute/instance:Instance"
BUCKET_GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"
# Records where it was told to write, without TensorFlow.
PROBE = """
import json, os, sys
job_dir = sys.argv[sys.argv.index("--job-dir") + 1]
os.makedirs(job_dir, exist_ok=True)
with open(os.path.join(job_dir, "probe.json"), "w") as out:
    json.dump({"job_dir": job_dir, "model_dir": os.environ["AIP_MODEL_DIR"]}, out)
"""


def stack_with_job_dir(tmp_path: Path, job_dir: str = JOB_DIR, **job: Any) -> Path:
    package = tmp_path / "probe_pkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(PROBE)
    config = base_config()
    config["trainstack:cluster"] = {"chief": {"machine_type": "n1-standard-4"}, "strategy": "one_device"}
    config["trainstack:job"] = {
        "name": "vision",
        "package": str(package),
        "module": "probe_pkg.main",
        "job_dir": job_dir,
        **job,
    }
    return write_stack(tmp_path, config)


@pytest.mark.parametrize(
    "job_dir",
    ["gs://acme-ml-models", "gs://acme-ml-models/", "gs://acme-ml-models/a/../b", "s3://acme/x", "gs://Acme/x"],
)
def test_a_job_dir_that_is_not_a_folder_of_a_bucket_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job_dir: str
) -> None:
    assert main(["validate", "--stack-file", str(stack_with_job_dir(tmp_path, job_dir))]) == 1
    err = capsys.readouterr().err
    assert "trainstack:job.job_dir" in err, err
    assert "gs://BUCKET/PREFIX" in err, err


@pytest.mark.parametrize(
    ("job_dir", "why"),
    [
        # What trainstack executes from, in any bucket: the team's, this stack's, another stack's.
        ("gs://acme-ml-models/trainstack/code", "lies under trainstack/"),
        ("gs://acme-ml-models/trainstack", "lies under trainstack/"),
        ("gs://test-project-123_test/trainstack/notebook", "lies under trainstack/"),
        ("gs://your-gcp-project_notebook/trainstack/notebook", "lies under trainstack/"),
        # Any folder of a bucket another stack of the project deploys (its notebook's, its jobs).
        ("gs://your-gcp-project_notebook/results", "the bucket of the project's stack notebook"),
        ("gs://your-gcp-project_dev/jobs/flowers_dev", "the bucket of the project's stack dev"),
        # This stack's own bucket outside jobs/: beside what its machines run, in its notebook's area.
        ("gs://test-project-123_test/notebooks/runs", "this stack's own bucket outside jobs/"),
        ("gs://test-project-123_test/models", "this stack's own bucket outside jobs/"),
    ],
)
def test_a_job_dir_that_reaches_what_machines_run_or_another_stack_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job_dir: str, why: str
) -> None:
    assert main(["validate", "--stack-file", str(stack_with_job_dir(tmp_path, job_dir))]) == 1
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if "trainstack:job.job_dir" in line]
    assert job_dir in line, err
    assert why in line, err
    assert "use " in line, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "job_dir",
    [
        "gs://acme-ml-models/trainstackish/run1",
        "gs://acme-ml-models/jobs/trainstack",
        "gs://test-project-123_test/jobs/vision_b",
    ],
)
def test_a_job_dir_near_those_but_outside_them_is_valid(tmp_path: Path, job_dir: str) -> None:
    assert main(["validate", "--stack-file", str(stack_with_job_dir(tmp_path, job_dir))]) == 0


def test_plan_warns_when_a_grant_reaches_trainstack_in_the_job_dirs_bucket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan` says what nodes run is written by `pulumi up` alone only when no grant of the stack
    reaches trainstack/ in any bucket, job.job_dir's included."""
    plan = plan_of(stack_with_job_dir(tmp_path))
    [grant] = [g for g in plan.of_type(BUCKET_GRANT) if g.inputs["bucket"] == "acme-ml-models"]
    assert not admits(grant.inputs["condition"]["expression"], "acme-ml-models", "trainstack/notebook/p.sh")
    member = grant.inputs["member"]
    _print_bucket_access(plan.bucket_access())
    assert "is written by `pulumi up` alone" in capsys.readouterr().out
    reaching = 'resource.name.startsWith("projects/_/buckets/acme-ml-models/objects/trainstack/")'
    rogue = dataclasses.replace(grant, name="rogue", inputs={**grant.inputs, "condition": {"expression": reaching}})
    access = dataclasses.replace(plan, resources=[*plan.resources, rogue]).bucket_access()
    assert access["writable_executed_objects"] == [f"gs://acme-ml-models/trainstack/ ({member})"]
    _print_bucket_access(access)
    out = capsys.readouterr().out
    assert "WARNING: a machine can rewrite what nodes run" in out
    assert "alone" not in out


def test_the_nodes_write_the_job_dir_under_its_folder_alone(tmp_path: Path) -> None:
    plan = plan_of(stack_with_job_dir(tmp_path, JOB_DIR + "/"))
    [instance] = plan.of_type(INSTANCE)
    assert instance.inputs["metadata"]["trainstack-job-dir"] == JOB_DIR
    [grant] = [g for g in plan.of_type(BUCKET_GRANT) if g.inputs["bucket"] == "acme-ml-models"]
    assert grant.inputs["role"] == "roles/storage.objectUser"
    assert grant.inputs["member"] == instance.inputs["serviceAccount"]["email"].join(["serviceAccount:", ""])
    expression = grant.inputs["condition"]["expression"]
    assert 'startsWith("projects/_/buckets/acme-ml-models/objects/vision/run1/")' in expression
    assert plan.bucket_access()["job_dir"] == {
        "uri": JOB_DIR,
        "writers": [grant.inputs["member"]],
        "reads": [],
        "writes": [],
    }


def test_a_stack_without_a_job_dir_grants_nothing_beyond_its_own_bucket(tmp_path: Path) -> None:
    path = stack_with_job_dir(tmp_path)
    document = yaml.safe_load(path.read_text())
    del document["config"]["trainstack:job"]["job_dir"]
    path.write_text(yaml.safe_dump(document))
    plan = plan_of(path)
    assert {g.inputs["bucket"] for g in plan.of_type(BUCKET_GRANT)} == {plan.resolved.bucket_name}
    [member] = {g.inputs["member"] for g in plan.of_type(BUCKET_GRANT)}
    assert plan.bucket_access()["job_dir"] == {
        "uri": "gs://test-project-123_test/jobs/vision",
        "writers": [member],
        "reads": [],
        "writes": [],
    }


@pytest.mark.slow
def test_local_writes_the_job_dir_into_a_stand_in_of_the_teams_bucket_and_status_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_with_job_dir(tmp_path)
    cfg, _ = load_stack(path)
    result = (
        LocalStackRun(resolve_stack(cfg), tmp_path / "work", TrainerOverrides(), echo=False).start().wait(timeout=300)
    )
    assert result.succeeded, "\n".join(result.logs["chief"])
    stand_in = tmp_path / "work" / "bucket" / "acme-ml-models" / "vision" / "run1"
    assert result.job_dir == stand_in
    probe = json.loads((stand_in / "probe.json").read_text())
    assert probe == {"job_dir": str(stand_in), "model_dir": f"{stand_in}/model"}
    assert main(["status", "--local", "--stack-file", str(path), "--workdir", str(tmp_path / "work"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["job_dir"] == str(stand_in)
    assert report["job_status"]["state"] == "SUCCEEDED"


def test_import_keeps_ai_platforms_job_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "config.yaml"
    source.write_text(
        yaml.safe_dump(
            {
                "trainingInput": {
                    "scaleTier": "BASIC",
                    "region": "us-central1",
                    "jobDir": "gs://acme-ml-models/flowers/",
                    "masterConfig": {"imageUri": "us-docker.pkg.dev/acme-project/repo/trainer:v1"},
                }
            }
        )
    )
    out = tmp_path / "Pulumi.flowers.yaml"
    assert main(["import", str(source), "--stack", "flowers", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["config"]["trainstack:job"]["job_dir"] == "gs://acme-ml-models/flowers"
    captured = capsys.readouterr()
    assert "kept as trainstack:job.job_dir" in captured.out + captured.err
