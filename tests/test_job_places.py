"""A team's own buckets: what job.args, job.env and job.data name in Cloud Storage is read or
written as the flags say or job.buckets declares, `plan` grants exactly that (prefix-scoped),
the job's token carries it, `validate` names what nothing says, `import` writes it, and
`submit` refuses a queued job that reaches beyond what the deployed stack grants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack_helpers import base_config, plan_of, write_stack
from trainstack.base.project import PROJECT_ROOT
from trainstack.commands.main import main
from trainstack_contract import METADATA_KEYS
from trainstack_contract.metadata import JobMetadata

BUCKET_GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"
TRAIN = "serviceAccount:test-train@test-project-123.iam.gserviceaccount.com"
# Google's taxifare tuning sample's arguments: its data and its output in the team's buckets.
TAXIFARE_ARGS = [
    "--train_data_path=gs://team-data/taxifare/data/taxi-train*",
    "--eval_data_path=gs://team-data/taxifare/data/taxi-valid*",
    "--output_dir",
    "gs://team-out/taxifare/trained",
]


def team_job(args: list[str], **keys: Any) -> dict[str, Any]:
    config = base_config()
    config["trainstack:job"] = {
        "name": "taxifare",
        "package": "examples/tabular_mlp",
        "module": "tabular_mlp.task",
        "args": args,
        **keys,
    }
    return config


def team_grants(tmp_path: Path, config: dict[str, Any]) -> set[tuple[str, str, str | None]]:
    """(bucket, role, condition) of the training account's grants outside the stack's bucket."""
    plan = plan_of(write_stack(tmp_path, config))
    return {
        (g.inputs["bucket"], g.inputs["role"], (g.inputs.get("condition") or {}).get("expression"))
        for g in plan.of_type(BUCKET_GRANT)
        if g.inputs["member"] == TRAIN and g.inputs["bucket"] != "test-project-123_test"
    }


def test_the_plan_grants_what_the_flags_say_the_job_reads_and_writes_each_under_its_folder(tmp_path: Path) -> None:
    objects = "projects/_/buckets/{}/objects/{}"
    assert team_grants(tmp_path, team_job(TAXIFARE_ARGS)) == {
        (
            "team-data",
            "roles/storage.objectViewer",
            'resource.type == "storage.googleapis.com/Bucket" || '
            f'(resource.name.startsWith("{objects.format("team-data", "taxifare/data/")}"))',
        ),
        (
            "team-out",
            "roles/storage.objectUser",
            'resource.type == "storage.googleapis.com/Bucket" || '
            f'(resource.name.startsWith("{objects.format("team-out", "taxifare/trained/")}") '
            f'&& !resource.name.startsWith("{objects.format("team-out", "trainstack/")}"))',
        ),
    }


def test_the_plan_shows_what_the_jobs_token_reaches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_stack(tmp_path, team_job(TAXIFARE_ARGS))
    assert main(["plan", "--stack-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  reads: gs://team-data/taxifare/data/\n" in out
    assert "  writes: gs://team-out/taxifare/trained/\n" in out
    assert main(["plan", "--stack-file", str(path), "--json"]) == 0
    job_dir = json.loads(capsys.readouterr().out)["bucket_access"]["job_dir"]
    assert (job_dir["reads"], job_dir["writes"]) == (
        ["gs://team-data/taxifare/data/"],
        ["gs://team-out/taxifare/trained/"],
    )


def test_the_nodes_metadata_carries_the_places_to_the_agent() -> None:
    """One decision: resolved once, handed to every node (and to queued jobs' specs)."""
    metadata = JobMetadata(
        "package", "gs://b/jobs/x", reads=("gs://team-data/taxifare/data/",), writes=("gs://team-out/",)
    ).to_metadata()
    assert json.loads(metadata[METADATA_KEYS.job_buckets]) == {
        "read": ["gs://team-data/taxifare/data/"],
        "write": ["gs://team-out/"],
    }


def test_a_uri_no_flag_explains_is_named_with_the_line_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = team_job([*TAXIFARE_ARGS, "--vocabulary", "gs://team-lookup/words/v1.txt"], env={"EXTRA": "gs://x-y-z/a/"})
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 1
    err = capsys.readouterr().err
    assert (
        "trainstack:job.buckets: job.args[5] names gs://team-lookup/words/v1.txt, which the stack grants its job "
        "nothing on: say what the job does there, under trainstack:job add `buckets: {read: [gs://team-lookup/words/]}` "
        "(or write)"
    ) in err
    assert "job.env.EXTRA names gs://x-y-z/a/" in err
    assert "Traceback" not in err
    config["trainstack:job"]["buckets"] = {"read": ["gs://team-lookup/words/"], "write": ["gs://x-y-z/a/"]}
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 0
    grants = team_grants(tmp_path, config)
    assert {(bucket, role) for bucket, role, _ in grants} >= {
        ("team-lookup", "roles/storage.objectViewer"),
        ("x-y-z", "roles/storage.objectUser"),
    }


@pytest.mark.parametrize(
    ("buckets", "words"),
    [
        ({"read": ["gs://team-data/x"]}, "is not a place: use gs://BUCKET for a whole bucket or gs://BUCKET/FOLDER/"),
        ({"write": ["gs://team-data/trainstack/"]}, "lies under trainstack/"),
        ({"read": ["gs://team-data/../other-team/"]}, "is not a place"),
        ({"read": [f"gs://team-data/f{n}/" for n in range(9)]}, "at most 8 places"),
        ({"write": ["gs://test-project-123_test/results/"]}, "in this stack's own bucket outside its job directory"),
        ({"read": [f"gs://team-data-{n}/x/" for n in range(5)], "write": [f"gs://team-out-{n}/" for n in range(4)]},
         "would need 11 access boundary rules; Google allows at most 10"),
    ],
)  # fmt: skip
def test_a_place_google_or_trainstack_would_refuse_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], buckets: dict[str, list[str]], words: str
) -> None:
    config = team_job([], buckets=buckets)
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 1
    err = capsys.readouterr().err
    assert "job.buckets" in err
    assert words in err
    assert "Traceback" not in err


def test_import_writes_what_the_flags_say_and_the_plan_grants_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = tmp_path / "taxifare.txt"
    command.write_text(
        f"gcloud ai-platform jobs submit training taxifare_tuning --package-path {PROJECT_ROOT}/examples/tabular_mlp "
        "--module-name tabular_mlp.task --region us-central1 --scale-tier basic -- "
        + " ".join(TAXIFARE_ARGS)
        + " --vocabulary gs://team-lookup/words/v1.txt\n"
    )
    out = tmp_path / "Pulumi.taxi.yaml"
    # Written, and it does not validate yet: one URI is for the team to declare.
    code = main(["import", str(command), "--stack", "taxi", "--project", "my-project", "--out", str(out)])
    err = capsys.readouterr()
    assert code == 1, err
    text = out.read_text()
    assert yaml.safe_load(text)["config"]["trainstack:job"]["buckets"] == {
        "read": ["gs://team-data/taxifare/data/"],
        "write": ["gs://team-out/taxifare/trained/"],
    }
    assert "no flag says whether the job reads or writes it" in text
    # The one the flags leave open is validate's to name, with the line to add.
    assert main(["validate", "--stack-file", str(out)]) == 1
    assert "add `buckets: {read: [gs://team-lookup/words/]}` (or write)" in capsys.readouterr().err


def test_submit_refuses_a_queued_job_that_reaches_beyond_what_the_stack_grants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = team_job(TAXIFARE_ARGS)
    config["trainstack:cluster"]["idle_minutes"] = 10
    stack = write_stack(tmp_path, config)
    base = ["submit", "--stack-file", str(stack), "--local", "--workdir", str(tmp_path / "work")]
    beyond = "--train_data_path=gs://other-team/data/x.csv --output_dir gs://team-out/taxifare/trained"
    assert main([*base, "--args", beyond]) == 1
    err = capsys.readouterr().err
    assert "the queued job reaches gs://other-team/data/, which the stack's machines are not granted" in err
    assert "run `pulumi up` first" in err
    assert not (tmp_path / "work" / "bucket").exists() or not list((tmp_path / "work" / "bucket").rglob("index.json"))
    within = "--train_data_path=gs://team-data/taxifare/data/small* --output_dir gs://team-out/taxifare/trained/2"
    assert main([*base, "--args", within]) == 0, capsys.readouterr().err


def test_a_folder_no_grant_can_name_in_the_arguments_is_refused_not_sent_to_the_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = team_job(["--train_data_path", "gs://team-data/../other-team/x.csv"])
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 1
    assert "in a folder trainstack cannot grant (gs://team-data/../other-team/)" in capsys.readouterr().err


def test_a_declared_write_under_the_jobs_own_directory_is_its_own_not_another_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = team_job([], buckets={"write": ["gs://test-project-123_test/jobs/taxifare/exports/"]})
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "kind"),
    [
        # The course samples' own spellings, singular and plural.
        ("--train_data_path", "read"),
        ("--train_data_paths", "read"),
        ("--eval_data_paths", "read"),
        ("--input-files", "read"),
        ("--output_dir", "write"),
        ("--job-dir", "write"),
        ("--learning_rate", None),
    ],
)
def test_the_flags_the_samples_use_say_whether_the_job_reads_or_writes(flag: str, kind: str | None) -> None:
    from trainstack_contract.jobaccess import bucket_uses

    [use] = bucket_uses([f"{flag}=gs://team-data/taxifare/x.csv"])
    assert use.kind == kind


def test_a_queued_job_may_write_the_stacks_own_job_directory_in_a_teams_bucket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An imported AI Platform job keeps --job-dir as job.job_dir and writes --output_dir there
    too: `pulumi up` grants that folder, so a queued job or trial writing it is not refused."""
    config = team_job([*TAXIFARE_ARGS[:2], "--output_dir", "gs://team-out/taxifare/trained"])
    config["trainstack:job"]["job_dir"] = "gs://team-out/taxifare/trained"
    config["trainstack:cluster"]["idle_minutes"] = 10
    stack = write_stack(tmp_path, config)
    base = ["submit", "--stack-file", str(stack), "--local", "--workdir", str(tmp_path / "work"), "--no-start"]
    assert main(base) == 0, capsys.readouterr().err
    assert main([*base, "--args", "--output_dir gs://team-out/taxifare/elsewhere"]) == 1
    assert (
        "reaches gs://team-out/taxifare/elsewhere/, which the stack's machines are not granted"
        in capsys.readouterr().err
    )
