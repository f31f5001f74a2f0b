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
