"""What `trainstack local` fetches for its nodes' pip (they reach no index), with pip itself
against a local index: a job whose hash-locked requirements pin a version and whose project
depends on the same distribution unpinned gets that one version, as the nodes install it
(requirements first, then the project), not a second, newer one that would make the download
impossible (a team's package with a setup.py, as AI Platform's samples have); and a pinned
source distribution (cloudml-hypertune has no wheel) comes with what the node builds it with."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from trainstack.localrun.wheels import fetch_for_nodes

SETUP = """\
from setuptools import setup
setup(name={name!r}, version={version!r}, py_modules=[{module!r}], install_requires={requires!r})
"""
PYPROJECT = """\
[build-system]
requires = ["dep==2.0"]
build-backend = "setuptools.build_meta"
"""


def project(root: Path, name: str, version: str, requires: list[str]) -> Path:
    root.mkdir(parents=True)
    module = name.replace("-", "_")
    (root / f"{module}.py").write_text("")
    (root / "setup.py").write_text(SETUP.format(name=name, version=version, module=module, requires=requires))
    return root


def wheel(source: Path, dists: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(dists),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return next(dists.glob(f"{source.name.replace('-', '_')}-*.whl"))


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Wheels of dep 1.0 and 2.0 in a directory that is pip's whole index for the test."""
    dists = tmp_path / "dists"
    dists.mkdir()
    for version in ("1.0", "2.0"):
        built = wheel(project(tmp_path / f"src-{version}" / "dep", "dep", version, []), dists)
        built.rename(dists / built.name)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(dists))
    # The project's metadata is prepared with this environment's setuptools (no index to fetch one from).
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return dists


@pytest.mark.slow
def test_a_project_gets_the_version_its_requirements_pin_not_a_second_one(tmp_path: Path, local_index: Path) -> None:
    digest = hashlib.sha256(next(local_index.glob("dep-1.0-*.whl")).read_bytes()).hexdigest()
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"dep==1.0 \\\n    --hash=sha256:{digest}\n")
    team = project(tmp_path / "team" / "team-trainer", "team-trainer", "0.1", ["dep"])
    (team / "pyproject.toml").write_text(PYPROJECT)
    destination = tmp_path / "find-links"
    fetched = fetch_for_nodes(Path(sys.executable), destination, requirements, team)
    assert fetched == ["dep==1.0"]
    assert sorted(path.name.split("-")[1] for path in destination.glob("dep-*.whl")) == ["1.0", "2.0"]
    # 2.0 is there as the project's build requirement only (pyproject.toml), not as a runtime pin.
    wheels = sorted(path.name for path in destination.glob("*.whl"))
    assert wheels == sorted(path.name for path in local_index.glob("dep-*.whl"))


@pytest.mark.slow
def test_a_project_alone_gets_its_newest_dependency(tmp_path: Path, local_index: Path) -> None:
    team = project(tmp_path / "team" / "team-trainer", "team-trainer", "0.1", ["dep"])
    (team / "pyproject.toml").write_text(PYPROJECT)
    assert fetch_for_nodes(Path(sys.executable), tmp_path / "find-links", None, team) == ["dep==2.0"]


def sdist(dists: Path, name: str, version: str, pyproject: str) -> Path:
    """A source distribution as PyPI serves one: NAME-VERSION/ with setup.py, PKG-INFO, pyproject.toml."""
    archive = dists / f"{name}-{version}.tar.gz"
    files = {
        "setup.py": SETUP.format(name=name, version=version, module=name, requires=[]),
        "PKG-INFO": f"Metadata-Version: 1.0\nName: {name}\nVersion: {version}\n",
        "pyproject.toml": pyproject,
        f"{name}.py": "",
    }
    with tarfile.open(archive, "w:gz") as tar:
        for file_name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{name}-{version}/{file_name}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return archive


@pytest.mark.slow
def test_a_pinned_source_distribution_comes_with_its_build_requirements(tmp_path: Path, local_index: Path) -> None:
    archive = sdist(local_index, "hyper", "0.1", PYPROJECT)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"hyper==0.1 \\\n    --hash=sha256:{hashlib.sha256(archive.read_bytes()).hexdigest()}\n")
    destination = tmp_path / "find-links"
    assert fetch_for_nodes(Path(sys.executable), destination, requirements, None) == ["hyper==0.1"]
    # The node's pip builds hyper in an isolated environment from the same find-links: dep 2.0,
    # what its pyproject.toml builds it with, must be there too.
    assert sorted(path.name for path in destination.iterdir()) == sorted(
        ["hyper-0.1.tar.gz", next(local_index.glob("dep-2.0-*.whl")).name]
    )


# A team's setup.py that records, when it runs, who runs it, whether it reaches this machine's
# network, and whether it sees the deploying user's credentials.
SNOOPING_SETUP = """\
import json, os, socket
from setuptools import setup
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    reached = True
except OSError:
    reached = False
seen = {{"uid": os.getuid(), "reached": reached, "secret": os.environ.get("DEPLOYER_SECRET")}}
with open({record!r}, "a") as handle:
    handle.write(json.dumps(seen) + "\\n")
setup(name="team-trainer", version="0.1", py_modules=["team_trainer"], install_requires=["dep"])
"""


@pytest.mark.slow
def test_a_teams_setup_py_never_runs_as_the_deploying_user_with_its_network_and_credentials(
    tmp_path: Path, local_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the nodes install for a project with a setup.py is found by running it in the job's
    sandbox alone: as the job's unprivileged user (run as root), in a network namespace that
    reaches nothing, with none of this user's environment."""
    import json
    import os
    import socket

    record = tmp_path / "runs" / "setup-runs.jsonl"
    record.parent.mkdir()
    record.parent.chmod(0o777)
    tmp_path.chmod(0o755)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        team = tmp_path / "team" / "team-trainer"
        team.mkdir(parents=True)
        (team / "team_trainer.py").write_text("")
        (team / "setup.py").write_text(SNOOPING_SETUP.format(port=port, record=str(record)))
        (team / "pyproject.toml").write_text(PYPROJECT)
        monkeypatch.setenv("DEPLOYER_SECRET", "hunter2")
        fetched = fetch_for_nodes(Path(sys.executable), tmp_path / "find-links", None, team)
    assert fetched == ["dep==2.0"]
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert runs, "setup.py did not run at all"
    for run in runs:
        assert run["reached"] is False, run
        assert run["secret"] is None, run
        if os.geteuid() == 0:
            assert run["uid"] != 0, run


def test_a_pyproject_that_states_its_dependencies_is_read_not_run(tmp_path: Path) -> None:
    from trainstack.localrun.wheels import project_requirements

    team = tmp_path / "team"
    team.mkdir()
    (team / "setup.py").write_text("raise SystemExit('setup.py must not run')\n")
    (team / "pyproject.toml").write_text(
        '[project]\nname = "team"\nversion = "0.1"\ndependencies = ["dep>=1", "other; python_version >= \\"3\\""]\n'
    )
    assert project_requirements(Path(sys.executable), team) == ["dep>=1", 'other; python_version >= "3"']
