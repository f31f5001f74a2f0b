"""`python -m trainstack build`: the exact commands, the content tag, and the Dockerfile's pins.

Neither Docker nor gcloud runs here: subprocess.run and shutil.which are replaced, so these
tests check what would be run, not that a registry accepts it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trainstack.commands import build
from trainstack.commands.build import CLOUD_BUILD, DOCKER, build_commands, docker_tag
from trainstack.commands.main import main
from trainstack.jobcode.image import content_tag, context_files
from trainstack.stackmodel.resolved import ResolvedStack, resolve_stack
from trainstack.stackmodel.stackfile import load_stack

REPO = Path(__file__).resolve().parent.parent
MULTIWORKER = REPO / "stacks" / "Pulumi.multiworker.yaml"
REGISTRY = "us-central1-docker.pkg.dev/your-gcp-project/multiworker-images"


@pytest.fixture(scope="module")
def multiworker() -> ResolvedStack:
    return resolve_stack(load_stack(MULTIWORKER, "multiworker")[0])


@pytest.fixture
def no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        pytest.fail(f"subprocess.run was called: {args}")

    monkeypatch.setattr(subprocess, "run", refuse)


def _which(*installed: str) -> Any:
    return lambda tool: f"/usr/bin/{tool}" if tool in installed else None


# --- The commands -----------------------------------------------------------------------
def test_docker_builds_tags_authenticates_then_pushes(multiworker: ResolvedStack) -> None:
    uri = f"{REGISTRY}/trainer:v1"
    assert build_commands(multiworker, "v1", DOCKER) == [
        ["docker", "build", "--file", "Dockerfile", "--tag", uri, "."],
        ["gcloud", "auth", "configure-docker", "us-central1-docker.pkg.dev", "--quiet"],
        ["docker", "push", uri],
    ]


def test_cloud_build_submits_to_the_stack_project_and_region(multiworker: ResolvedStack) -> None:
    assert build_commands(multiworker, "v1", CLOUD_BUILD) == [
        [
            "gcloud",
            "builds",
            "submit",
            "--project",
            "your-gcp-project",
            "--region",
            "us-central1",
            "--tag",
            f"{REGISTRY}/trainer:v1",
            ".",
        ]
    ]


# --- The default tag ----------------------------------------------------------------------
def _copy_context(root: Path) -> Path:
    for path in context_files(REPO):
        target = root / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return root


def test_default_tag_is_stable_and_follows_the_trainer_bytes(tmp_path: Path) -> None:
    root = _copy_context(tmp_path)
    first = content_tag(root)
    assert re.fullmatch(r"[0-9a-f]{16}", first)
    assert content_tag(root) == first
    # The copy is what the real checkout hashes to: the tag depends on content, not location.
    assert content_tag(REPO) == first

    task = root / "trainer" / "task.py"
    task.write_bytes(task.read_bytes() + b"\n")
    changed = content_tag(root)
    assert changed != first

    (root / "Dockerfile").write_bytes((root / "Dockerfile").read_bytes() + b"# another line\n")
    assert content_tag(root) not in (first, changed)


def test_default_tag_changes_when_a_trainer_module_is_added(tmp_path: Path) -> None:
    root = _copy_context(tmp_path)
    before = content_tag(root)
    (root / "trainer" / "extra.py").write_text("")
    assert content_tag(root) != before


def test_the_tag_covers_everything_the_dockerfile_copies() -> None:
    """A COPY of something the hash leaves out would let one tag stand for two images."""
    copied = [line.split()[1:-1] for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("COPY")]
    hashed = {p.relative_to(REPO).as_posix() for p in context_files(REPO)}
    assert copied == [["trainstack_contract/"], ["trainer/"]]
    assert all(name.startswith(("trainer/", "trainstack_contract/")) for name in hashed - {"Dockerfile"})
    assert hashed >= {"Dockerfile", "trainer/task.py", "trainer/__init__.py", "trainstack_contract/__init__.py"}


# --- --tag ----------------------------------------------------------------------------------
@pytest.mark.parametrize("tag", ["v1", "0123abcd", "_x", "release-1.2_rc3", "a" * 128])
def test_docker_tags_are_accepted(tag: str) -> None:
    assert docker_tag(tag) == tag


@pytest.mark.parametrize("bad", ["", "-v1", ".v1", "a" * 129, "a/b", "a:b", "v1\n", "v 1", "é"])
def test_a_bad_tag_exits_2_naming_the_flag(
    bad: str, capsys: pytest.CaptureFixture[str], no_subprocess: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", _which("docker", "gcloud"))
    with pytest.raises(SystemExit) as exit_:
        # --tag=VALUE: a value starting with '-' would otherwise be read as an option.
        main(["build", "--stack", "multiworker", f"--tag={bad}"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--tag" in error
    assert "not a Docker tag" in error


# --- --dry-run ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        (
            "docker",
            [
                f"docker build --file Dockerfile --tag {REGISTRY}/trainer:v1 .",
                "gcloud auth configure-docker us-central1-docker.pkg.dev --quiet",
                f"docker push {REGISTRY}/trainer:v1",
            ],
        ),
        (
            "cloud-build",
            [f"gcloud builds submit --project your-gcp-project --region us-central1 --tag {REGISTRY}/trainer:v1 ."],
        ),
    ],
)
def test_dry_run_prints_the_commands_and_runs_nothing(
    builder: str,
    expected: list[str],
    capsys: pytest.CaptureFixture[str],
    no_subprocess: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No tool installed: a dry run needs none.
    monkeypatch.setattr(shutil, "which", _which())
    assert main(["build", "--stack", "multiworker", "--tag", "v1", "--dry-run", "--builder", builder]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[: len(expected)] == expected
    assert lines[-1] == f"  image: {REGISTRY}/trainer:v1"
    assert "trainstack:job:" in lines[-2]


def test_dry_run_quotes_what_a_shell_would_split(
    monkeypatch: pytest.MonkeyPatch, multiworker: ResolvedStack, capsys: pytest.CaptureFixture[str], no_subprocess: None
) -> None:
    monkeypatch.setattr(build, "image_uri", lambda registry_url, tag: "registry/with space:v1")
    assert build.run_build(multiworker, tag="v1", builder=DOCKER, dry_run=True) == 0
    assert capsys.readouterr().out.splitlines()[0] == "docker build --file Dockerfile --tag 'registry/with space:v1' ."


def test_dry_run_default_tag_is_the_content_hash(
    capsys: pytest.CaptureFixture[str], no_subprocess: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", _which())
    assert main(["build", "--stack-file", str(MULTIWORKER), "--dry-run", "--builder", "cloud-build"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"  image: {REGISTRY}/trainer:{content_tag(REPO)}"


@pytest.mark.parametrize(
    ("installed", "first_command"), [(("docker", "gcloud"), "docker build"), (("gcloud",), "gcloud builds")]
)
def test_default_builder_is_docker_when_installed_else_cloud_build(
    installed: tuple[str, ...],
    first_command: str,
    capsys: pytest.CaptureFixture[str],
    no_subprocess: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", _which(*installed))
    assert main(["build", "--stack", "multiworker", "--tag", "v1", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(first_command + " ")


# --- Running ---------------------------------------------------------------------------------
class _Recorder:
    def __init__(self, codes: Sequence[int]) -> None:
        self.codes = list(codes)
        self.calls: list[tuple[list[str], Path]] = []

    def __call__(self, argv: list[str], *, cwd: Path, check: bool) -> subprocess.CompletedProcess[bytes]:
        assert check is False
        self.calls.append((argv, cwd))
        return subprocess.CompletedProcess(argv, self.codes.pop(0))


def _docker_build(monkeypatch: pytest.MonkeyPatch, codes: Sequence[int], exit_code: int) -> _Recorder:
    """`build --builder docker` of the multiworker stack with docker and gcloud installed, each
    command it runs answering the next of ``codes``; it exits ``exit_code``."""
    recorder = _Recorder(codes)
    monkeypatch.setattr(subprocess, "run", recorder)
    monkeypatch.setattr(shutil, "which", _which("docker", "gcloud"))
    assert main(["build", "--stack", "multiworker", "--tag", "v1", "--builder", "docker"]) == exit_code
    return recorder


def test_runs_each_command_from_the_repository_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = _docker_build(monkeypatch, [0, 0, 0], exit_code=0)
    assert [argv for argv, _ in recorder.calls] == [
        ["/usr/bin/docker", "build", "--file", "Dockerfile", "--tag", f"{REGISTRY}/trainer:v1", "."],
        ["/usr/bin/gcloud", "auth", "configure-docker", "us-central1-docker.pkg.dev", "--quiet"],
        ["/usr/bin/docker", "push", f"{REGISTRY}/trainer:v1"],
    ]
    assert {cwd for _, cwd in recorder.calls} == {REPO}
    assert capsys.readouterr().out.splitlines()[-1] == f"  image: {REGISTRY}/trainer:v1"


def test_stops_at_the_first_failure_with_its_exit_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = _docker_build(monkeypatch, [0, 7, 0], exit_code=7)
    assert len(recorder.calls) == 2
    captured = capsys.readouterr()
    assert "image:" not in captured.out
    [message] = captured.err.splitlines()
    assert "gcloud auth configure-docker us-central1-docker.pkg.dev --quiet" in message
    assert "exit code 7" in message


@pytest.mark.parametrize(
    ("builder", "installed", "message"),
    [
        ("cloud-build", ("docker",), "gcloud not found: install the Google Cloud CLI, or use --builder docker"),
        ("docker", ("gcloud",), "docker not found: install Docker, or use --builder cloud-build"),
        ("docker", ("docker",), "gcloud not found: install the Google Cloud CLI"),
        (None, (), "neither docker nor gcloud found"),
    ],
)
def test_a_missing_tool_is_one_clear_line_and_exit_1(
    builder: str | None,
    installed: tuple[str, ...],
    message: str,
    capsys: pytest.CaptureFixture[str],
    no_subprocess: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", _which(*installed))
    argv = ["build", "--stack", "multiworker", "--tag", "v1"] + (["--builder", builder] if builder else [])
    assert main(argv) == 1
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert message in line
    assert "Traceback" not in captured.err
    assert "image:" not in captured.out


# --- The Dockerfile's pins ----------------------------------------------------------------
def _pins(requirements: str) -> dict[str, str]:
    """name -> version of every `name[extras]==version` line."""
    found = re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", requirements, flags=re.MULTILINE)
    return {name.lower(): version for name, version in found}


def test_the_image_has_the_tensorflow_and_tf_keras_the_vms_install() -> None:
    node = _pins((REPO / "requirements-node.txt").read_text())
    dockerfile = (REPO / "Dockerfile").read_text()
    [base] = re.findall(r"^FROM\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert re.fullmatch(r"tensorflow/tensorflow:(\S+)-gpu(@sha256:[0-9a-f]{64})?", base), base
    assert base.split(":")[1].removesuffix("-gpu").split("@")[0] == node["tensorflow"]
    assert re.findall(r"\btf-keras==(\S+)", dockerfile) == [node["tf-keras"]]


def test_every_node_environment_carries_tensorboard_at_one_version() -> None:
    """Defect: TensorFlow 2.21 stopped installing TensorBoard, and no node environment had it:
    Keras' TensorBoard callback failed on every node. The cluster nodes, `local`'s nodes (this
    project's environment) and the image a team's package runs from on Vertex AI carry it."""
    node = _pins((REPO / "requirements-node.txt").read_text())
    project = _pins((REPO / "requirements.txt").read_text())
    assert "tensorboard" in node
    assert project["tensorboard"] == node["tensorboard"]
    assert re.findall(r"\btensorboard==(\S+)", (REPO / "Dockerfile").read_text()) == [node["tensorboard"]]
    # TensorBoard's release for the TensorFlow the nodes pin.
    assert node["tensorboard"].split(".")[:2] == node["tensorflow"].split(".")[:2]
