"""`trainstack export vertex`: the cluster as a Vertex AI custom job, checked against Vertex AI's
own types (google-cloud-aiplatform), so a field name or an enum the service would refuse fails
here, not at submission."""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import json
import shutil
import subprocess
import sys
import tarfile
from datetime import timedelta
from pathlib import Path, PurePosixPath

import pytest
import yaml
from google.cloud.aiplatform_v1.types import AcceleratorType, CustomJobSpec, WorkerPoolSpec

from stack_helpers import write_stack
from trainstack.catalog import vertex_training_containers
from trainstack.commands.main import main
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack, stack_file_path


def export(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["export", "vertex", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def spec_of(text: str) -> CustomJobSpec:
    """The gcloud YAML as Vertex AI parses it: JSON field names and enum names, nothing unknown."""
    return CustomJobSpec.from_json(json.dumps(yaml.safe_load(text)), ignore_unknown_fields=False)


def stack(name: str):
    return resolve_stack(load_stack(stack_file_path(name), name)[0])


@pytest.mark.parametrize("name", ["multiworker", "paramserver"])
def test_the_gcloud_config_parses_into_vertex_ais_custom_job_spec(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, out, err = export(capsys, "--stack", name)
    assert code == 0, err
    spec = spec_of(out)
    resolved = stack(name)
    assert resolved.cluster is not None
    assert resolved.job is not None
    roles = [node.role for node in resolved.cluster.nodes]
    expected = [(role, roles.count(role)) for role in ("chief", "worker", "ps") if role in roles]
    assert [pool.replica_count for pool in spec.worker_pool_specs] == [count for _, count in expected]
    for pool, (role, _) in zip(spec.worker_pool_specs, expected, strict=True):
        node = next(n for n in resolved.cluster.nodes if n.role == role)
        assert pool.machine_spec.machine_type == node.machine_type
        if node.accelerator is None:
            assert pool.machine_spec.accelerator_type == AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED
        else:
            assert (
                pool.machine_spec.accelerator_type == AcceleratorType[node.accelerator.type.upper().replace("-", "_")]
            )
            assert pool.machine_spec.accelerator_count == node.accelerator.count
        assert pool.container_spec.image_uri.startswith(resolved.registry_url + "/trainer:")
        assert list(pool.container_spec.args[-2:]) == ["--job-dir", resolved.job.job_dir]
        assert f"--strategy {resolved.cluster.strategy}" in " ".join(pool.container_spec.args)
    assert spec.base_output_directory.output_uri_prefix == resolved.job.job_dir
    assert spec.scheduling.timeout.total_seconds() == resolved.cluster.max_run_seconds


def test_the_paramserver_pools_are_chief_workers_then_parameter_servers(capsys: pytest.CaptureFixture[str]) -> None:
    spec = spec_of(export(capsys, "--stack", "paramserver")[1])
    chief, workers, servers = spec.worker_pool_specs
    assert (chief.replica_count, workers.replica_count, servers.replica_count) == (1, 2, 1)
    assert workers.machine_spec.accelerator_type == AcceleratorType.NVIDIA_TESLA_T4
    assert servers.machine_spec.machine_type == "n1-highmem-8"
    assert servers.machine_spec.accelerator_count == 0


def python_pools(snippet: str) -> list[dict]:
    tree = ast.parse(snippet)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "WORKER_POOL_SPECS":
            return ast.literal_eval(node.value)
    raise AssertionError("no WORKER_POOL_SPECS in the snippet")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["multiworker", "paramserver", "ownpackage"])
def test_the_python_snippet_builds_the_same_pools_with_the_sdk(capsys: pytest.CaptureFixture[str], name: str) -> None:
    pools = spec_of(export(capsys, "--stack", name)[1]).worker_pool_specs
    code, snippet, err = export(capsys, "--stack", name, "--format", "python")
    assert code == 0, err
    assert [WorkerPoolSpec(**pool) for pool in python_pools(snippet)] == list(pools)
    from google.cloud import aiplatform

    # The calls the snippet makes exist with these keywords in the pinned SDK.
    assert {"display_name", "worker_pool_specs", "base_output_dir"} <= set(
        inspect.signature(aiplatform.CustomJob).parameters
    )
    assert {"service_account", "timeout"} <= set(inspect.signature(aiplatform.CustomJob.run).parameters)
    compile(snippet, "job.py", "exec")


def test_a_teams_package_runs_on_the_stacks_own_image_not_a_container_past_its_end_of_availability(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Defect: a package job was put on Google's prebuilt tf-gpu.2-17 container, past its end
    of availability (2026-07-11)."""
    code, out, err = export(capsys, "--stack", "ownpackage", "--sdist-dir", str(tmp_path / "dist"))
    assert code == 0, err
    pools = spec_of(out).worker_pool_specs
    resolved = stack("ownpackage")
    assert resolved.job is not None
    assert resolved.job.package is not None
    expired = {c.uri for c in vertex_training_containers()}
    for pool in pools:
        container = pool.container_spec
        assert container.image_uri.startswith(resolved.registry_url + "/trainer:")
        assert container.image_uri not in expired
        assert not pool.python_package_spec.executor_image_uri
        assert list(container.command[:2]) == ["sh", "-c"]
        assert list(container.args[1:2]) == [resolved.job.package.module]
        assert list(container.args[-2:]) == ["--job-dir", resolved.job.job_dir]
    assert "past their end of availability" in err
    assert "trainstack build --stack ownpackage" in err
    # The source distribution the spec names is the one built; the replicas read it through
    # Vertex AI's Cloud Storage mount.
    mounted = pools[0].container_spec.args[0]
    uri = "gs://" + mounted.removeprefix("/gcs/")
    assert uri.startswith(f"gs://{resolved.bucket_name}/trainstack/code/vertex/")
    built = tmp_path / "dist" / uri.rsplit("/", 1)[1]
    assert built.is_file()
    assert f"gcloud storage cp {built} {uri}" in err
    with tarfile.open(built) as archive:
        names = archive.getnames()
    assert any(name.endswith("/pyproject.toml") for name in names)
    assert any(name.endswith("/tabular_mlp/task.py") for name in names)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(built)],
        check=True, timeout=300,
    )  # fmt: skip
    assert (target / "tabular_mlp" / "task.py").is_file()


def test_the_replicas_command_installs_the_package_then_runs_its_module_with_every_argument(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The container's command, run as the replica would with a `python` that records its
    calls: values (a path with a space, an argument with a quote) reach it as they are."""
    container = spec_of(export(capsys, "--stack", "ownpackage")[1]).worker_pool_specs[0].container_spec
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "calls"
    (stubs / "python").write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {calls}\necho >> {calls}\n')
    (stubs / "python").chmod(0o755)
    args = ["/gcs/b b/x.tar.gz", "tabular_mlp.task", "--note", "it's $(here)", "--job-dir", "gs://b/jobs/x"]
    completed = subprocess.run(
        [*container.command, *args],
        env={"PATH": f"{stubs}:/usr/bin:/bin", "TMPDIR": str(tmp_path)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert calls.read_text().splitlines() == [
        "-m|pip|install|--quiet|--user|/gcs/b b/x.tar.gz|",
        "-m|tabular_mlp.task|--note|it's $(here)|--job-dir|gs://b/jobs/x|",
    ]


def test_a_prebuilt_container_is_used_only_while_it_is_available() -> None:
    from trainstack.interop.vertex import code_spec

    resolved = stack("ownpackage")
    [gpu] = [c for c in vertex_training_containers() if c.accelerator == "gpu"]
    notes: list[str] = []
    key, spec = code_spec(resolved, None, notes, today=gpu.available_until)
    assert (key, spec["executorImageUri"]) == ("pythonPackageSpec", gpu.uri)
    key, spec = code_spec(resolved, None, notes, today=gpu.available_until + timedelta(days=1))
    assert key == "containerSpec"
    assert spec["imageUri"].startswith(resolved.registry_url)


def test_round_trip_import_of_the_export_gives_the_same_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("multiworker", "paramserver"):
        job_file = tmp_path / f"{name}.json"
        job_file.write_text(json.dumps(yaml.safe_load(export(capsys, "--stack", name, "--format", "json")[1])))
        out = tmp_path / f"Pulumi.{name}-again.yaml"
        code = main(["import", str(job_file), "--stack", f"{name}-again", "--out", str(out), "--zone", "us-central1-a"])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        assert "--job-dir" in printed.out, "the exported --job-dir is left to the new stack"
        original, again = stack(name), resolve_stack(load_stack(out)[0])
        assert original.cluster is not None
        assert again.cluster is not None

        def shape(resolved):
            return [(n.role, n.machine_type, n.accelerator) for n in resolved.cluster.nodes]

        assert shape(again) == shape(original)
        assert again.cluster.strategy == original.cluster.strategy


def cluster_stack(tmp_path: Path, cluster: dict) -> Path:
    config = {"gcp:project": "team-proj-1", "gcp:region": "us-central1", "trainstack:zone": "us-central1-a",
              "trainstack:cluster": cluster, "trainstack:job": {"name": "x"}}  # fmt: skip
    return write_stack(tmp_path, config, stack="x")


def test_multi_worker_mirrored_with_other_gpus_on_the_workers_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = cluster_stack(
        tmp_path,
        {
            "strategy": "multi_worker_mirrored",
            "chief": {"machine_type": "n1-standard-8", "accelerator": {"type": "nvidia-tesla-t4", "count": 1}},
            "workers": {
                "count": 1,
                "machine_type": "n1-standard-8",
                "accelerator": {"type": "nvidia-tesla-v100", "count": 1},
            },
        },
    )
    code, out, err = export(capsys, "--stack-file", str(path))
    assert code == 1
    assert out == ""
    assert "multi_worker_mirrored needs the same GPUs in every pool" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("name", "words"), [("tpu", "has a TPU VM"), ("notebook", "has no cluster")])
def test_stacks_without_a_cluster_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], name: str, words: str
) -> None:
    code, out, err = export(capsys, "--stack", name)
    assert code == 1
    assert words in err
    assert out == ""


def test_an_all_spot_cluster_runs_on_spot_and_a_mixed_one_says_why_not(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    node = {"machine_type": "n1-standard-8", "accelerator": {"type": "nvidia-tesla-t4", "count": 1}, "spot": True}
    path = cluster_stack(tmp_path, {"chief": copy.deepcopy(node), "workers": {"count": 2, **copy.deepcopy(node)}})
    code, out, err = export(capsys, "--stack-file", str(path))
    assert code == 0, err
    assert spec_of(out).scheduling.strategy.name == "SPOT"
    code, out, err = export(capsys, "--stack", "multiworker")
    assert spec_of(out).scheduling.strategy.name == "STRATEGY_UNSPECIFIED"
    assert "some nodes are Spot, so the job is on demand" in err


def test_the_source_distribution_is_built_without_running_the_teams_code(tmp_path: Path) -> None:
    """Defect: a team package named `setuptools` was imported by the build in place of
    setuptools (the build ran from the staging directory), so exporting ran the team's code."""
    from trainstack.jobcode.package import CodePackage
    from trainstack.jobcode.sdist import build_sdist

    marker = tmp_path / "ran"
    source = tmp_path / "team" / "setuptools"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('the team code ran')\n")
    (source / "build_meta.py").write_text(f"open({str(marker)!r}, 'w').write('the team code ran')\n")
    (source / "task.py").write_text("print('train')\n")
    package = CodePackage(
        source=source,
        module="setuptools.task",
        members={f"setuptools/{f.name}": f for f in sorted(source.iterdir())},
        digest="0123456789abcdef",
    )
    out = tmp_path / "dist"
    built = build_sdist(package, None, out)
    assert not marker.exists(), marker.read_text()
    assert built.parent == out
    assert built.is_file()
    # Only the archive lands in the output directory.
    assert [p.name for p in out.iterdir()] == [built.name]


# A team's setup.cfg that names a command class of its own for `sdist`: setuptools imports
# trainer.evil to build the archive.
EVIL_SETUP_CFG = "[metadata]\nname = team\n\n[options]\npackages = find:\ncmdclass =\n    sdist = trainer.evil.Sdist\n"


def test_exporting_a_package_whose_setup_cfg_names_a_command_class_runs_none_of_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: a directory layout shipping setup.cfg with `cmdclass = sdist = trainer.evil.Sdist`
    had setuptools import the team's module during `export vertex --sdist-dir` (-I did not stop it)."""
    marker = tmp_path / "ran"
    code = tmp_path / "code"
    (code / "trainer" / "data").mkdir(parents=True)
    (code / "setup.cfg").write_text(EVIL_SETUP_CFG)
    (code / "trainer" / "__init__.py").write_text("")
    (code / "trainer" / "task.py").write_text("print('train')\n")
    (code / "trainer" / "data" / "rows.csv").write_text("1,2\n")
    (code / "trainer" / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('the team code ran')\nfrom setuptools.command.sdist import sdist as Sdist\n"
    )
    config = yaml.safe_load(stack_file_path("ownpackage").read_text())
    config["config"]["trainstack:job"] = {"name": "team", "package": str(code), "module": "trainer.task"}
    path = tmp_path / "Pulumi.team.yaml"
    path.write_text(yaml.safe_dump(config))
    status, _, err = export(capsys, "--stack-file", str(path), "--sdist-dir", str(tmp_path / "dist"))
    assert status == 0, err
    assert not marker.exists(), marker.read_text()
    [built] = (tmp_path / "dist").iterdir()
    with tarfile.open(built) as archive:
        top = built.name.removesuffix(".tar.gz")
        names = set(archive.getnames())
        pyproject = archive.extractfile(f"{top}/pyproject.toml")
        assert pyproject is not None
        assert b"cmdclass" not in pyproject.read()
    # The package's files and data are there; the team's build configuration is not.
    assert {f"{top}/PKG-INFO", f"{top}/trainer/task.py", f"{top}/trainer/data/rows.csv"} <= names
    assert f"{top}/setup.cfg" not in names


def test_a_stack_with_secrets_says_they_are_not_in_the_vertex_job(capsys: pytest.CaptureFixture[str]) -> None:
    """Defect: export vertex dropped trainstack:secrets without a word."""
    from trainstack.interop.vertex import custom_job_spec

    resolved = stack("multiworker")
    assert resolved.job is not None
    job = dataclasses.replace(resolved.job, secrets=(("WANDB_API_KEY", "multiworker-WANDB_API_KEY"),))
    with_secrets = dataclasses.replace(resolved, job=job)
    _, notes = custom_job_spec(with_secrets)
    said = [note for note in notes if "trainstack:secrets" in note]
    assert len(said) == 1
    assert "WANDB_API_KEY" in said[0]
    assert "multiworker-WANDB_API_KEY" in said[0]
    assert "Secret Manager" in said[0]


def test_a_directory_layouts_source_distribution_holds_every_package_it_ships(tmp_path: Path) -> None:
    """A directory holding the module's package and a sibling the module imports: both install."""
    from trainstack.jobcode.package import load_package
    from trainstack.jobcode.sdist import build_sdist

    for name in ("trainer", "helpers"):
        (tmp_path / "code" / name).mkdir(parents=True)
        (tmp_path / "code" / name / "__init__.py").write_text("")
    (tmp_path / "code" / "trainer" / "task.py").write_text("import helpers\n")
    built = build_sdist(load_package(tmp_path / "code", "trainer.task"), None, tmp_path / "dist")
    with tarfile.open(built) as archive:
        shipped = {
            PurePosixPath(name).relative_to(PurePosixPath(name).parts[0]).as_posix() for name in archive.getnames()
        }
    assert {"trainer/task.py", "helpers/__init__.py"} <= shipped


def test_the_source_distribution_holds_the_data_files_the_package_ships(tmp_path: Path) -> None:
    """An AI Platform sample reads a CSV from a folder beside its modules (trainer/data/): the
    sdist held only the modules, and on Vertex AI the sample failed with FileNotFoundError."""
    from trainstack.jobcode.package import load_package
    from trainstack.jobcode.sdist import build_sdist

    package = tmp_path / "trainer"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("")
    (package / "data" / "adult.data.csv").write_text("39,State-gov,77516\n")
    built = build_sdist(load_package(package, "trainer.task"), None, tmp_path / "dist")
    with tarfile.open(built) as archive:
        shipped = {
            PurePosixPath(name).relative_to(PurePosixPath(name).parts[0]).as_posix() for name in archive.getnames()
        }
    assert {"trainer/task.py", "trainer/data/adult.data.csv"} <= shipped


def test_a_project_is_built_by_its_own_backend_not_by_trainstack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainstack.base.project import PROJECT_ROOT

    config = yaml.safe_load((PROJECT_ROOT / "stacks" / "Pulumi.ownpackage.yaml").read_text())
    config["config"]["trainstack:job"].update(package="examples/team_project", module="keras_team.task")
    path = tmp_path / "Pulumi.proj.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["export", "vertex", "--stack-file", str(path), "--sdist-dir", str(tmp_path / "dist")]) == 1
    assert "python -m build --sdist examples/team_project" in capsys.readouterr().err
    assert not (tmp_path / "dist").exists()


# A team's package named `trainer`, laid out as Google's AI Platform samples are.
SAMPLE = Path(__file__).resolve().parent / "fixtures" / "ai_platform_sample"
# The replica's `python` on this machine: pip's --user install goes into USER_SITE, offline (the
# build backend is here already); every other call runs with USER_SITE on its path. Like the
# user site-packages, it comes after the working directory, which `python -m` puts first.
REPLICA_PYTHON = """#!{python}
import os, sys
user_site = os.environ["USER_SITE"]
argv = sys.argv[1:]
if argv[:3] == ["-m", "pip", "install"] and "--user" in argv:
    argv.remove("--user")
    argv[3:3] = ["--target", user_site, "--no-deps", "--no-build-isolation", "--no-index"]
else:
    os.environ["PYTHONPATH"] = user_site
os.execv(sys.executable, [sys.executable, *argv])
"""


def image_layout(root: Path) -> Path:
    """The trainer image's working directory, laid out from the Dockerfile's WORKDIR and COPY
    lines with this checkout's files; returns it."""
    from trainstack.base.project import PROJECT_ROOT

    workdir = root
    for line in (PROJECT_ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["WORKDIR"]:
            workdir = root / words[1].lstrip("/")
            workdir.mkdir(parents=True)
        elif words[:1] == ["COPY"]:
            source, destination = words[1], words[2]
            shutil.copytree(PROJECT_ROOT / source, workdir / destination)
    assert (workdir / "trainer" / "task.py").is_file(), "the image holds the built-in trainer"
    return workdir


def test_a_teams_package_named_trainer_runs_on_vertex_not_the_built_in_trainer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Defect: the replica ran `python -m trainer.task` from the image's working directory,
    which holds trainstack's own `trainer/`: the built-in trainer ran in place of the team's
    installed package and stopped at its usage error (--data required)."""
    config = yaml.safe_load((stack_file_path("ownpackage")).read_text())
    config["config"]["trainstack:job"] = {
        "name": "sample",
        "package": str(SAMPLE / "trainer"),
        "module": "trainer.task",
        "args": ["--num-epochs", "3"],
    }
    path = tmp_path / "Pulumi.sample.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = export(capsys, "--stack-file", str(path), "--sdist-dir", str(tmp_path / "dist"))
    assert code == 0, err
    container = spec_of(out).worker_pool_specs[0].container_spec
    [sdist] = (tmp_path / "dist").iterdir()
    mounted, *args = container.args
    assert mounted.endswith("/" + sdist.name)
    assert args[0] == "trainer.task"
    # The job directory as a local one: the replica's code would write to gs:// through TensorFlow.
    job_dir = tmp_path / "job"
    args[args.index("--job-dir") + 1] = str(job_dir)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "python").write_text(REPLICA_PYTHON.format(python=sys.executable))
    (stubs / "python").chmod(0o755)
    completed = subprocess.run(
        [*container.command, str(sdist), *args],
        cwd=image_layout(tmp_path / "image"),
        env={"PATH": f"{stubs}:/usr/bin:/bin", "USER_SITE": str(tmp_path / "user-site"), "TMPDIR": str(tmp_path)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    record = json.loads((job_dir / "team-trainer" / "replica.json").read_text())
    assert record["owner"] == "the team's trainer package"
    assert record["num_epochs"] == 3
    assert all(file.startswith(str(tmp_path / "user-site" / "trainer")) for file in record["files"]), record


def env_stack(tmp_path: Path, job: dict) -> Path:
    node = {"machine_type": "n1-standard-8", "accelerator": {"type": "nvidia-tesla-t4", "count": 1}}
    cluster = {"chief": copy.deepcopy(node), "workers": {"count": 2, **copy.deepcopy(node)}, "max_run_hours": 2.5}
    path = cluster_stack(tmp_path, cluster)
    document = yaml.safe_load(path.read_text())
    document["config"]["trainstack:job"] = job
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize(
    "job",
    [
        {"name": "x", "image": "trainer:v1"},
        {"name": "x", "package": "examples/tabular_mlp", "module": "tabular_mlp.task"},
    ],
    ids=["image", "package"],
)
def test_job_env_is_every_pools_container_env(capsys: pytest.CaptureFixture[str], tmp_path: Path, job: dict) -> None:
    env = {"TF_USE_LEGACY_KERAS": "1", "TEAM_SETTING": "a b"}
    path = env_stack(tmp_path, {**job, "env": env})
    code, out, err = export(capsys, "--stack-file", str(path))
    assert code == 0, err
    for pool in spec_of(out).worker_pool_specs:
        variables = pool.container_spec.env or pool.python_package_spec.env
        assert {variable.name: variable.value for variable in variables} == env
    code, snippet, err = export(capsys, "--stack-file", str(path), "--format", "python")
    assert code == 0, err
    assert [WorkerPoolSpec(**pool) for pool in python_pools(snippet)] == list(spec_of(out).worker_pool_specs)


def test_round_trip_import_of_the_export_keeps_job_env_and_the_run_time_cap(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = env_stack(tmp_path, {"name": "x", "image": "trainer:v1", "env": {"TF_USE_LEGACY_KERAS": "1"}})
    job_file = tmp_path / "job.json"
    job_file.write_text(export(capsys, "--stack-file", str(path), "--format", "json")[1])
    out = tmp_path / "Pulumi.again.yaml"
    code = main(["import", str(job_file), "--stack", "again", "--out", str(out), "--zone", "us-central1-a"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    again = load_stack(out)[0].settings
    assert again.job is not None
    assert again.job.env == {"TF_USE_LEGACY_KERAS": "1"}
    assert again.cluster is not None
    assert again.cluster.max_run_hours == 2.5
    assert "scheduling.timeout 9000s is cluster.max_run_hours 2.5" in printed.out


@pytest.mark.parametrize("reference", [":v1", "@sha256:" + "e" * 64])
def test_an_image_by_tag_is_exported_as_given_and_said_to_be_unpinned(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, reference: str
) -> None:
    image = f"us-central1-docker.pkg.dev/test-project-123/team/trainer{reference}"
    code, out, err = export(capsys, "--stack-file", str(env_stack(tmp_path, {"name": "x", "image": image})))
    assert code == 0, err
    assert {pool.container_spec.image_uri for pool in spec_of(out).worker_pool_specs} == {image}
    said = [line for line in err.splitlines() if "named by tag" in line]
    assert len(said) == (1 if reference == ":v1" else 0), err
    assert not said or ("NAME@sha256:" in said[0] and "trainstack:job.image" in said[0])


# --- --tune-spec: the study as a Vertex AI HyperparameterTuningJob -----------------------------
TUNE_SPEC = """\
trainingInput:
  hyperparameters:
    goal: MINIMIZE
    maxTrials: 12
    maxParallelTrials: 3
    maxFailedTrials: 2
    enableTrialEarlyStopping: true
    hyperparameterMetricTag: val_loss
    algorithm: RANDOM_SEARCH
    params:
    - {parameterName: batch-size, type: INTEGER, minValue: 8, maxValue: 256, scaleType: UNIT_LINEAR_SCALE}
    - {parameterName: learning-rate, type: DOUBLE, minValue: 1e-4, maxValue: 0.1, scaleType: UNIT_LOG_SCALE}
    - {parameterName: optimizer, type: CATEGORICAL, categoricalValues: [adam, sgd]}
    - {parameterName: units, type: DISCRETE, discreteValues: [32, 64, 128]}
    - {parameterName: dropout, type: DOUBLE, minValue: 0, maxValue: 0.5}
"""


@pytest.fixture
def tune_spec(tmp_path: Path) -> Path:
    """TUNE_SPEC in a file, as a team keeps it beside its package."""
    path = tmp_path / "hptuning_config.yaml"
    path.write_text(TUNE_SPEC)
    return path


def tuning_job_of(text: str):
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob

    return HyperparameterTuningJob.from_json(json.dumps(yaml.safe_load(text)), ignore_unknown_fields=False)


def test_a_tune_spec_exports_a_hyperparameter_tuning_job_vertex_ai_parses(
    capsys: pytest.CaptureFixture[str], tune_spec: Path
) -> None:
    from google.cloud.aiplatform_v1.types import StudySpec

    spec_file = tune_spec
    code, out, err = export(capsys, "--stack", "paramserver", "--tune-spec", str(spec_file))
    assert code == 0, err
    job = tuning_job_of(out)
    assert (job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count) == (12, 3, 2)
    study = job.study_spec
    (metric,) = study.metrics
    assert (metric.metric_id, metric.goal) == ("val_loss", StudySpec.MetricSpec.GoalType.MINIMIZE)
    assert study.algorithm == StudySpec.Algorithm.RANDOM_SEARCH
    assert study.measurement_selection_type == StudySpec.MeasurementSelectionType.LAST_MEASUREMENT
    # enableTrialEarlyStopping: the median rule, by step.
    assert StudySpec.pb(study).WhichOneof("automated_stopping_spec") == "median_automated_stopping_spec"
    assert study.median_automated_stopping_spec.use_elapsed_duration is False
    batch, rate, optimizer, units, dropout = study.parameters
    scale = StudySpec.ParameterSpec.ScaleType
    assert batch.parameter_id == "batch-size"
    assert batch.scale_type == scale.UNIT_LINEAR_SCALE
    assert (batch.integer_value_spec.min_value, batch.integer_value_spec.max_value) == (8, 256)
    assert rate.scale_type == scale.UNIT_LOG_SCALE
    assert (rate.double_value_spec.min_value, rate.double_value_spec.max_value) == (0.0001, 0.1)
    assert list(optimizer.categorical_value_spec.values) == ["adam", "sgd"]
    assert list(units.discrete_value_spec.values) == [32.0, 64.0, 128.0]
    # AI Platform's NONE is Vertex AI's unspecified scale: no scaling.
    assert dropout.scale_type == scale.SCALE_TYPE_UNSPECIFIED
    # The trials run the custom job `export vertex` prints without --tune-spec.
    assert type(job.trial_job_spec).to_json(job.trial_job_spec) == CustomJobSpec.to_json(
        spec_of(export(capsys, "--stack", "paramserver")[1])
    )


def test_the_tuning_jobs_json_is_the_rest_apis_own_spelling(
    capsys: pytest.CaptureFixture[str], tune_spec: Path
) -> None:
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob

    spec_file = tune_spec
    code, out, err = export(capsys, "--stack", "multiworker", "--tune-spec", str(spec_file), "--format", "json")
    assert code == 0, err
    written = json.loads(out)
    # What the client library writes for the same job (int64 as strings, enums by name), less the
    # fields it writes out at their defaults.
    library = json.loads(
        HyperparameterTuningJob.to_json(
            tuning_job_of(out), always_print_fields_with_no_presence=False, use_integers_for_enums=False
        )
    )
    assert written["studySpec"]["parameters"][:4] == library["studySpec"]["parameters"][:4]
    # A bound of 0 is written, though the library leaves a proto3 default out: minValue is required.
    assert written["studySpec"]["parameters"][4] == {
        "parameterId": "dropout",
        "doubleValueSpec": {"minValue": 0.0, "maxValue": 0.5},
    }
    assert written["studySpec"]["parameters"][0]["integerValueSpec"] == {"minValue": "8", "maxValue": "256"}
    assert "scaleType" not in written["studySpec"]["parameters"][4]
    assert written["displayName"] == library["displayName"] == "multiworker-flowers_mwms"


def test_one_node_trials_export_as_one_machine_each_with_the_machines_own_strategy(
    capsys: pytest.CaptureFixture[str], tune_spec: Path
) -> None:
    spec_file = tune_spec
    code, out, err = export(capsys, "--stack", "multiworker", "--tune-spec", str(spec_file), "--one-node")
    assert code == 0, err
    job = tuning_job_of(out)
    (pool,) = job.trial_job_spec.worker_pool_specs
    whole = spec_of(export(capsys, "--stack", "multiworker")[1])
    assert pool.replica_count == 1
    assert pool.machine_spec == whole.worker_pool_specs[0].machine_spec
    args = list(pool.container_spec.args)
    assert args[args.index("--strategy") + 1] == "auto"
    assert list(whole.worker_pool_specs[0].container_spec.args)[args.index("--strategy") + 1] == "multi_worker_mirrored"
    assert "each trial runs on one machine, the chief's" in err
    assert job.parallel_trial_count == 3


def test_one_node_trials_are_refused_on_parameter_servers_and_without_a_tune_spec(
    capsys: pytest.CaptureFixture[str], tune_spec: Path
) -> None:
    spec_file = tune_spec
    code, out, err = export(capsys, "--stack", "paramserver", "--tune-spec", str(spec_file), "--one-node")
    assert (code, out) == (1, "")
    assert err.startswith("trainstack: export vertex: --one-node: stack paramserver trains with parameter servers")
    code, out, err = export(capsys, "--stack", "multiworker", "--one-node")
    assert (code, out) == (2, "")
    assert err == "trainstack: export vertex: --one-node is for a study's trials: give --tune-spec FILE\n"


def test_a_default_spec_is_bayesian_on_both_services_and_lets_vertex_decide_failures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from google.cloud.aiplatform_v1.types import StudySpec

    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        "goal: MAXIMIZE\nparams:\n- {parameterName: lr, type: DOUBLE, minValue: 0.01, maxValue: 0.1}\n"
    )
    code, out, err = export(capsys, "--stack", "paramserver", "--tune-spec", str(spec_file))
    assert code == 0, err
    job = tuning_job_of(out)
    assert job.study_spec.algorithm == StudySpec.Algorithm.ALGORITHM_UNSPECIFIED
    assert StudySpec.pb(job.study_spec).WhichOneof("automated_stopping_spec") is None
    assert (job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count) == (1, 1, 0)
    assert job.study_spec.metrics[0].metric_id == "training/hptuning/metric"
    assert "maxFailedTrialCount 0: Vertex AI decides" in err
    assert "gcloud ai hp-tuning-jobs create" in out.splitlines()[1]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("goal: MAXIMIZE\nparams: []\n", "hyperparameters.params: give 1 to 32 parameters"),
        (
            "goal: MAXIMIZE\nparams:\n- {parameterName: lr, type: DOUBLE, minValue: 1, maxValue: 0.1}\n",
            "hyperparameters.params[0]: minValue 1 is not below maxValue 0.1",
        ),
        ("goal: MAXIMIZE\nmaxTrials: 5000\nparams: []\n", "hyperparameters.maxTrials: 5000 is outside 1 to 1000"),
    ],
)
def test_a_bad_tune_spec_is_one_line_per_problem_and_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, line: str
) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(text)
    code, out, err = export(capsys, "--stack", "paramserver", "--tune-spec", str(spec_file))
    assert code == 1
    assert out == ""
    assert any(
        problem.startswith(f"trainstack: export vertex --tune-spec: {spec_file}: {line}")
        for problem in err.splitlines()
    )
    assert all(problem.startswith("trainstack: export vertex --tune-spec: ") for problem in err.splitlines())


def test_a_missing_tune_spec_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = export(capsys, "--stack", "paramserver", "--tune-spec", str(tmp_path / "none.yaml"))
    assert (code, out) == (1, "")
    assert err == f"trainstack: export vertex --tune-spec: {tmp_path / 'none.yaml'}: no such file\n"


def test_a_tune_spec_with_the_sdk_snippet_format_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(TUNE_SPEC)
    code, out, err = export(capsys, "--stack", "paramserver", "--tune-spec", str(spec_file), "--format", "python")
    assert (code, out) == (2, "")
    assert err == "trainstack: --tune-spec: --format gcloud or json (the SDK snippet is a custom job)\n"


def test_an_a3_ultra_stack_keeps_its_hyperdisk_boot_disk_on_vertex(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A3 Ultra cannot boot from Persistent Disk: rewritten to pd-ssd, the exported job failed at
    creation. Vertex AI's DiskSpec takes hyperdisk-balanced (its default for A3 Ultra)."""
    path = cluster_stack(tmp_path, {"chief": {"machine_type": "a3-ultragpu-8g", "spot": True}})
    config = yaml.safe_load(path.read_text())
    config["config"]["trainstack:zone"] = "us-central1-b"
    path.write_text(yaml.safe_dump(config))
    code, out, err = export(capsys, "--stack-file", str(path))
    assert code == 0, err
    [pool] = spec_of(out).worker_pool_specs
    assert pool.disk_spec.boot_disk_type == "hyperdisk-balanced"
    assert "becomes pd-ssd" not in err
