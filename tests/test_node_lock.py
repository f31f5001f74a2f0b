"""The hash-locked environments nodes install match the requirements they were generated from
(scripts/lock regenerates them): a requirement changed without a new lock fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainstack.catalog import load_catalog
from trainstack.jobcode.node_environment import (
    LOCKS_DIR,
    NODE_LOCK,
    NODE_REQUIREMENTS,
    lock_problems,
    locked_requirements,
    node_requirement_lines,
    tpu_lock,
    tpu_lock_input,
    unhashed_requirements,
)


def _tensorflow_minors() -> list[str]:
    runtimes = load_catalog().tpu_runtimes.values()
    return sorted({".".join(r.tensorflow_version.split(".")[:2]) for r in runtimes if r.tensorflow_version})


def test_the_cluster_nodes_lock_matches_requirements_node_txt() -> None:
    lock = NODE_LOCK.read_text(encoding="utf-8")
    assert lock_problems(lock, node_requirement_lines(NODE_REQUIREMENTS), NODE_LOCK.name) == []
    # Every requirement of requirements-node.txt is in it at the version pinned there.
    locked = {(entry.name, entry.version) for entry in locked_requirements(lock)}
    assert {("tensorflow", "2.21.0"), ("tf-keras", "2.21.0"), ("tensorboard", "2.21.0")} <= locked
    # Their dependencies too (the [and-cuda] extra's CUDA libraries), each hashed.
    assert any(name.startswith("nvidia-cudnn") for name, _ in locked)
    assert len(locked) > 30


@pytest.mark.parametrize("minor", _tensorflow_minors())
def test_each_tpu_runtimes_tensorflow_has_a_lock_of_its_keras_line(minor: str) -> None:
    requirements = node_requirement_lines(tpu_lock_input(minor))
    assert requirements == (f"tf-keras=={minor}.*",)
    lock = tpu_lock(minor).read_text(encoding="utf-8")
    assert lock_problems(lock, requirements, tpu_lock(minor).name) == []
    # Only tf-keras: the runtime's own TensorFlow must not be replaced by the package index's.
    assert [entry.name for entry in locked_requirements(lock)] == ["tf-keras"]


def test_every_lock_has_its_requirements() -> None:
    inputs = {path.stem for path in LOCKS_DIR.glob("*.in")}
    locks = {path.stem for path in LOCKS_DIR.glob("*.txt")}
    assert locks == inputs | {"node"}


def test_drift_is_named(tmp_path: Path) -> None:
    lock = NODE_LOCK.read_text(encoding="utf-8")
    # requirements-node.txt moved on without scripts/lock.
    moved = [
        line.replace("tensorflow[and-cuda]==2.21.0", "tensorflow[and-cuda]==2.22.0")
        for line in node_requirement_lines()
    ]
    assert lock_problems(lock, moved, "node.txt") == [
        "node.txt pins tensorflow==2.21.0, which tensorflow[and-cuda]==2.22.0 excludes: run scripts/lock"
    ]
    assert lock_problems(lock, [*node_requirement_lines(), "requests-oauthlib==2.0.0"], "node.txt") == [
        "node.txt lacks requests-oauthlib==2.0.0: run scripts/lock"
    ]
    # A line edited by hand: no hash, or a range.
    edited = lock.replace("absl-py==2.5.1 \\\n", "absl-py==2.5.1\nabsl-extra>=1 \\\n", 1)
    problems = lock_problems(edited, node_requirement_lines(), "node.txt")
    assert len(problems) == 2
    assert all("is not pinned with == and hashed" in problem for problem in problems)


def test_unhashed_requirements_are_named() -> None:
    digest = "0" * 64
    text = f"a==1.0 --hash=sha256:{digest}\nb==2.0\nc>=1 --hash=sha256:{digest}\nd==1.* --hash=sha256:{digest}\n"
    assert [entry.name for entry in unhashed_requirements(text)] == ["b", "c", "d"]
