"""A team's requirements file as AI Platform took it (``numpy>=1.14``, ``cloudml-hypertune``):
trainstack locks it for the nodes, once, against the node environment's own lock, keeps the
lock by the file's digest, uploads the lock and shows it in `plan`; offline with no kept lock,
one line says why. The index here is a folder of wheels made by the test (uv's find-links),
so what the lock must pick is known: the newest a requirement allows, except where the nodes
pin a version."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from wheel_index import node_pins, wheel

from stack_helpers import base_config, write_stack
from trainstack.commands.main import main
from trainstack.jobcode import requirements_lock

CENSUS_REQUIREMENTS = "numpy>=1.14\npandas>=0.22\nsix>=1.11\n"


@pytest.fixture
def index(wheel_index: Path) -> Path:
    """The test's own package index (conftest: offline, and each test's locks its own)."""
    return wheel_index


def team_stack(tmp_path: Path, requirements: str, **job: Any) -> Path:
    """A stack running a team's package laid out as AI Platform's were: trainer/ beside
    setup.py and requirements.txt."""
    project = tmp_path / "team"
    (project / "trainer").mkdir(parents=True)
    (project / "trainer" / "__init__.py").write_text("")
    (project / "trainer" / "task.py").write_text("print('trained')\n")
    (project / "setup.py").write_text("from setuptools import setup\nsetup(name='trainer', packages=['trainer'])\n")
    (project / "requirements.txt").write_text(requirements)
    config = base_config()
    config["trainstack:job"] = {
        "name": "census",
        "package": str(project / "trainer"),
        "module": "trainer.task",
        "requirements": str(project / "requirements.txt"),
        **job,
    }
    return write_stack(tmp_path, config)


def plan_json(stack_file: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["plan", "--stack-file", str(stack_file), "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def requirements_artifact(plan: dict[str, Any]) -> dict[str, Any]:
    [entry] = [e for e in plan["executed_artifacts"] if e["artifact"] == "job requirements"]
    return dict(entry)


def test_censuss_own_requirements_validate_and_the_plan_shows_their_lock(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    numpy = node_pins("numpy")
    [six] = node_pins("six")
    for version in ("1.26.4", *numpy, "9.0.0"):
        wheel(index, "numpy", version)
    pandas = wheel(index, "pandas", "2.3.3", ("numpy>=1.14",))
    wheel(index, "pandas", "0.21.0")
    six_hash = wheel(index, "six", six)
    wheel(index, "six", "9.9.9")
    stack_file = team_stack(tmp_path, CENSUS_REQUIREMENTS)
    assert main(["validate", "--stack-file", str(stack_file)]) == 0
    assert "is valid" in capsys.readouterr().out
    entry = requirements_artifact(plan_json(stack_file, capsys))
    assert entry["pin"] == "hash-locked"
    assert entry["unpinned"] is False
    assert entry["locked_from"].endswith("team/requirements.txt")
    # The newest each line allows, but what the nodes pin stays as they pin it (numpy, six).
    pinned = [pin.partition(" ;")[0] for pin in entry["pins"]]
    assert pinned == [*(f"numpy=={version}" for version in numpy), "pandas==2.3.3", f"six=={six}"]
    [lock] = requirements_lock.LOCK_DIR.iterdir()
    assert entry["lock"] == str(lock)
    text = lock.read_text()
    assert f"--hash=sha256:{pandas}" in text
    assert f"--hash=sha256:{six_hash}" in text
    # What `pulumi up` uploads is the lock, pinned by its sha256 in the nodes' metadata.
    assert entry["sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert main(["plan", "--stack-file", str(stack_file)]) == 0
    assert f"pin no versions: the nodes install the lock trainstack made of them, {lock}" in capsys.readouterr().out


def test_the_lock_is_kept_by_the_files_digest_and_used_offline_until_the_file_changes(
    tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel(index, "cloudml-hypertune", "0.1.0.dev6")
    stack_file = team_stack(tmp_path, "cloudml-hypertune\n")
    first = requirements_artifact(plan_json(stack_file, capsys))
    # The index gone: the kept lock is used as it is.
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("UV_FIND_LINKS", str(empty))
    assert requirements_artifact(plan_json(stack_file, capsys)) == first
    # A changed file is locked anew, and offline that is one line naming the key.
    (tmp_path / "team" / "requirements.txt").write_text("cloudml-hypertune\nsix\n")
    assert main(["validate", "--stack-file", str(stack_file)]) == 1
    err = capsys.readouterr().err
    [problem] = [line for line in err.splitlines() if line.strip().startswith("trainstack:job.requirements")]
    assert "pins no versions, so trainstack locks it for the nodes, and could not:" in problem
    assert "lock it where the package index is reachable" in problem
    assert "six" in problem
    assert "Traceback" not in err


def test_a_file_that_is_hash_locked_already_is_uploaded_as_it_is(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    digest = "a" * 64
    text = f"tabulate==0.9.0 \\\n    --hash=sha256:{digest}\n"
    stack_file = team_stack(tmp_path, text)
    entry = requirements_artifact(plan_json(stack_file, capsys))
    assert entry["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert "lock" not in entry
    assert not requirements_lock.LOCK_DIR.exists()


@pytest.mark.parametrize(("algorithm", "digits"), [("sha384", 96), ("sha512", 128)])
def test_a_file_locked_with_a_stronger_hash_pip_takes_is_hash_locked_too(
    algorithm: str, digits: int, tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pip's --require-hashes takes sha384 and sha512 as well as sha256: the package's line rule
    # and the lock's count are one rule (trainstack.jobcode.node_environment.HASH_OPTION).
    text = f"tabulate==0.9.0 \\\n    --hash={algorithm}:{'b' * digits}\n"
    stack_file = team_stack(tmp_path, text)
    entry = requirements_artifact(plan_json(stack_file, capsys))
    assert entry["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert "lock" not in entry


def test_a_half_locked_file_is_refused_not_re_resolved(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = f"tabulate==0.9.0 --hash=sha256:{'a' * 64}\nsix>=1.11\n"
    stack_file = team_stack(tmp_path, text)
    assert main(["validate", "--stack-file", str(stack_file)]) == 1
    err = capsys.readouterr().err
    assert "line 2 ('six>=1.11') not pinned to one version with == and a --hash" in err
    assert "give it without any --hash and trainstack locks it" in err


def test_a_requirement_that_would_move_a_node_pin_is_named_before_any_index_is_asked(
    tmp_path: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_file = team_stack(tmp_path, "tensorflow<2\n")
    assert main(["validate", "--stack-file", str(stack_file)]) == 1
    err = capsys.readouterr().err
    assert "tensorflow<2 excludes tensorflow" in err
    assert "could not" not in err


def test_a_tpu_vms_lock_keeps_its_runtimes_tensorflow_and_what_trainstack_adds_to_it() -> None:
    """A TPU VM runs its runtime's TensorFlow, not locks/node.txt's: its lock is resolved
    against that version and locks/tpu-tf-X.Y.txt."""
    from trainstack.base.project import PROJECT_ROOT
    from trainstack.catalog import load_catalog
    from trainstack.stackmodel.derived import requirement_constraints
    from trainstack.stackmodel.stackfile import load_checked_stack

    cfg, _ = load_checked_stack(PROJECT_ROOT / "stacks" / "Pulumi.tpu.yaml")
    constraints = requirement_constraints(cfg, load_catalog())
    assert constraints.name == "locks/tpu-tf-2.17.txt"
    assert constraints.text.startswith("tensorflow==2.17.")
    assert "tf-keras==2.17." in constraints.text
    multiworker, _ = load_checked_stack(PROJECT_ROOT / "stacks" / "Pulumi.multiworker.yaml")
    assert requirement_constraints(multiworker, load_catalog()).name == "locks/node.txt"
