"""What a local run's nodes install with pip, fetched on this machine before they start.

The nodes of `trainstack local` run in a network namespace that reaches loopback alone (the
TensorFlow servers must bind nowhere else), so no node reaches a package index. A real node
installs the job's requirements file and project (pyproject.toml or setup.py) with pip from
the index or the stack's wheelhouse; a local node runs the same agent, the same pip
commands, with ``--no-index --find-links DIR``, and this module fills DIR first: with what
a node's environment lacks (it sees this interpreter's packages), found by pip's own
resolver in a dry run, and with the build backend an isolated build of the project, and of
each source distribution among them (cloudml-hypertune has no wheel), needs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

from trainstack.localrun.workdir import unreachable_by_others

# Bounds on each pip call: a hung index must not hang the run.
PIP_SECONDS = 900
# What pip builds a project with when its pyproject.toml names no backend (PEP 517's fallback).
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0",)
# A source distribution's pyproject.toml is read whole up to this size.
MAX_PYPROJECT_BYTES = 1 << 20


class FetchError(Exception):
    """pip could not fetch what the nodes install; the message says what and why."""


def _pip(python: Path, arguments: list[str], what: str) -> None:
    _run([str(python), "-m", "pip", *arguments], what)


def _run(argv: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    """A pip command, bounded by PIP_SECONDS; FetchError with pip's last line when it fails."""
    try:
        completed = subprocess.run(
            argv, capture_output=True, text=True, timeout=PIP_SECONDS, check=False, cwd=cwd, env=env
        )
    except subprocess.TimeoutExpired:
        raise FetchError(f"{what}: pip did not finish within {PIP_SECONDS} s") from None
    if completed.returncode != 0:
        lines = [line for line in completed.stderr.splitlines() if line.strip()]
        said = lines[-1].strip() if lines else f"exit {completed.returncode}"
        raise FetchError(f"{what}: {said}")


def build_requirements(project: Path) -> list[str]:
    """The build backend's requirements a project declares (PEP 518), else PEP 517's default."""
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file():
        return list(DEFAULT_BUILD_REQUIRES)
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise FetchError(f"{pyproject} is not TOML pip can read: {error}") from None
    requires = document.get("build-system", {}).get("requires")
    if requires is None:
        return list(DEFAULT_BUILD_REQUIRES)
    if not isinstance(requires, list) or not all(isinstance(item, str) for item in requires):
        raise FetchError(f"{pyproject}: build-system.requires is not a list of requirements")
    return requires


def _sdist_pyproject(archive: Path) -> bytes | None:
    """The pyproject.toml at the top of a source distribution (NAME-VERSION/pyproject.toml), if any."""
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as opened:
                names = [
                    name for name in opened.namelist() if name.count("/") == 1 and name.endswith("/pyproject.toml")
                ]
                if not names or opened.getinfo(names[0]).file_size > MAX_PYPROJECT_BYTES:
                    return None
                return opened.read(names[0])
        with tarfile.open(archive, "r:gz") as opened:
            for member in opened.getmembers():
                if member.isfile() and member.name.count("/") == 1 and member.name.endswith("/pyproject.toml"):
                    if member.size > MAX_PYPROJECT_BYTES:
                        return None
                    handle = opened.extractfile(member)
                    return handle.read() if handle is not None else None
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as error:
        raise FetchError(f"{archive.name} is not a source distribution pip can read: {error}") from None
    return None


def sdist_build_requirements(archive: Path) -> list[str]:
    """What building the source distribution ``archive`` needs: its pyproject.toml's
    build-system.requires (PEP 518), else PEP 517's default."""
    document = _sdist_pyproject(archive)
    if document is None:
        return list(DEFAULT_BUILD_REQUIRES)
    with tempfile.TemporaryDirectory(prefix="trainstack-sdist-") as scratch:
        (Path(scratch) / "pyproject.toml").write_bytes(document)
        return build_requirements(Path(scratch))


def missing_distributions(python: Path, targets: list[str]) -> list[str]:
    """``NAME==VERSION`` of each distribution pip would install for ``targets`` into the
    environment of ``python``, the targets' own local projects left out."""
    with tempfile.TemporaryDirectory(prefix="trainstack-pip-report-") as scratch:
        report = Path(scratch) / "report.json"
        _pip(
            python,
            ["install", "--dry-run", "--quiet", "--report", str(report), *targets],
            "finding what the nodes' environment lacks",
        )
        document = json.loads(report.read_text(encoding="utf-8"))
    missing = []
    for item in document.get("install", []):
        if "dir_info" in item.get("download_info", {}):
            continue
        metadata = item["metadata"]
        missing.append(f"{metadata['name']}=={metadata['version']}")
    return missing


def static_dependencies(project: Path) -> list[str] | None:
    """A project's runtime requirements where its pyproject.toml states them ([project]
    dependencies, not dynamic): read, nothing run. None where they are not stated there."""
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise FetchError(f"{pyproject} is not TOML pip can read: {error}") from None
    table = document.get("project")
    if not isinstance(table, dict) or "dependencies" in (table.get("dynamic") or []):
        return None
    dependencies = table.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(item, str) for item in dependencies):
        raise FetchError(f"{pyproject}: project.dependencies is not a list of requirements")
    return dependencies


# What a sandboxed step sees of the environment: no credentials, no pip or index settings of
# the user's, no proxy.
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def sandboxed(argv: list[str], python: Path) -> list[str]:
    """``argv`` as a node runs the job's code: run as root, as the job's unprivileged user in a
    network namespace of its own that reaches nothing; otherwise as this user in a user and
    network namespace of its own. FetchError where neither can be made here."""
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if os.geteuid() == 0:
        from trainstack_contract.jobuser import JobUserError, ensure_user

        if unshare is None or setpriv is None:
            raise FetchError("preparing the project's metadata in a sandbox needs unshare and setpriv (util-linux)")
        blocked = unreachable_by_others(python)
        if blocked is not None:
            raise FetchError(
                f"the job's user cannot run {python} (it cannot enter {blocked}) to prepare the project's metadata "
                "in a sandbox; state the project's dependencies in pyproject.toml's [project] table instead"
            )
        try:
            uid, gid = ensure_user()
        except JobUserError as error:
            raise FetchError(str(error)) from None
        drop = [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--"]
        return [unshare, "--net", "--", *drop, *argv]
    if unshare is None:
        raise FetchError("preparing the project's metadata in a sandbox needs unshare (util-linux)")
    return [unshare, "--user", "--net", "--", *argv]


def _sandbox_python(env_dir: Path) -> Path:
    """A virtual environment of an interpreter the job's user can run, with this interpreter's
    packages on its path, as a local node's environment is made."""
    from trainstack.localrun.workdir import host_packages_venv, interpreter_for_job_user

    interpreter = interpreter_for_job_user()
    blocked = unreachable_by_others(Path(sysconfig.get_paths()["purelib"]))
    if interpreter is None or blocked is not None:
        where = f"cannot enter {blocked}" if blocked is not None else f"has no Python {sys.version_info[:2]} to run"
        raise FetchError(
            f"the job's user {where}, so the project's metadata cannot be prepared in a sandbox here; state the "
            "project's dependencies in pyproject.toml's [project] table instead"
        )
    return host_packages_venv(env_dir, interpreter)


def project_requirements(python: Path, project: Path) -> list[str]:
    """The project's runtime requirements (its Requires-Dist), found without running its code
    on this machine with this user's rights: from pyproject.toml where it states them, else from
    the metadata pip prepares (setup.py runs) in :func:`sandboxed`, on a copy of the project,
    with no package index and nothing of this user's environment."""
    static = static_dependencies(project)
    if static is not None:
        return static
    with tempfile.TemporaryDirectory(prefix="trainstack-metadata-") as scratch:
        root = Path(scratch)
        copy = root / "project"
        shutil.copytree(project, copy, symlinks=True)
        report = root / "report.json"
        if os.geteuid() == 0:
            from trainstack_contract.jobuser import ensure_user

            # An interpreter the job's user can run, seeing this one's packages (pip, setuptools).
            python = _sandbox_python(root / "venv")
            uid, gid = ensure_user()
            for path in [root, *root.rglob("*")]:
                os.chown(path, uid, gid, follow_symlinks=False)
            root.chmod(0o711)  # its own now; others may pass, as the check of the path wants
        argv = [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps", "--no-index"]
        argv += ["--no-build-isolation", "--report", str(report), str(copy)]
        what = f"preparing {project}'s metadata in a sandbox (no network, no credentials)"
        _run(sandboxed(argv, python), what, cwd=root, env={**SANDBOX_ENV, "HOME": str(root)})
        try:
            document = json.loads(report.read_text(encoding="utf-8"))
            requires = document["install"][0]["metadata"].get("requires_dist") or []
        except (OSError, ValueError, KeyError, IndexError) as error:
            raise FetchError(f"preparing {project}'s metadata: pip's report is unreadable ({error})") from None
    if not isinstance(requires, list) or not all(isinstance(item, str) for item in requires):
        raise FetchError(f"{project}'s metadata lists its requirements in a form pip does not write")
    return [item for item in requires if not _for_an_extra(item)]


def _for_an_extra(requirement: str) -> bool:
    """A requirement of one of the project's extras (``; extra == "test"``): nodes install none."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        marker = Requirement(requirement).marker
    except InvalidRequirement:
        return False
    return marker is not None and "extra" in str(marker)


def pins_of_requirements(requirements: Path) -> list[str]:
    """The requirements file's lines without their hashes (``pandas==2.3.3``): what the nodes
    have installed, hash-locked, by the time they install the project."""
    from trainstack.jobcode.requirements_lock import pinned_lines

    return pinned_lines(requirements.read_text(encoding="utf-8"))


def fetch_for_nodes(python: Path, destination: Path, requirements: Path | None, project: Path | None) -> list[str]:
    """Fills ``destination`` with what the nodes' pip installs for the job's ``requirements``
    file and ``project``; returns the distributions fetched, by NAME==VERSION."""
    destination.mkdir(parents=True, exist_ok=True)
    # Apart, as the nodes install them: the requirements hash-locked (a file with hashes puts pip
    # in hash-checking mode, which a local project, having none, cannot pass), then the project,
    # on top of the versions the requirements pinned (as constraints without their hashes: the
    # project's own unpinned dependencies must not bring a second version of one of them).
    missing: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trainstack-pins-") as scratch:
        constraints: list[str] = []
        if requirements is not None:
            missing += missing_distributions(python, ["-r", str(requirements)])
            if project is not None:
                pins = Path(scratch) / "constraints.txt"
                pins.write_text("".join(f"{line}\n" for line in pins_of_requirements(requirements)), encoding="utf-8")
                constraints = ["-c", str(pins)]
        if project is not None:
            # The project's own code (setup.py) never runs here: its requirements by name.
            needs = project_requirements(python, project)
            for each in missing_distributions(python, [*constraints, *needs]) if needs else []:
                if each not in missing:
                    missing.append(each)
    if missing:
        _pip(
            python,
            ["download", "--quiet", "--no-deps", "--dest", str(destination), *missing],
            "fetching the job's requirements",
        )
    # A source distribution is built on the node, in an isolated environment that installs its
    # build backend from the same find-links.
    backends: list[str] = []
    for archive in sorted([*destination.glob("*.tar.gz"), *destination.glob("*.zip")]):
        backends += [each for each in sdist_build_requirements(archive) if each not in backends]
    if backends:
        _pip(
            python,
            ["download", "--quiet", "--dest", str(destination), *backends],
            "fetching what the source distributions among the job's requirements are built with",
        )
    if project is not None:
        _pip(
            python,
            ["download", "--quiet", "--dest", str(destination), *build_requirements(project)],
            f"fetching the build backend of {project}",
        )
    return missing
