"""Preparing a package job's code on a node: what pip installs, from where, and how the
code becomes importable, with the pip commands recorded rather than run."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from agent_fakes import BUCKET, MemoryStorage, settings
from trainstack.jobcode.package import load_package, zip_bytes
from trainstack_agent.environment import Environment, Prepared
from trainstack_agent.job import job_command
from trainstack_agent.jobuser import JobUser
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.settings import Artifact, NodeSettings
from trainstack_contract import PATH_INSTALL, PROJECT_INSTALL, TPU_NODE_KIND, requirements_stamp

ARCHIVE = f"{BUCKET}/trainstack/code/keras_team-0123456789abcdef.zip"


class RecordingProcesses:
    """Records each command the environment runs; every one succeeds."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run(self, argv: Sequence[str], timeout: float) -> int:
        self.commands.append(list(argv))
        return 0


def package_job(files: dict[str, bytes], install: str) -> tuple[NodeSettings, MemoryStorage]:
    """A node whose job runs keras_team.task from an archive of ``files`` in the bucket."""
    storage = MemoryStorage()
    storage.objects[ARCHIVE] = zip_bytes(files)
    code = Artifact(ARCHIVE, hashlib.sha256(storage.objects[ARCHIVE]).hexdigest())
    node = settings()
    assert node.job is not None
    return replace(node, job=replace(node.job, code=code, module="keras_team.task", install=install)), storage


def installed_state(tmp_path: Path) -> Path:
    """A state directory whose environment is already installed for the (empty) pinned requirements."""
    state = tmp_path / "state"
    (state / "venv").mkdir(parents=True, exist_ok=True)
    (state / "venv" / ".trainstack-requirements").write_text(requirements_stamp(None) + "\n")
    return state


def prepared(tmp_path: Path, install: str, find_links: Path | None = None) -> tuple[Prepared, RecordingProcesses]:
    node, storage = package_job({"pyproject.toml": b"[project]\n", "keras_team/task.py": b""}, install)
    processes = RecordingProcesses()
    state = installed_state(tmp_path)
    environment = Environment(node, state, storage, processes, lambda line: None, find_links=find_links)  # type: ignore[arg-type]
    return environment.prepare(), processes


def test_a_project_is_installed_with_pip_and_runs_from_the_environment(tmp_path: Path) -> None:
    result, processes = prepared(tmp_path, PROJECT_INSTALL)
    unpacked = tmp_path / "state" / "code" / "keras_team-0123456789abcdef"
    assert (unpacked / "pyproject.toml").is_file()
    [install] = processes.commands
    assert install[1:4] == ["-m", "pip", "install"]
    assert install[-1] == str(unpacked)
    assert result.code_dir is None
    node = settings()
    assert node.job is not None
    node = replace(node, job=replace(node.job, module="keras_team.task", install=PROJECT_INSTALL))
    command = job_command(node, {"PATH": "/bin"}, result.python, result.code_dir, result.state_dir, {})
    assert "PYTHONPATH" not in command.env


def test_a_project_is_installed_once_per_archive(tmp_path: Path) -> None:
    prepared(tmp_path, PROJECT_INSTALL)
    _, again = prepared(tmp_path, PROJECT_INSTALL)
    assert again.commands == [], "a restart after a preemption reuses the installed project"


def test_a_package_directory_goes_on_the_path_and_nothing_is_installed(tmp_path: Path) -> None:
    result, processes = prepared(tmp_path, PATH_INSTALL)
    assert processes.commands == []
    assert result.code_dir == tmp_path / "state" / "code" / "keras_team-0123456789abcdef"


@pytest.mark.parametrize("find_links", [True, False])
def test_pip_uses_the_given_find_links_directory_and_no_index(tmp_path: Path, find_links: bool) -> None:
    links = tmp_path / "links" if find_links else None
    _, processes = prepared(tmp_path, PROJECT_INSTALL, find_links=links)
    [install] = processes.commands
    if find_links:
        assert ["--no-index", "--find-links", str(links)] == install[5:8]
    else:
        assert "--no-index" not in install
        assert "--timeout" in install


# A team's package named `trainer` (with setup.py beside it), laid out as AI Platform's samples are.
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "ai_platform_sample"


class InstallingProcesses(RecordingProcesses):
    """pip's install of a project, as its result: the project's package in the environment's
    site-packages (what pip puts there; building it is pip's business, not the agent's)."""

    def __init__(self, site_packages: Path) -> None:
        super().__init__()
        self.site_packages = site_packages

    def run(self, argv: Sequence[str], timeout: float) -> int:
        if list(argv[1:4]) == ["-m", "pip", "install"]:
            shutil.copytree(Path(argv[-1]) / "trainer", self.site_packages / "trainer")
        return super().run(argv, timeout)


@pytest.mark.parametrize("kind", ["cluster", TPU_NODE_KIND])
@pytest.mark.parametrize(("source", "install"), [("trainer", PATH_INSTALL), (".", PROJECT_INSTALL)])
def test_a_teams_package_named_trainer_is_the_code_that_runs_not_the_built_in_trainer(
    tmp_path: Path, kind: str, source: str, install: str
) -> None:
    """On a cluster VM and on the TPU VM, from the package directory on the path or the project
    installed with pip: the agent runs the team's `trainer.task`, even where trainstack's own
    `trainer` is importable from the environment it starts from (a local run from a checkout
    with PYTHONPATH naming it). Defect: an installed project kept that PYTHONPATH, so the
    built-in trainer ran in its place."""
    from trainstack.base.project import PROJECT_ROOT

    package = load_package(SAMPLE / source, "trainer.task")
    storage = MemoryStorage()
    archive = f"{BUCKET}/{package.object_name}"
    storage.objects[archive] = package.archive
    state = tmp_path / "state"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(state / "venv")], check=True, timeout=120)
    (state / "venv" / ".trainstack-requirements").write_text(requirements_stamp(None) + "\n")
    site_packages = Path(
        subprocess.check_output(
            [str(state / "venv" / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            text=True,
        ).strip()
    )
    node = settings()
    assert node.job is not None
    job = replace(
        node.job,
        code=Artifact(archive, hashlib.sha256(package.archive).hexdigest()),
        module="trainer.task",
        install=install,
        job_dir=str(tmp_path / "job"),
        trainer_args=("--num-epochs", "2"),
    )
    node = replace(node, kind=kind, job=job)
    environment = Environment(node, state, storage, InstallingProcesses(site_packages), lambda line: None)  # type: ignore[arg-type]
    ready = environment.prepare()
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT)}
    assert (PROJECT_ROOT / "trainer" / "task.py").is_file(), "the built-in trainer is importable from there"
    command = job_command(node, base, ready.python, ready.code_dir, ready.state_dir, {})
    output = io.StringIO()
    child = JobLauncher(Processes(Log(output, journal=False))).start(command)
    code = child.child.popen.wait(timeout=120)
    child.child.reader.join(timeout=5)
    assert code == 0, output.getvalue()[-2000:]
    record = json.loads((tmp_path / "job" / "team-trainer" / f"{node.node}.json").read_text())
    assert record["owner"] == "the team's trainer package"
    assert record["num_epochs"] == 2
    assert all(file.startswith(str(state)) for file in record["files"]), record


def test_job_env_is_in_the_codes_environment_and_what_trainstack_sets_wins(tmp_path: Path) -> None:
    node = settings()
    assert node.job is not None
    env = (("TF_USE_LEGACY_KERAS", "1"), ("NODE_NAME", "not-this-node"), ("AIP_MODEL_DIR", "/elsewhere"))
    node = replace(node, job=replace(node.job, env=env))
    command = job_command(node, {"PATH": "/bin"}, tmp_path / "python", tmp_path / "code", tmp_path, {})
    assert command.env["TF_USE_LEGACY_KERAS"] == "1"
    assert command.env["NODE_NAME"] == node.node
    assert command.env["AIP_MODEL_DIR"] == f"{node.job.job_dir}/model"
    assert command.env["TF_CONFIG"] == node.tf_config


@pytest.mark.parametrize("image", [False, True])
def test_every_tuning_trial_gets_its_number_in_tf_config_as_ai_platform_set_it(tmp_path: Path, image: bool) -> None:
    """AI Platform's samples join TF_CONFIG's task.trial to their output directory: without it
    every trial wrote (and each trial's rmtree deleted) one folder, and the best trial's model
    was gone."""
    node = settings()
    assert node.job is not None
    assert node.tf_config is not None
    job = replace(node.job, env=(("CLOUD_ML_TRIAL_ID", "3"),))
    if image:
        job = replace(job, module=None, image="registry.example/team/trainer:v1")
    command = job_command(replace(node, job=job), {"PATH": "/bin"}, tmp_path / "python", None, tmp_path, {})
    cluster_trial = json.loads(command.env["TF_CONFIG"])
    assert cluster_trial == {**json.loads(node.tf_config), "task": {**json.loads(node.tf_config)["task"], "trial": "3"}}
    if image:
        assert command.argv[command.argv.index("TF_CONFIG") - 1] == "--env"
    # A trial on one machine (tune --one-node, a one-node stack): a cluster of that one chief.
    alone = replace(node, job=job, tf_config=None, peers=(), role="chief", index=0)
    one = json.loads(job_command(alone, {}, tmp_path / "python", None, tmp_path, {}).env["TF_CONFIG"])
    assert one["task"] == {"type": "chief", "index": 0, "trial": "3"}
    [address] = one["cluster"]["chief"]
    host, _, port = address.rpartition(":")
    assert host == "localhost"
    assert 0 < int(port) < 65536
    # A job that is no trial keeps the node's TF_CONFIG, or none on one machine.
    assert "TF_CONFIG" not in job_command(replace(alone, job=node.job), {}, tmp_path / "p", None, tmp_path, {}).env


def test_an_images_container_runs_as_the_jobs_user_with_no_capability_while_its_client_stays_root(
    tmp_path: Path,
) -> None:
    node = settings()
    assert node.job is not None
    node = replace(node, job=replace(node.job, module=None, image="registry.example/team/trainer:v1"))
    user = JobUser("trainstack-job", 998, 997, tmp_path / "job-home", tmp_path / "job-work")
    command = job_command(node, {"PATH": "/bin"}, tmp_path / "python", None, tmp_path, {}, user)
    options = list(command.argv[: command.argv.index("registry.example/team/trainer:v1")])
    assert options[options.index("--user") + 1] == "998:997"
    assert options[options.index("--cap-drop") + 1] == "ALL"
    assert options[options.index("--security-opt") + 1] == "no-new-privileges"
    # Docker's socket is root's: the client itself is not started as the job's user.
    assert command.user is None


def test_an_images_job_env_goes_on_its_command_line_never_into_the_docker_clients_environment(
    tmp_path: Path,
) -> None:
    node = settings()
    assert node.job is not None
    env = (("TF_USE_LEGACY_KERAS", "1"), ("DOCKER_HOST", "tcp://elsewhere:2375"))
    node = replace(node, job=replace(node.job, module=None, image="registry.example/team/trainer:v1", env=env))
    command = job_command(node, {"PATH": "/bin"}, tmp_path / "python", None, tmp_path, {})
    assert "DOCKER_HOST" not in command.env
    assert "TF_USE_LEGACY_KERAS" not in command.env
    options = list(command.argv[: command.argv.index("registry.example/team/trainer:v1")])
    for pair in ("TF_USE_LEGACY_KERAS=1", "DOCKER_HOST=tcp://elsewhere:2375"):
        assert options[options.index(pair) - 1] == "--env"


def test_every_preparation_of_a_job_gives_it_a_new_hypertune_report_file_in_the_state_directory(
    tmp_path: Path,
) -> None:
    node, storage = package_job({"keras_team/__init__.py": b"", "keras_team/task.py": b""}, PATH_INSTALL)
    state = installed_state(tmp_path)
    reports = []
    for _ in range(2):
        environment = Environment(node, state, storage, RecordingProcesses(), lambda line: None, job_as_agent_user=True)  # type: ignore[arg-type]
        ready = environment.prepare_for_job_user()
        assert ready.metric_file is not None
        assert ready.metric_file.parent.is_dir()
        ready.metric_file.write_text('{"accuracy": "0.5"}\n')
        reports.append(ready.metric_file)
    assert reports[0] != reports[1]
    assert not reports[0].exists()
    assert all(report.is_relative_to(state / "hypertune") for report in reports)


def test_the_code_is_unpacked_once_while_jobs_run_it_and_replaced_whole_by_other_code(tmp_path: Path) -> None:
    """A standing node's warm interpreter rehearses the job that ended while the next one
    starts: it imports from the ended job's directory. Defect: each job removed and unpacked
    the code again, and the rehearsal found no module there."""
    node, storage = package_job({"keras_team/task.py": b"VERSION = 1\n"}, PATH_INSTALL)
    assert node.job is not None
    assert node.job.code is not None
    environment = Environment(node, installed_state(tmp_path), storage, RecordingProcesses(), lambda line: None)  # type: ignore[arg-type]
    first = environment.code(node.job.code)
    module = first / "keras_team" / "task.py"
    before = module.stat().st_ino
    again = environment.code(node.job.code)
    assert again == first
    assert module.stat().st_ino == before
    # An unpacking stopped halfway (no marker) is done again.
    (first / ".trainstack-unpacked").unlink()
    module.unlink()
    assert environment.code(node.job.code) == first
    assert module.read_text() == "VERSION = 1\n"
    # Other code replaces it whole.
    other_node, other_storage = package_job({"keras_team/task.py": b"VERSION = 2\n"}, PATH_INSTALL)
    assert other_node.job is not None
    assert other_node.job.code is not None
    other = Environment(other_node, tmp_path / "state", other_storage, RecordingProcesses(), lambda line: None)  # type: ignore[arg-type]
    replaced = other.code(other_node.job.code)
    assert (replaced / "keras_team" / "task.py").read_text() == "VERSION = 2\n"
    assert [path.name for path in (tmp_path / "state" / "code").iterdir()] == [replaced.name]
