"""A team's own code: which code a job runs, checked before any VM exists, shipped by content,
and run by the real boot script with the contract every mode shares."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from recording_commands import install_recording_command, recorded_calls
from stack_helpers import base_config, node_log_tails, plan_of, write_stack
from trainstack.base.project import PROJECT_ROOT
from trainstack.catalog import load_catalog
from trainstack.cloud.components.registry import image_by_digest
from trainstack.cloud.planning import PlanMocks
from trainstack.commands.main import main
from trainstack.jobcode.package import MAX_WALKED_ENTRIES, load_package, resolve_image
from trainstack.localrun.nodes import TrainerOverrides
from trainstack.localrun.run import LocalStackRun
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack
from trainstack_contract import LAYOUT
from trainstack_contract.lifecycle import JobState

EXAMPLE = PROJECT_ROOT / "examples" / "tabular_mlp"
INSTANCE = "gcp:compute/instance:Instance"
REGISTRY_READER = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"

# A package written for these tests: it records what the boot script gave it (argv, the
# AIP_* directories, TF_CONFIG) and fails when asked to, without importing TensorFlow.
PROBE_MODULE = """
import json, os, sys
argv = sys.argv[1:]
job_dir = argv[argv.index("--job-dir") + 1]
record = {
    "argv": argv,
    "env": {k: v for k, v in os.environ.items() if k.startswith("AIP_") or k == "TF_CONFIG"},
}
os.makedirs(job_dir, exist_ok=True)
with open(os.path.join(job_dir, "probe-" + os.environ.get("NODE_NAME", "node") + ".json"), "w") as out:
    json.dump(record, out)
if "--fail" in argv:
    raise RuntimeError("the team's code failed on purpose")
"""


def single_node(job: dict[str, Any]) -> dict[str, Any]:
    config = base_config()
    config["trainstack:cluster"] = {
        "chief": {"machine_type": "n1-standard-4"},
        "strategy": "one_device",
        "on_finish": "stop",
    }
    config["trainstack:job"] = job
    return config


def probe_package(directory: Path, name: str = "probe_pkg") -> Path:
    package = directory / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(PROBE_MODULE)
    return package


def problems_for(tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 1
    return capsys.readouterr().err


# --- Validation: before any VM exists ----------------------------------------------------------
@pytest.mark.parametrize(
    ("job", "key", "words"),
    [
        (
            {"package": "examples/tabular_mlp", "module": "tabular_mlp.train"},
            "job.module",
            "has no module tabular_mlp.train; its modules: tabular_mlp.task",
        ),
        ({"package": "examples/tabular_mlp", "module": "task"}, "job.module", "it is job.module: tabular_mlp.task"),
        ({"package": "examples/tabular_mlp", "module": "other.task"}, "job.module", "its modules: tabular_mlp.task"),
        ({"package": "examples", "module": "other.task"}, "job.package", "a project root with pyproject.toml"),
        ({"package": "examples/no_such_dir", "module": "no_such_dir.task"}, "job.package", "not a directory"),
        ({"package": "examples/tabular_mlp"}, "job.module", "required with job.package"),
        ({"module": "tabular_mlp.task"}, "job.package", "needs job.package"),
        ({"package": "examples/tabular_mlp", "module": "tabular_mlp.task; rm -rf /"}, "job.module", "module name"),
        (
            {"package": "examples/tabular_mlp", "module": "tabular_mlp.task", "image": "trainer:v1"},
            "job.image",
            "not both",
        ),
        (
            {"package": "examples/tabular_mlp", "module": "tabular_mlp.task", "epochs": 3},
            "job.epochs",
            "built-in trainer",
        ),
        ({"image": "trainer:v1", "model": "resnet50"}, "job.model", "built-in trainer"),
        ({"image": "trainer:v1", "requirements": "requirements.txt"}, "job.requirements", "an image brings its own"),
        (
            {"package": "examples/tabular_mlp", "module": "tabular_mlp.task", "requirements": "missing.txt"},
            "job.requirements",
            "not a file",
        ),
        (
            {"package": "examples/tabular_mlp", "module": "tabular_mlp.task", "args": ["--job-dir=/tmp/x"]},
            "job.args[0]",
            "set by the stack",
        ),
        ({"args": ["--epochs", "3"]}, "job.args[0]", "set by the stack"),
        ({"image": "docker.io/library/python:3.12"}, "job.image", "Artifact Registry"),
        ({"image": "trainer"}, "job.image", "NAME:TAG"),
        ({"image": "us-central1-docker.pkg.dev/other-project/repo/trainer:v1\n"}, "job.image", "not an image"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_job_code_problems_name_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job: dict[str, Any], key: str, words: str
) -> None:
    err = problems_for(tmp_path, single_node({"name": "j", **job}), capsys)
    assert f"trainstack:{key}" in err, err
    assert words in err, err
    assert "Traceback" not in err


def test_a_teams_code_may_use_flags_the_built_in_trainer_reserves(tmp_path: Path) -> None:
    config = single_node(
        {"package": "examples/tabular_mlp", "module": "tabular_mlp.task", "args": ["--epochs", "3", "--model=x"]}
    )
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 0


def test_a_symlink_in_a_package_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    package = probe_package(tmp_path / "code")
    (package / "secrets.txt").symlink_to("/etc/passwd")
    err = problems_for(tmp_path, single_node({"package": str(package), "module": "probe_pkg.main"}), capsys)
    assert "trainstack:job.package" in err
    assert "symlink" in err


def test_requirements_that_are_a_symlink_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: a requirements "file" linking to application_default_credentials.json was uploaded."""
    package = probe_package(tmp_path / "code")
    secret = tmp_path / "application_default_credentials.json"
    secret.write_text('{"refresh_token": "x"}')
    (tmp_path / "requirements.txt").symlink_to(secret)
    job = {"package": str(package), "module": "probe_pkg.main", "requirements": str(tmp_path / "requirements.txt")}
    err = problems_for(tmp_path, single_node(job), capsys)
    assert "trainstack:job.requirements" in err
    assert "is a symlink" in err


def test_a_package_that_is_a_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    package = probe_package(tmp_path / "code")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "probe_pkg").symlink_to(package, target_is_directory=True)
    job = {"package": str(tmp_path / "linked" / "probe_pkg"), "module": "probe_pkg.main"}
    err = problems_for(tmp_path, single_node(job), capsys)
    assert "trainstack:job.package" in err
    assert "is a symlink" in err


@pytest.mark.slow
def test_hidden_trees_of_a_package_are_never_walked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: a package's .git of 150,000 files was walked in full (10 s) before being left out."""
    package = probe_package(tmp_path / "code")
    objects = package / ".git" / "objects"
    objects.mkdir(parents=True)
    for index in range(MAX_WALKED_ENTRIES + 10):
        (objects / f"o{index}").touch()
    assert (
        main(
            [
                "validate",
                "--stack-file",
                str(write_stack(tmp_path, single_node({"package": str(package), "module": "probe_pkg.main"}))),
            ]
        )
        == 0
    ), capsys.readouterr().err


@pytest.mark.slow
def test_a_package_tree_past_the_bound_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    package = probe_package(tmp_path / "code")
    data = package / "data"
    data.mkdir()
    for index in range(MAX_WALKED_ENTRIES + 10):
        (data / f"d{index}.bin").touch()
    err = problems_for(tmp_path, single_node({"package": str(package), "module": "probe_pkg.main"}), capsys)
    assert "trainstack:job.package" in err
    assert f"more than {MAX_WALKED_ENTRIES} files and directories" in err


# --- Shipped by content --------------------------------------------------------------------------
@pytest.mark.slow
def test_a_package_is_uploaded_under_its_content_hash_and_every_node_names_that_object(tmp_path: Path) -> None:
    source = tmp_path / "copy" / "tabular_mlp"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__"))
    config = base_config()
    config["trainstack:job"] = {"name": "tab", "package": str(source), "module": "tabular_mlp.task"}

    def uploaded() -> tuple[str, set[str]]:
        plan = plan_of(write_stack(tmp_path, config))
        [code] = [o for o in plan.of_type("gcp:storage/bucketObject:BucketObject") if o.name.endswith("-code")]
        metadata = [vm.inputs["metadata"] for vm in plan.of_type(INSTANCE)]
        named = {m["trainstack-code-archive"] for m in metadata}
        # Each node checks the archive's bytes, as uploaded, against this digest.
        assert {m["trainstack-code-archive-sha256"] for m in metadata} == {code.inputs["source"]["sha256"]}
        return code.inputs["name"], named

    first, named = uploaded()
    assert named == {first}
    assert first.startswith(f"{LAYOUT.code_dir}/tabular_mlp-")
    assert uploaded()[0] == first, "the same files give the same object"
    (source / "task.py").write_text((source / "task.py").read_text() + "\n# a change\n")
    second, named = uploaded()
    assert second != first, "a code change is a new object, and the nodes run it"
    assert named == {second}, "a code change is a new object, and the nodes run it"
    (source / "__pycache__").mkdir(exist_ok=True)
    (source / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"cache")
    assert uploaded()[0] == second, "caches are not part of the code"


def test_plan_reads_hashes_and_zips_a_teams_package_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checks read and hash the package; resolve, the components and the boot scripts use
    what they read instead of walking, hashing or zipping it again."""
    import trainstack.jobcode.package as package_module

    walked: list[Path] = []
    zipped: list[tuple[str, ...]] = []
    real_members, real_zip = package_module.package_members, package_module.zip_bytes

    def counting_members(source: Path, *args: Any, **kwargs: Any) -> Any:
        walked.append(source)
        return real_members(source, *args, **kwargs)

    def counting_zip(files: dict[str, bytes]) -> bytes:
        zipped.append(tuple(files))
        return real_zip(files)

    monkeypatch.setattr(package_module, "package_members", counting_members)
    monkeypatch.setattr(package_module, "zip_bytes", counting_zip)
    assert main(["plan", "--stack", "ownpackage", "--json"]) == 0
    capsys.readouterr()
    assert walked.count(EXAMPLE) == 1
    assert len([files for files in zipped if any(name.startswith("tabular_mlp/") for name in files)]) == 1


def test_requirements_ship_by_content_beside_the_package(tmp_path: Path) -> None:
    package = probe_package(tmp_path / "code")
    requirements = package / "reqs.txt"
    requirements.write_text(f"scikit-learn==1.9.1{HASH}\n")
    config = base_config()
    config["trainstack:job"] = {
        "name": "tab",
        "package": str(package),
        "module": "probe_pkg.main",
        "requirements": str(requirements),
    }
    plan = plan_of(write_stack(tmp_path, config))
    names = {o.inputs["name"] for o in plan.of_type("gcp:storage/bucketObject:BucketObject")}
    [named] = {vm.inputs["metadata"]["trainstack-requirements"] for vm in plan.of_type(INSTANCE)}
    assert named in names
    assert named.startswith(f"{LAYOUT.code_dir}/requirements-")


# --- Requirements: a file of the project or the package, requirement lines only ---------------
CREDENTIALS_JSON = (
    '{"client_id": "x.apps.googleusercontent.com", "refresh_token": "1//0gAbCdEfGh", "type": "authorized_user"}\n'
)


@pytest.mark.parametrize("where", ["relative", "absolute", "linked_folder"])
def test_a_requirements_file_outside_the_project_and_the_package_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Defect: `../` or an absolute path to any UTF-8 file up to 64 KiB (a credentials JSON)
    validated, and `pulumi up` uploaded it where every account of the stack could read it."""
    package = probe_package(tmp_path / "code")
    outside = tmp_path / "home" / ".config"
    outside.mkdir(parents=True)
    # Requirement lines only: what refuses it is where it is.
    (outside / "requirements.txt").write_text("numpy\n")
    named = outside / "requirements.txt"
    if where == "relative":
        requirements = os.path.relpath(named, PROJECT_ROOT)
        assert requirements.startswith("..")
    elif where == "absolute":
        requirements = str(named)
    else:
        (package / "deps").symlink_to(outside, target_is_directory=True)
        requirements = str(package / "deps" / "requirements.txt")
    job = {"name": "j", "package": str(package), "module": "probe_pkg.main", "requirements": requirements}
    err = problems_for(tmp_path, single_node(job), capsys)
    assert "trainstack:job.requirements" in err, err
    assert "is outside the project" in err, err
    assert "Traceback" not in err


def test_a_requirements_file_in_a_hidden_folder_of_the_package_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = probe_package(tmp_path / "code")
    (package / ".secrets").mkdir()
    (package / ".secrets" / "requirements.txt").write_text("numpy\n")
    job = {
        "name": "j",
        "package": str(package),
        "module": "probe_pkg.main",
        "requirements": str(package / ".secrets" / "requirements.txt"),
    }
    err = problems_for(tmp_path, single_node(job), capsys)
    assert "trainstack:job.requirements" in err, err
    assert "in a hidden folder" in err, err


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("-r ../../other.txt", "'-r' is a pip option"),
        ("-e git+https://github.com/team/lib.git#egg=lib", "'-e' is a pip option"),
        ("--index-url https://pypi.example.com/simple", "'--index-url' is a pip option"),
        ("--extra-index-url=https://mirror.example.com/simple", "'--extra-index-url' is a pip option"),
        ("numpy --config-settings=--build-option=x", "a pip option other than --hash"),
        ("lib @ https://deploy:hunter2secret@pypi.example.com/lib-1.0.tar.gz", "a URL with a user or password"),
        ("lib @ file:///etc/passwd", "its URL is not https://HOST/"),
        ("lib @ https://example.com/${API_TOKEN}/lib.tar.gz", "holds $"),
        (CREDENTIALS_JSON.strip(), "is not a PEP 508 requirement"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ012345", "a GitHub token"),
        ("numpy>=1.26,<3 ==", "is not a PEP 508 requirement"),
    ],
    ids=lambda value: value[:30],
)
def test_a_requirements_line_that_is_no_requirement_is_refused_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, words: str
) -> None:
    """Only whole requirement lines: pip reads the file as root on every node, and options
    read other files or fetch from other indexes."""
    package = probe_package(tmp_path / "code")
    (package / "requirements.txt").write_text(f"# the team's\n\nnumpy\n{line}\n")
    job = {
        "name": "j",
        "package": str(package),
        "module": "probe_pkg.main",
        "requirements": str(package / "requirements.txt"),
    }
    err = problems_for(tmp_path, single_node(job), capsys)
    [problem] = [row for row in err.splitlines() if "trainstack:job.requirements" in row]
    assert "requirements.txt line 4: " in problem, problem
    assert words in problem, problem
    assert "allowed: one requirement per line as PEP 508 writes it" in problem
    assert "hunter2secret" not in err
    assert "ghp_0123" not in err


def test_hash_pinned_requirements_as_pip_compile_writes_them_validate(tmp_path: Path) -> None:
    package = probe_package(tmp_path / "code")
    # Real sha256 digests: long random hex, which is a pin here, not a credential.
    digest = hashlib.sha256(b"tabulate").hexdigest()
    (package / "requirements.txt").write_text(
        f"tabulate==0.9.0 \\\n    --hash=sha256:{digest} \\\n    --hash=sha256:{hashlib.sha256(b'wheel').hexdigest()}\n"
        f"colorama==0.4.6 ; sys_platform == 'win32' --hash=sha256:{hashlib.sha256(b'colorama').hexdigest()}\n"
    )
    job = {
        "name": "j",
        "package": str(package),
        "module": "probe_pkg.main",
        "requirements": str(package / "requirements.txt"),
    }
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, single_node(job)))]) == 0


def test_plan_names_the_requirements_file_by_its_path_in_the_project(tmp_path: Path) -> None:
    """Defect: plan showed only the base name of the file it would upload (requirements.txt)."""
    config = base_config()
    config["trainstack:job"] = {
        "name": "team",
        "package": "examples/team_project",
        "module": "keras_team.task",
        "requirements": "examples/team_project/requirements.txt",
    }
    plan = plan_of(write_stack(tmp_path, config))
    [said] = [note for note in plan.notes if "requirements" in note]
    assert said.startswith("the job's requirements are examples/team_project/requirements.txt (uploaded as "), said


# --- Images --------------------------------------------------------------------------------------
def image_plan(tmp_path: Path, image: str) -> Any:
    config = base_config()
    config["trainstack:job"] = {"name": "img", "image": image, "args": ["--epochs", "2"]}
    return plan_of(write_stack(tmp_path, config))


def readers(plan: Any, identity: str) -> set[tuple[str, str, str]]:
    return {
        (m.inputs["project"], m.inputs["location"], m.inputs["repository"])
        for m in plan.of_type(REGISTRY_READER)
        if m.name.startswith(f"test-{identity}-")
    }


def test_a_short_image_name_is_the_stacks_own_repository_on_every_node(tmp_path: Path) -> None:
    plan = image_plan(tmp_path, "trainer:v1")
    repository = "us-central1-docker.pkg.dev/test-project-123/test-images"
    vms = plan.of_type(INSTANCE)
    assert len(vms) == 3
    for vm in vms:
        metadata = vm.inputs["metadata"]
        # The tag is resolved when the stack is deployed: nodes pull that digest (here the plan's stand-in).
        assert metadata["trainstack-job-mode"] == "image"
        assert metadata["trainstack-image"].startswith(f"{repository}/trainer@sha256:")
        assert metadata["trainstack-gpu-count"] == "2"
        assert json.loads(metadata["trainstack-trainer-args"]) == ["--epochs", "2"]
        assert "trainstack-code-archive" not in metadata
    # No code object: the image is the code (the agent and the nodes' lock are all the bucket holds for them).
    # The nodes read the stack's repository, which holds the image.
    assert [o.inputs["name"].split("/")[1] for o in plan.of_type("gcp:storage/bucketObject:BucketObject")] == [
        "agent",
        "python",
    ]
    assert ("test-project-123", "us-central1", "test-images") in {
        (p, loc, r.rsplit("/", 1)[-1]) for p, loc, r in readers(plan, "identity")
    }


def test_an_image_in_another_repository_gets_a_reader_binding_for_the_training_account_only(tmp_path: Path) -> None:
    uri = "europe-west4-docker.pkg.dev/shared-images-77/vision/trainer@sha256:" + "a" * 64
    plan = image_plan(tmp_path, uri)
    assert {vm.inputs["metadata"]["trainstack-image"] for vm in plan.of_type(INSTANCE)} == {uri}
    assert ("shared-images-77", "europe-west4", "vision") in readers(plan, "identity")
    assert plan.notes
    assert any(uri in note for note in plan.notes)


class RecordedImageLookups:
    """Answers the program's Artifact Registry image lookups with a digest of the test's own
    (a different one per image), keeping each call's arguments; other calls go to the plan's mocks."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict[str, Any]] = []
        self.digests: dict[str, str] = {}
        original = PlanMocks.call

        def call(mocks: PlanMocks, args: Any) -> Any:
            if args.token != "gcp:artifactregistry/getDockerImage:getDockerImage":
                return original(mocks, args)
            given = dict(args.args)
            self.calls.append(given)
            image = given["imageName"].partition(":")[0]
            digest = self.digests.setdefault(given["imageName"], f"sha256:{len(self.digests) + 1:064x}")
            link = f"{given['location']}-docker.pkg.dev/{given['project']}/{given['repositoryId']}/{image}@{digest}"
            return {"selfLink": link, "imageName": given["imageName"]}, []

        monkeypatch.setattr(PlanMocks, "call", call)


@pytest.mark.parametrize("machines", ["cluster", "tpu"])
def test_an_image_named_by_tag_is_resolved_to_its_digest_when_deployed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, machines: str
) -> None:
    """Defect: nodes pulled job.image's mutable NAME:TAG at every boot."""
    lookups = RecordedImageLookups(monkeypatch)
    config = base_config()
    if machines == "tpu":
        del config["trainstack:cluster"]
        config["trainstack:zone"] = "us-central1-b"
        config["trainstack:tpu"] = {"accelerator_type": "v2-8", "runtime_version": "tpu-vm-tf-2.17.0-pjrt"}
    image = "europe-west4-docker.pkg.dev/shared-images-77/vision/team/trainer:v2"
    config["trainstack:job"] = {"name": "img", "image": image}
    plan = plan_of(write_stack(tmp_path, config))
    # Looked up once, in the image's own repository, by its name and tag.
    assert lookups.calls == [
        {
            "project": "shared-images-77",
            "location": "europe-west4",
            "repositoryId": "vision",
            "imageName": "team/trainer:v2",
        }
    ]
    pinned = f"europe-west4-docker.pkg.dev/shared-images-77/vision/team/trainer@{lookups.digests['team/trainer:v2']}"
    machine_types = {"cluster": INSTANCE, "tpu": "gcp:tpu/v2Vm:V2Vm"}
    vms = plan.of_type(machine_types[machines])
    assert vms
    assert {vm.inputs["metadata"]["trainstack-image"] for vm in vms} == {pinned}


def test_an_image_named_by_digest_is_not_looked_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = RecordedImageLookups(monkeypatch)
    uri = "us-central1-docker.pkg.dev/test-project-123/test-images/trainer@sha256:" + "b" * 64
    plan = image_plan(tmp_path, uri)
    assert lookups.calls == []
    assert {vm.inputs["metadata"]["trainstack-image"] for vm in plan.of_type(INSTANCE)} == {uri}


def test_a_lookup_that_gives_no_digest_fails_the_deployment() -> None:
    image = resolve_image("trainer:v1", "us-central1-docker.pkg.dev/test-project-123/test-images")
    with pytest.raises(ValueError, match="by digest"):
        image_by_digest(image, "us-central1-docker.pkg.dev/test-project-123/test-images/trainer:v1")
    with pytest.raises(ValueError, match="by digest"):
        image_by_digest(image, "us-central1-docker.pkg.dev/other-project-1/test-images/trainer@sha256:" + "c" * 64)


@pytest.mark.parametrize("image", ["docker.io/library/python:3.12", "gcr.io/my-project/trainer:v1", "ghcr.io/o/t:v1"])
def test_an_image_by_tag_outside_artifact_registry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image: str
) -> None:
    """Only Artifact Registry resolves a tag to its digest when the stack is deployed."""
    path = write_stack(tmp_path, single_node({"name": "j", "image": image}))
    assert main(["validate", "--stack-file", str(path)]) == 1
    [line] = [line for line in capsys.readouterr().err.splitlines() if "trainstack:job.image" in line]
    assert image in line
    assert "NAME@sha256:" in line
    assert "docker.pkg.dev" in line
    assert "Traceback" not in line


# --- Run by the boot script ----------------------------------------------------------------------
def run_local(config: dict[str, Any], tmp_path: Path, **kwargs: Any) -> Any:
    cfg = load_stack(write_stack(tmp_path, config))[0]
    # An image's container shares the Docker engine's network: `local` runs it there only when told to.
    kwargs.setdefault("allow_shared_network", "image" in config["trainstack:job"])
    return (
        LocalStackRun(resolve_stack(cfg), tmp_path / "work", TrainerOverrides(), **{"echo": False, **kwargs})
        .start()
        .wait(timeout=300)
    )


@pytest.mark.slow
def test_a_package_outside_the_repository_gets_the_contract_every_mode_shares(tmp_path: Path) -> None:
    package = probe_package(tmp_path / "elsewhere")
    config = single_node({"name": "probe", "package": str(package), "module": "probe_pkg.main", "args": ["--x", "1"]})
    result = run_local(config, tmp_path)
    assert result.succeeded, result.logs
    [record_file] = result.job_dir.glob("probe-*.json")
    record = json.loads(record_file.read_text())
    job_dir = str(result.job_dir)
    assert record["argv"] == ["--job-dir", job_dir, "--x", "1"]
    assert record["env"] == {
        "AIP_MODEL_DIR": f"{job_dir}/{LAYOUT.model_dir}",
        "AIP_CHECKPOINT_DIR": f"{job_dir}/{LAYOUT.checkpoint_dir}",
        "AIP_TENSORBOARD_LOG_DIR": f"{job_dir}/{LAYOUT.log_dir}",
    }


@pytest.mark.slow
def test_a_package_that_raises_fails_the_job_with_its_traceback_and_releases_the_machine(tmp_path: Path) -> None:
    package = probe_package(tmp_path / "elsewhere")
    config = single_node({"name": "probe", "package": str(package), "module": "probe_pkg.main", "args": ["--fail"]})
    result = run_local(config, tmp_path)
    assert result.job_status["state"] == "FAILED"
    assert result.job_status["exit_code"] == 1
    log = "\n".join(result.logs["chief"])
    assert "Traceback (most recent call last)" in log
    assert "RuntimeError: the team's code failed on purpose" in log
    assert [line.split()[1:] for line in result.self_stops] == [["stop", "chief"]]


# Reports a metric as cloudml-hypertune 0.1.0.dev6 does: the variable's file, one JSON object
# per line with sorted keys (the package itself is not installed on the node).
HYPERTUNE_PROBE = """
import json, os, time
path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
os.makedirs(os.path.dirname(path), exist_ok=True)
body = {"timestamp": time.time(), "trial": "0", "accuracy": "0.875", "global_step": "7", "checkpoint_path": ""}
with open(path, "w") as out:
    out.write(json.dumps(body, sort_keys=True) + "\\n")
"""


@pytest.mark.slow
def test_a_report_the_jobs_code_writes_through_hypertune_ends_in_its_job_directory(tmp_path: Path) -> None:
    package = tmp_path / "elsewhere" / "hp_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(HYPERTUNE_PROBE)
    result = run_local(single_node({"name": "hp", "package": str(package), "module": "hp_probe.main"}), tmp_path)
    assert result.succeeded, result.logs
    [line] = (result.job_dir / LAYOUT.hypertune_metrics("chief")).read_text().splitlines()
    assert json.loads(line)["accuracy"] == "0.875"
    assert json.loads(line)["global_step"] == "7"


# A team's package named `trainer` with setup.py beside it, laid out as AI Platform's samples are.
AI_PLATFORM_SAMPLE = PROJECT_ROOT / "tests" / "fixtures" / "ai_platform_sample"


@pytest.mark.slow
def test_a_teams_package_named_trainer_runs_in_local_not_the_built_in_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample's project, installed on the node with pip, from a checkout run with PYTHONPATH
    naming it, where trainstack's own `trainer` is importable. Defect: the node's job kept that
    PYTHONPATH, and the built-in trainer ran in place of the team's (its usage error: --data)."""
    monkeypatch.setenv("PYTHONPATH", str(PROJECT_ROOT))
    job = {
        "name": "sample",
        "package": str(AI_PLATFORM_SAMPLE),
        "module": "trainer.task",
        "args": ["--num-epochs", "2"],
    }
    # The node's pip builds the project with setuptools, which the run fetches from the package index first.
    result = run_local(single_node(job), tmp_path)
    assert result.succeeded, "\n".join(result.logs["chief"])[-3000:]
    record = json.loads((result.job_dir / "team-trainer" / "chief.json").read_text())
    assert record["owner"] == "the team's trainer package"
    assert record["num_epochs"] == 2
    node_environment = tmp_path / "work" / "nodes" / "chief" / "state" / "venv"
    assert all(file.startswith(str(node_environment)) for file in record["files"]), record


@pytest.mark.slow
def test_an_image_job_runs_the_image_with_the_job_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = install_recording_command("docker", tmp_path, monkeypatch)
    config = base_config()
    config["trainstack:cluster"]["workers"]["count"] = 1
    config["trainstack:job"] = {"name": "img", "image": "trainer:v1", "args": ["--epochs", "2"]}
    result = run_local(config, tmp_path)
    assert result.succeeded, result.logs
    uri = "us-central1-docker.pkg.dev/test-project-123/test-images/trainer:v1"
    recorded = recorded_calls(calls)
    runs = [call for call in recorded if call[0] == "run"]
    assert [call for call in recorded if call[0] == "pull"] == [["pull", "--quiet", uri]] * 2
    assert len(runs) == 2
    job_dir = str(result.job_dir)
    for call in runs:
        name = call[call.index("--name") + 1]
        assert name in {"trainstack-chief", "trainstack-worker-0"}
        assert call[: call.index("--name")] == ["run", "--rm", "--init"]
        options = call[: call.index(uri)]
        assert "--network" in options
        assert options[options.index("--network") + 1] == "host"
        for variable in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR", "TF_CONFIG"):
            assert options[options.index(variable) - 1] == "--env"
        # This machine has no GPU: none is passed through.
        assert "--gpus" not in options
        assert options[options.index("--volume") + 1] == f"{job_dir}:{job_dir}"
        assert call[call.index(uri) + 1 :] == ["--job-dir", job_dir, "--epochs", "2"]


@pytest.mark.slow
def test_an_image_node_with_gpus_passes_them_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = install_recording_command("docker", tmp_path, monkeypatch)
    config = single_node({"name": "img", "image": "trainer:v1"})
    result = run_local(config, tmp_path, gpu_count=2)
    assert result.succeeded, result.logs
    [run] = [call for call in recorded_calls(calls) if call[0] == "run"]
    assert run[run.index("--gpus") + 1] == "all"


@pytest.mark.slow
@pytest.mark.parametrize("reference", [":v1", "@sha256:" + "d" * 64])
def test_local_runs_an_image_by_tag_or_digest_and_says_a_tag_is_not_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reference: str
) -> None:
    calls = install_recording_command("docker", tmp_path, monkeypatch)
    uri = f"us-central1-docker.pkg.dev/test-project-123/test-images/trainer{reference}"
    result = run_local(single_node({"name": "img", "image": uri}), tmp_path, echo=True)
    assert result.succeeded, result.logs
    # `local` reaches no registry's API: it runs the name as given, and says when that is a tag.
    assert [call for call in recorded_calls(calls) if call[0] == "pull"] == [["pull", "--quiet", uri]]
    said = [line for line in capsys.readouterr().out.splitlines() if "not pinned here" in line]
    assert len(said) == (1 if reference == ":v1" else 0), said


def test_local_refuses_builtin_overrides_for_a_teams_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = single_node({"name": "p", "package": "examples/tabular_mlp", "module": "tabular_mlp.task"})
    path = write_stack(tmp_path, config)
    assert main(["local", "--stack-file", str(path), "--epochs", "1", "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "--epochs" in err
    assert "trainstack:job.args" in err


@pytest.mark.parametrize("docker", ["absent", "engine_down"])
def test_local_explains_that_an_image_needs_a_running_docker_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, docker: str
) -> None:
    if docker == "absent":
        monkeypatch.setattr(shutil, "which", lambda name: None)
    else:
        # A docker client whose engine does not answer (`docker info` fails), as on this machine.
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "docker").write_text("#!/bin/bash\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
        (bin_dir / "docker").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    path = write_stack(tmp_path, single_node({"name": "img", "image": "trainer:v1"}))
    assert main(["local", "--stack-file", str(path), "--workdir", str(tmp_path / "w")]) == 1
    assert "`docker info` finds none running" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_local_runs_an_image_job_in_this_machines_network_only_when_told_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container shares the Docker engine's network (--network host), where TensorFlow's
    gRPC servers listen on every interface of this machine; no namespace of `local` holds it.
    Defect: the run went on there without a word."""
    calls = install_recording_command("docker", tmp_path, monkeypatch)
    path = write_stack(tmp_path, single_node({"name": "img", "image": "trainer:v1"}))
    command = ["local", "--stack-file", str(path), "--workdir", str(tmp_path / "w")]
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "listen on every interface" in err, err
    assert "--allow-shared-network" in err, err
    assert "trainer:v1" in err, err
    assert [call[0] for call in recorded_calls(calls)] == ["info"], "the image was pulled or run"

    assert main([*command, "--allow-shared-network"]) == 0
    out = capsys.readouterr().out
    assert "note: TensorFlow's gRPC servers of this run listen on every interface of this machine" in out
    assert [call[0] for call in recorded_calls(calls)].count("run") == 1


@pytest.mark.slow
def test_the_example_package_trains_on_a_chief_and_a_worker_with_multi_worker_mirrored(tmp_path: Path) -> None:
    """The README's example, as a user runs it: `trainstack local --stack ownpackage`."""
    workdir = tmp_path / "work"
    completed = subprocess.run(
        [sys.executable, "-m", "trainstack", "local", "--stack", "ownpackage", "--workdir", str(workdir)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:] + node_log_tails(workdir)
    assert "job SUCCEEDED" in completed.stdout
    [summary_file] = workdir.glob("bucket/*/jobs/tabular_example/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["replicas"] == 2, "recorded by the package itself: one replica on each of two machines"
    assert summary["epochs"] == 3


TEAM_PROJECT = PROJECT_ROOT / "examples" / "team_project"


@pytest.mark.slow
def test_a_teams_project_with_requirements_trains_on_a_chief_and_a_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defects: job.requirements made every node of `local` exit 127 (its environment had no
    pip), and a project root holding pyproject.toml was refused as a package."""
    document = yaml.safe_load((PROJECT_ROOT / "stacks" / "Pulumi.ownpackage.yaml").read_text())
    document["config"]["trainstack:job"] = {
        "name": "team",
        "package": str(TEAM_PROJECT),
        "module": "keras_team.task",
        "requirements": str(TEAM_PROJECT / "requirements.txt"),
        "args": ["--epochs", "2", "--steps-per-epoch", "5"],
    }
    stack = tmp_path / "Pulumi.team.yaml"
    stack.write_text(yaml.safe_dump(document))
    workdir = tmp_path / "work"
    code = main(["local", "--stack-file", str(stack), "--workdir", str(workdir)])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:] + node_log_tails(workdir)
    assert "job SUCCEEDED" in out, out[-2000:]
    assert "fetched tabulate==0.9.0" in out
    for node in ("chief", "worker-0"):
        # Installed on each node by its agent: the requirement, and the project with pip.
        versions = subprocess.run(
            [
                str(workdir / "nodes" / node / "state" / "venv" / "bin" / "python"),
                "-c",
                "import importlib.metadata as m; print(m.version('tabulate'), m.version('keras-team'))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert versions == ["0.9.0", "1.0.0"], node
    [result] = workdir.glob("bucket/*/jobs/team/result.json")
    assert json.loads(result.read_text())["epochs"] == 2


def test_the_example_package_is_a_package_trainstack_can_ship() -> None:
    package = load_package(EXAMPLE, "tabular_mlp.task")
    assert set(package.members) == {"tabular_mlp/__init__.py", "tabular_mlp/task.py"}


# --- Layouts: AI Platform's, a directory holding the package, a project root -------------------
def team_layout(root: Path, layout: str) -> Path:
    """A team's code laid out one way; returns the path job.package names."""
    if layout == "package":
        return probe_package(root)
    if layout == "directory":
        probe_package(root / "code")
        probe_package(root / "code", "helpers")
        return root / "code"
    project = root / "project"
    if layout == "src":
        probe_package(project / "src")
        (project / "pyproject.toml").write_text('[project]\nname = "probe"\nversion = "1"\n')
    else:
        probe_package(project)
        (project / "setup.py").write_text("from setuptools import setup\nsetup(name='probe')\n")
        # An earlier build's leftovers: never shipped.
        probe_package(project / "build" / "lib")
    (project / "README.md").write_text("a team's project\n")
    return project


@pytest.mark.parametrize(
    ("layout", "install", "members"),
    [
        ("package", None, {"probe_pkg/__init__.py", "probe_pkg/main.py"}),
        (
            "directory",
            None,
            {"probe_pkg/__init__.py", "probe_pkg/main.py", "helpers/__init__.py", "helpers/main.py"},
        ),
        ("src", "project", {"pyproject.toml", "README.md", "src/probe_pkg/__init__.py", "src/probe_pkg/main.py"}),
        ("setup.py", "project", {"setup.py", "README.md", "probe_pkg/__init__.py", "probe_pkg/main.py"}),
    ],
)
def test_every_layout_a_team_uses_ships_and_tells_the_node_how_to_install_it(
    tmp_path: Path, layout: str, install: str | None, members: set[str]
) -> None:
    source = team_layout(tmp_path, layout)
    package = load_package(source, "probe_pkg.main")
    assert set(package.members) == members
    plan = plan_of(
        write_stack(tmp_path, single_node({"name": "j", "package": str(source), "module": "probe_pkg.main"}))
    )
    [instance] = [r for r in plan.resources if r.type == INSTANCE]
    metadata = instance.inputs["metadata"]
    assert metadata.get("trainstack-code-install") == install
    assert metadata["trainstack-code-archive"].startswith("trainstack/code/probe_pkg-")


def test_the_same_files_as_a_directory_and_as_a_project_are_two_archives(tmp_path: Path) -> None:
    source = team_layout(tmp_path, "directory")
    as_directory = load_package(source, "probe_pkg.main")
    (source / "pyproject.toml").write_text('[project]\nname = "probe"\nversion = "1"\n')
    as_project = load_package(source, "probe_pkg.main")
    (source / "pyproject.toml").unlink()
    as_directory_again = load_package(source, "probe_pkg.main")
    assert as_directory.digest == as_directory_again.digest != as_project.digest


@pytest.mark.parametrize(
    ("given", "module", "key", "answer"),
    [
        # The folder above the project, a misspelt project, a path inside the package.
        ("teams", "keras_team.task", "job.package", "job.package: {root}/teams/acme does"),
        ("teams/acmee", "keras_team.task", "job.package", "(job.package: {root}/teams/acme holds keras_team.task)"),
        ("teams/acme/src/keras_team/models", "keras_team.task", "job.package", "job.package: {root}/teams/acme does"),
        ("teams/acme/src/keras_team", "task", "job.module", "it is job.module: keras_team.task"),
    ],
)
def test_a_wrong_package_path_is_answered_with_the_path_that_would_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, module: str, key: str, answer: str
) -> None:
    project = tmp_path / "teams" / "acme"
    (project / "src" / "keras_team" / "models").mkdir(parents=True)
    (project / "src" / "keras_team" / "__init__.py").write_text("")
    (project / "src" / "keras_team" / "task.py").write_text("")
    (project / "pyproject.toml").write_text('[project]\nname = "acme"\nversion = "1"\n')
    err = problems_for(tmp_path, single_node({"name": "j", "package": str(tmp_path / given), "module": module}), capsys)
    assert f"trainstack:{key}: " in err, err
    assert answer.format(root=tmp_path) in err, err


def ai_platform_sample(root: Path, project: bool) -> Path:
    """Google's AI Platform samples' layout: a `trainer` package of task, model and util, in a
    directory of its own (job.package names that directory), with setup.py when ``project``."""
    package = root / "sample" / "trainer"
    package.mkdir(parents=True)
    for name in ("__init__", "task", "model", "util"):
        (package / f"{name}.py").write_text("")
    if project:
        (root / "sample" / "setup.py").write_text("from setuptools import setup\nsetup(name='sample')\n")
    return root / "sample"


@pytest.mark.parametrize("project", [False, True], ids=["directory", "project"])
def test_a_module_the_package_does_not_hold_is_answered_with_the_modules_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], project: bool
) -> None:
    """Defect: `trainer.train` beside trainer/task.py was answered as if the package were missing."""
    source = ai_platform_sample(tmp_path, project)
    err = problems_for(tmp_path, single_node({"name": "j", "package": str(source), "module": "trainer.train"}), capsys)
    assert (
        f"trainstack:job.module: {source} holds package trainer but no module trainer.train; "
        "its modules: trainer.model, trainer.task, trainer.util"
    ) in err, err
    assert "names the package directory" not in err
    assert "not a directory" not in err


def test_the_modules_a_message_lists_are_sorted_and_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = ai_platform_sample(tmp_path, project=False)
    (source / "trainer" / "__main__.py").write_text("")
    (source / "trainer" / "models").mkdir()
    for i in range(20):
        (source / "trainer" / "models" / f"m{i:02}.py").write_text("")
    (source / "trainer" / "not-a-module.py").write_text("")
    (source / "trainer" / ".hidden").mkdir()
    (source / "trainer" / ".hidden" / "secret.py").write_text("")
    err = problems_for(tmp_path, single_node({"name": "j", "package": str(source), "module": "trainer.train"}), capsys)
    listed = "trainer, trainer.model, " + ", ".join(f"trainer.models.m{i:02}" for i in range(10))
    assert f"its modules: {listed} and 12 more" in err, err
    assert "not-a-module" not in err
    assert "secret" not in err


def test_a_package_the_directory_does_not_hold_is_answered_with_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = ai_platform_sample(tmp_path, project=False)
    err = problems_for(tmp_path, single_node({"name": "j", "package": str(source), "module": "trainr.task"}), capsys)
    assert "trainstack:job.package: " in err, err
    assert "a directory holding trainr/" in err, err
    assert "its modules: trainer.model, trainer.task, trainer.util" in err, err


# --- No job: a dev box -----------------------------------------------------------------------------
def no_job_config(**cluster: Any) -> dict[str, Any]:
    config = base_config()
    del config["trainstack:job"]
    config["trainstack:cluster"]["workers"]["count"] = 1
    config["trainstack:cluster"].update(cluster)
    return config


def test_a_cluster_without_a_job_boots_ready_with_tf_config_and_starts_nothing(tmp_path: Path) -> None:
    cfg = load_stack(write_stack(tmp_path, no_job_config()))[0]
    local = LocalStackRun(resolve_stack(cfg), tmp_path / "work", TrainerOverrides(), echo=False)
    cluster = json.loads(local.machines.project_attributes[local.stack.cluster.tf_cluster_metadata_key])
    result = local.start().wait(timeout=120)
    assert result.ready, result.logs
    assert not result.succeeded, result.logs
    for node in local.nodes:
        tf_config = json.loads((node.state_dir / "tf_config.json").read_text())
        assert tf_config == {"cluster": cluster, "task": {"type": node.role, "index": node.index}}
        profile = (node.state_dir / "trainstack-tf-config.sh").read_text()
        exported = subprocess.run(
            [
                "bash",
                "-c",
                'source "$1" && printf %s "$TF_CONFIG"',
                "-",
                str(node.state_dir / "trainstack-tf-config.sh"),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(exported) == tf_config, profile
        assert not any("starting the job" in line for line in node.lines)
    assert result.self_stops == [], "a dev box is stopped by its run-time cap or by a user, not at boot"


def test_plan_of_a_cluster_without_a_job_says_so_with_the_monthly_cost(tmp_path: Path) -> None:
    for job in (None, "none"):
        config = no_job_config()
        if job is not None:
            config["trainstack:job"] = job
        plan = plan_of(write_stack(tmp_path, config))
        monthly = f"${plan.hourly_usd * 730:,.0f}"
        assert any("no job" in note and monthly in note for note in plan.notes), plan.notes
        for vm in plan.of_type(INSTANCE):
            assert vm.inputs["metadata"]["trainstack-job-mode"] == "none"
            assert vm.inputs["scheduling"]["maxRunDuration"]["seconds"] == 24 * 3600


def test_no_run_time_cap_only_with_the_acknowledgement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = problems_for(tmp_path, no_job_config(max_run_hours=None), capsys)
    assert "trainstack:cluster" in err
    assert "acknowledge_bills_until_stopped: true" in err
    err = problems_for(tmp_path, no_job_config(acknowledge_bills_until_stopped=True), capsys)
    assert "the cap stays on" in err
    plan = plan_of(write_stack(tmp_path, no_job_config(max_run_hours=None, acknowledge_bills_until_stopped=True)))
    for vm in plan.of_type(INSTANCE):
        scheduling = vm.inputs["scheduling"]
        assert "maxRunDuration" not in scheduling
        if scheduling["provisioningModel"] == "STANDARD":
            assert "instanceTerminationAction" not in scheduling
    assert any("no run-time cap" in note and f"${plan.hourly_usd * 730:,.0f}" in note for note in plan.notes)


# --- job.env: the job's own environment variables ----------------------------------------------
ENV_PROBE = """
import json, os, sys
argv = sys.argv[1:]
job_dir = argv[argv.index("--job-dir") + 1]
names = ("TF_USE_LEGACY_KERAS", "TEAM_SETTING", "NODE_NAME", "TF_CONFIG")
with open(os.path.join(job_dir, "env-" + os.environ["NODE_NAME"] + ".json"), "w") as out:
    json.dump({name: os.environ.get(name) for name in names}, out)
# The chief ends the job: it waits for the worker's record, as a cluster's chief waits for its
# workers, or a worker slow to start would find the job over before its code ran.
import time
deadline = time.monotonic() + 120
while os.environ["NODE_NAME"] == "chief" and time.monotonic() < deadline:
    if os.path.exists(os.path.join(job_dir, "env-worker-0.json")):
        break
    time.sleep(0.2)
"""


def env_probe(directory: Path) -> Path:
    package = directory / "env_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(ENV_PROBE)
    return package


@pytest.mark.slow
def test_job_env_reaches_the_jobs_code_on_every_node_beside_what_trainstack_sets(tmp_path: Path) -> None:
    """Defect: there was no way to give a job an environment variable (TF_USE_LEGACY_KERAS=1
    for code written for tf.keras as Keras 2)."""
    config = base_config()
    config["trainstack:cluster"]["workers"]["count"] = 1
    setting = "a b $(not run) 'q' \"w\""
    config["trainstack:job"] = {
        "name": "envjob",
        "package": str(env_probe(tmp_path / "elsewhere")),
        "module": "env_probe.main",
        "env": {"TF_USE_LEGACY_KERAS": "1", "TEAM_SETTING": setting},
    }
    result = run_local(config, tmp_path)
    assert result.succeeded, result.logs
    for node, task in (("chief", "chief"), ("worker-0", "worker")):
        record = json.loads((result.job_dir / f"env-{node}.json").read_text())
        assert (record["TF_USE_LEGACY_KERAS"], record["TEAM_SETTING"], record["NODE_NAME"]) == ("1", setting, node)
        assert json.loads(record["TF_CONFIG"])["task"] == {"type": task, "index": 0}


@pytest.mark.slow
def test_an_image_job_gets_job_env_by_value_on_the_docker_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = install_recording_command("docker", tmp_path, monkeypatch)
    config = single_node({"name": "img", "image": "trainer:v1", "env": {"TF_USE_LEGACY_KERAS": "1"}})
    result = run_local(config, tmp_path)
    assert result.succeeded, result.logs
    [run] = [call for call in recorded_calls(calls) if call[0] == "run"]
    options = run[: run.index("us-central1-docker.pkg.dev/test-project-123/test-images/trainer:v1")]
    assert options[options.index("TF_USE_LEGACY_KERAS=1") - 1] == "--env"


def test_plan_shows_job_env_and_every_node_carries_it_in_its_metadata(tmp_path: Path) -> None:
    config = base_config()
    config["trainstack:job"]["env"] = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    plan = plan_of(write_stack(tmp_path, config))
    assert any(
        "environment variables (job.env): TF_USE_LEGACY_KERAS='1', TF_CPP_MIN_LOG_LEVEL='2'" in note
        for note in plan.notes
    ), plan.notes
    for vm in plan.of_type(INSTANCE):
        assert json.loads(vm.inputs["metadata"]["trainstack-job-env"]) == config["trainstack:job"]["env"]


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"TF_CONFIG": "{}"}, "TF_CONFIG is set by trainstack"),
        ({"NODE_NAME": "chief"}, "NODE_NAME is set by trainstack"),
        ({"AIP_MODEL_DIR": "gs://b/m"}, "AIP_MODEL_DIR is set by trainstack"),
        ({"PATH": "/tmp"}, "PATH is set by trainstack"),
        ({"PYTHONPATH": "/tmp"}, "PYTHONPATH is set by trainstack"),
        ({"LD_PRELOAD": "/tmp/x.so"}, "LD_PRELOAD is set by trainstack"),
        ({"CLOUD_ML_HP_METRIC_FILE": "/tmp/m"}, "CLOUD_ML_HP_METRIC_FILE is set by trainstack"),
        ({"1ST": "x"}, "'1ST': a name is letters, digits and '_'"),
        ({"X\n": "x"}, "a name is letters, digits and '_'"),
        ({"X-Y": "x"}, "a name is letters, digits and '_'"),
        (
            {"TF_USE_LEGACY_KERAS": 1},
            'TF_USE_LEGACY_KERAS: 1 is not text to YAML; environment values are text: write "1"',
        ),
        ({"FLAG": True}, 'write "true"'),
        ({"X": "a\nb"}, "X: a value is printable text of at most 4096 characters"),
        ({"X": "y" * 4097}, "X: a value is printable text of at most 4096 characters"),
        ({"X": ["a"]}, "X: a value is text"),
        ({f"V{i}": "x" for i in range(65)}, "65 variables: at most 64"),
        ("TF_USE_LEGACY_KERAS=1", 'a mapping of NAME: "value"'),
        ({"HF_TOKEN": "hf_abcdef"}, "pulumi config set --path --secret 'trainstack:secrets.HF_TOKEN' VALUE"),
        ({"WANDB_API_KEY": "k123456"}, "WANDB_API_KEY looks like a secret's name"),
    ],
    ids=lambda value: None,
)
def test_a_job_env_that_is_not_one_a_job_may_have_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: Any, words: str
) -> None:
    config = single_node({"name": "j", "package": "examples/tabular_mlp", "module": "tabular_mlp.task", "env": env})
    err = problems_for(tmp_path, config, capsys)
    [line] = [line for line in err.splitlines() if line.startswith("  ")]
    assert line.startswith("  trainstack:job.env: "), err
    assert words in line, err
    assert "Traceback" not in err
    assert "hf_abcdef" not in err
    assert "k123456" not in err


def test_job_env_may_set_what_tensorflow_and_python_read_for_reporting(tmp_path: Path) -> None:
    env = {"TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "EMPTY": ""}
    config = single_node({"name": "j", "package": "examples/tabular_mlp", "module": "tabular_mlp.task", "env": env})
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 0


def test_a_variable_both_in_job_env_and_a_secret_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = single_node({"name": "j", "image": "trainer:v1", "env": {"EXPERIMENT": "x"}})
    config["trainstack:secrets"] = {"EXPERIMENT": {"secure": "AAABAxyz"}}
    err = problems_for(tmp_path, config, capsys)
    assert "job.env sets EXPERIMENT, which trainstack:secrets sets too" in err, err


# --- Job requirements against what the nodes run --------------------------------------------------
def requirements_job(tmp_path: Path, text: str) -> dict[str, Any]:
    package = probe_package(tmp_path / "code")
    requirements = package / "requirements.txt"
    requirements.write_text(text)
    return {"name": "j", "package": str(package), "module": "probe_pkg.main", "requirements": str(requirements)}


HASH = " --hash=sha256:" + "0" * 64


def node_pin(name: str) -> str:
    for line in (PROJECT_ROOT / "requirements-node.txt").read_text().splitlines():
        if line.split("==")[0].split("[")[0] == name:
            return line.split("==")[1]
    raise AssertionError(name)


def test_a_requirement_that_excludes_the_nodes_tensorflow_is_refused_offline_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: `tensorflow>=1.15,<2` in the job's requirements validated, and failed only at
    `local`, one problem per run."""
    text = (
        f"# the sample's\nnumpy==2.4.6{HASH}\ntensorflow==1.15.5{HASH}  # TF 1\npillow==13.0.0{HASH}\n"
        f"tf_keras==2.15.1 ; sys_platform == 'linux'{HASH}\n"
    )
    err = problems_for(tmp_path, single_node(requirements_job(tmp_path, text)), capsys)
    lines = [line for line in err.splitlines() if line.startswith("  ")]
    tensorflow, keras = node_pin("tensorflow"), node_pin("tf-keras")
    assert lines == [
        f"  trainstack:job.requirements: requirements.txt line 3: tensorflow==1.15.5 excludes tensorflow "
        f"{tensorflow}, which the nodes run (requirements-node.txt): pip would replace it on every node, or fail, "
        f"at boot; drop the requirement or let it allow {tensorflow}",
        f"  trainstack:job.requirements: requirements.txt line 5: tf_keras==2.15.1 ; sys_platform == 'linux' excludes "
        f"tf-keras {keras}, which the nodes run (requirements-node.txt): pip would replace it on every node, or "
        f"fail, at boot; drop the requirement or let it allow {keras}",
    ], err


def test_requirements_the_nodes_already_satisfy_validate(tmp_path: Path) -> None:
    text = (
        f"numpy==2.4.6{HASH}\ntensorflow=={node_pin('tensorflow')}{HASH}\ntf-keras=={node_pin('tf-keras')} \\\n"
        f"    {HASH}\ntensorflow==1.15.5 ; sys_platform == 'win32'{HASH}\n"
    )
    config = single_node(requirements_job(tmp_path, text))
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config))]) == 0


def test_requirements_that_are_not_hash_locked_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: the job's requirements were resolved from the package index at every boot, as root,
    without hashes: a range, or a pin without its hash, validated."""
    text = f"numpy>=1.26{HASH}\ntabulate==0.9.0\nsix==1.17.0{HASH}\n"
    err = problems_for(tmp_path, single_node(requirements_job(tmp_path, text)), capsys)
    lines = [line for line in err.splitlines() if line.startswith("  ")]
    assert len(lines) == 1, err
    assert lines[0].startswith("  trainstack:job.requirements: requirements.txt: line 1 ('numpy>=1.26'), "), err
    assert "line 2 ('tabulate==0.9.0') not pinned to one version with == and a --hash=sha256:..." in lines[0], err
    assert "line 3" not in lines[0]


def test_a_projects_dependency_that_excludes_the_nodes_tensorflow_names_job_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "acme"
    (project / "acme").mkdir(parents=True)
    (project / "acme" / "__init__.py").write_text("")
    (project / "acme" / "task.py").write_text("")
    (project / "pyproject.toml").write_text('[project]\nname = "acme"\ndependencies = ["tensorflow==2.15.1"]\n')
    err = problems_for(tmp_path, single_node({"name": "j", "package": str(project), "module": "acme.task"}), capsys)
    assert (
        "trainstack:job.package: pyproject.toml [project] dependencies: tensorflow==2.15.1 excludes tensorflow "
        f"{node_pin('tensorflow')}"
    ) in err, err


def test_a_tpu_jobs_requirement_is_checked_against_the_tpu_runtimes_tensorflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = yaml.safe_load((PROJECT_ROOT / "stacks" / "Pulumi.tpu.yaml").read_text())["config"]
    config["trainstack:job"] = requirements_job(tmp_path, f"tensorflow=={node_pin('tensorflow')}{HASH}\n")
    err = problems_for(tmp_path, config, capsys)
    runtime = config["trainstack:tpu"]["runtime_version"]
    tensorflow = load_catalog().tpu_runtimes[runtime].tensorflow_version
    assert f"excludes tensorflow {tensorflow}, which the nodes run (the TPU runtime {runtime})" in err, err


# Code as it ran on AI Platform's TensorFlow 2.x runtimes: tf.keras as Keras 2 (RMSprop's `lr`,
# which Keras 3 refuses) and Keras' TensorBoard callback (which needs the tensorboard package).
AI_PLATFORM_KERAS_CODE = """
import os, sys
import numpy as np
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
model.compile(optimizer=tf.keras.optimizers.RMSprop(lr=0.01), loss="mse")
board = tf.keras.callbacks.TensorBoard(log_dir=os.environ["AIP_TENSORBOARD_LOG_DIR"])
model.fit(np.zeros((8, 2)), np.zeros((8, 1)), epochs=1, verbose=0, callbacks=[board])
"""


@pytest.mark.slow
def test_code_written_for_ai_platforms_tensorflow_2_runtime_trains_unchanged_on_a_node(tmp_path: Path) -> None:
    """Defects: tf.keras was Keras 3 on the nodes (RMSprop(lr=...) refused) with no way to set
    TF_USE_LEGACY_KERAS for the job, and the nodes had no TensorBoard for its Keras callback."""
    package = tmp_path / "code" / "keras2_task"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(AI_PLATFORM_KERAS_CODE)
    job = {"name": "keras2", "package": str(package), "module": "keras2_task.task", "env": {"TF_USE_LEGACY_KERAS": "1"}}
    result = run_local(single_node(job), tmp_path)
    assert result.succeeded, "\n".join(result.logs["chief"][-40:])
    assert list((result.job_dir / LAYOUT.log_dir / "train").glob("events.out.tfevents.*"))


# A worker that fails before it joins the cluster, while the chief builds
# MultiWorkerMirroredStrategy: TensorFlow's own barrier would keep the chief waiting an hour.
WORKER_FAILS_AT_START_CODE = """
import json, os, sys
if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "worker":
    sys.exit("this worker cannot start")
import tensorflow as tf
tf.distribute.MultiWorkerMirroredStrategy()
"""


@pytest.mark.slow
def test_a_worker_that_fails_at_start_ends_the_chief_waiting_for_it_and_the_job(tmp_path: Path) -> None:
    """Defect: the chief's code waited in TensorFlow's barrier for an hour, its machine
    billing, after its only worker had recorded FAILED."""
    package = tmp_path / "code" / "fails_task"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(WORKER_FAILS_AT_START_CODE)
    config = yaml.safe_load((PROJECT_ROOT / "stacks" / "Pulumi.ownpackage.yaml").read_text())["config"]
    config["trainstack:job"] = {"name": "fails", "package": str(package), "module": "fails_task.task"}
    # Bounded far below TensorFlow's hour: the chief ends within seconds of the worker's FAILED.
    result = run_local(config, tmp_path)
    worker, chief = result.node_status["worker-0"], result.node_status["chief"]
    assert worker is not None, result.logs
    assert chief is not None, result.logs
    assert (worker["state"], worker["exit_code"]) == (JobState.FAILED, 1)
    assert (chief["state"], chief["reason"]) == (JobState.FAILED, "peer worker-0 recorded FAILED"), chief
    assert result.job_status is not None
    assert result.job_status["state"] == JobState.FAILED


@pytest.mark.parametrize("marker", ["setup.py", "pyproject.toml"])
def test_a_requirements_file_beside_the_package_in_its_own_project_is_accepted_and_no_further_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], marker: str
) -> None:
    """Defect: AI Platform's layout (setup.py and requirements.txt beside the package directory
    --package-path named) was refused as outside the project or the job's package."""
    project = tmp_path / "team" / "census"
    package = probe_package(project)
    (project / marker).write_text("# the team's own project\n")
    locked = (PROJECT_ROOT / "examples" / "team_project" / "requirements.txt").read_text()
    (project / "requirements.txt").write_text(locked)
    (tmp_path / "team" / "requirements.txt").write_text(locked)
    job = {"name": "j", "package": str(package), "module": "probe_pkg.main"}
    path = write_stack(tmp_path, single_node({**job, "requirements": str(project / "requirements.txt")}))
    assert main(["validate", "--stack-file", str(path)]) == 0, capsys.readouterr().err
    # One level beyond the package's own project is as far from it as any other folder.
    above = {**job, "requirements": str(tmp_path / "team" / "requirements.txt")}
    err = problems_for(tmp_path, single_node(above), capsys)
    assert "is outside the project" in err
    assert "and its own project directory" in err


def test_a_packages_parent_without_a_project_file_gives_it_no_requirements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = probe_package(tmp_path / "downloads")
    locked = (PROJECT_ROOT / "examples" / "team_project" / "requirements.txt").read_text()
    (tmp_path / "downloads" / "requirements.txt").write_text(locked)
    job = {"name": "j", "package": str(package), "module": "probe_pkg.main"}
    err = problems_for(
        tmp_path, single_node({**job, "requirements": str(tmp_path / "downloads" / "requirements.txt")}), capsys
    )
    assert "is outside the project" in err
