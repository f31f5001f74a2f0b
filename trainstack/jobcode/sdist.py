"""A team's package as a Python source distribution, what Vertex AI's python_package_spec (or
the stack's own image) installs with pip: written file by file with tarfile, so that nothing
of the team's runs when it is built. pip builds it on Vertex AI with setuptools, from the
pyproject.toml written here."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainstack.jobcode.package import CodePackage, ExtraRequirements


class SdistProblem(ValueError):
    """The package cannot be built as a source distribution; the message says why."""


def dependencies(requirements: ExtraRequirements | None) -> list[str]:
    """The requirement lines, as ``load_requirements`` checked them (options are refused there,
    pip's --hash options left out: metadata has no place for them)."""
    return [] if requirements is None else list(requirements.lines)


def _top_level_patterns(package: CodePackage) -> list[str]:
    """setuptools' find patterns for every top-level package the code ships (a directory
    layout may hold several beside the module's own)."""
    tops = sorted({name.split("/", 1)[0] for name in package.members if "/" in name})
    return [pattern for top in tops for pattern in (top, f"{top}.*")]


def pyproject(package: CodePackage, requires: list[str]) -> str:

    # TOML basic strings take JSON's escapes, so json.dumps quotes every value safely.
    return "\n".join(
        [
            "[build-system]",
            'requires = ["setuptools>=61"]',
            'build-backend = "setuptools.build_meta"',
            "",
            "[project]",
            f"name = {json.dumps(package.name)}",
            f"version = {json.dumps(sdist_version(package.digest))}",
            f"dependencies = {json.dumps(requires)}",
            "",
            "[tool.setuptools.packages.find]",
            f"include = {json.dumps(_top_level_patterns(package))}",
            "",
            # Every file the stack ships with the code, not only its modules: an AI Platform
            # sample reads a CSV beside its modules, as it did from the job's package there.
            "[tool.setuptools.package-data]",
            '"*" = ["**/*"]',
            "",
        ]
    )


def project_build_hint(package: CodePackage) -> str:
    """What to do with a project's own build: trainstack builds no code it would have to run."""
    return (
        f"{package.display_source} is a project with its own build (pyproject.toml or setup.py), which trainstack "
        f"does not run: build it with `python -m build --sdist {package.display_source}` and give that archive to "
        "Vertex AI yourself (gcloud storage cp, then the job's packageUris), or set job.package to the package "
        "folder itself, as AI Platform's --package-path named it, with its requirements in job.requirements: "
        "trainstack then builds the archive"
    )


# Written at the archive's root by trainstack, never taken from the team's files.
_GENERATED_FILES = ("PKG-INFO", "pyproject.toml")
# A fixed timestamp and mode: the same files give the same archive bytes, run after run.
_ARCHIVE_MTIME = 315532800  # 1980-01-01, as the code archives' zip entries
_FILE_MODE = 0o644


def _pkg_info(package: CodePackage, requires: list[str]) -> str:
    """The core metadata a source distribution carries (PKG-INFO), as pip reads it."""
    lines = ["Metadata-Version: 2.1", f"Name: {package.name}", f"Version: {sdist_version(package.digest)}"]
    return "\n".join([*lines, *(f"Requires-Dist: {requirement}" for requirement in requires), ""])


def sdist_members(package: CodePackage, requires: list[str]) -> dict[str, bytes]:
    """What the source distribution holds, by name inside its top folder: every file of the
    package's folders (modules and data) and trainstack's own PKG-INFO and pyproject.toml.
    Loose files at the top of a directory layout (a setup.cfg, a README) are left out: a
    setup.cfg there would be the build's configuration on Vertex AI."""
    files: dict[str, bytes] = {
        "PKG-INFO": _pkg_info(package, requires).encode(),
        "pyproject.toml": pyproject(package, requires).encode(),
    }
    for archive_name, source in package.members.items():
        top, slash, _ = archive_name.partition("/")
        if not slash:
            continue
        if top in _GENERATED_FILES:
            raise SdistProblem(f"{package.display_source}: a folder named {top} is in the way of the archive's {top}")
        files[archive_name] = source.read_bytes()
    return files


def build_sdist(package: CodePackage, requirements: ExtraRequirements | None, out_dir: Path) -> Path:
    """Write ``<name>-0.0.0+<digest>.tar.gz`` into ``out_dir`` from exactly the files a stack ships.

    Nothing the team wrote runs or is even read as configuration: the archive is written here,
    file by file, with metadata and a pyproject.toml of trainstack's own (no build backend runs,
    so no setup.cfg or setup.py of the team's can name code for it to import)."""
    from trainstack.jobcode.package import PROJECT_LAYOUT

    if package.layout == PROJECT_LAYOUT:
        raise SdistProblem(project_build_hint(package))
    files = sdist_members(package, dependencies(requirements))
    name = sdist_filename(package.name, package.digest)
    top = name.removesuffix(".tar.gz")
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=_ARCHIVE_MTIME) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for member, data in sorted(files.items(), key=lambda item: PurePosixPath(item[0]).parts):
            info = tarfile.TarInfo(f"{top}/{member}")
            info.size, info.mtime, info.mode = len(data), _ARCHIVE_MTIME, _FILE_MODE
            archive.addfile(info, io.BytesIO(data))
    out_dir.mkdir(parents=True, exist_ok=True)
    destination = out_dir / name
    destination.write_bytes(buffer.getvalue())
    return destination


def sdist_filename(package: str, digest: str) -> str:
    """The file name setuptools gives the package's source distribution (PEP 625: normalised name)."""
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{sdist_version(digest)}.tar.gz"


def sdist_version(digest: str) -> str:
    # A local version label carries the content hash: another content, another file.
    return f"0.0.0+{digest}"
