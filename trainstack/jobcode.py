"""The code a job runs: a Python package (the built-in trainer is one) or a container image.

A package is a directory whose name is its top-level import name (``examples/digits_mlp``
holds ``digits_mlp``), run on every node as ``python -m MODULE``. It ships as a zip archive
named by the hash of its content, so a code change is a new bucket object and a node can
never run the code of an earlier `pulumi up`. An image is run with Docker on every node;
it must live in an Artifact Registry Docker repository, so that the nodes' account can be
granted read access to exactly that repository.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import trainstack_contract
from trainstack.errors import shorten
from trainstack_contract import BUILTIN_MODULE, BUILTIN_PACKAGE, LAYOUT

# Relative package and requirements paths are relative to the project root, where
# Pulumi.yaml is, whatever directory a command runs from.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUILTIN_SOURCE = PROJECT_ROOT / BUILTIN_PACKAGE
# The contract the built-in trainer imports: shipped beside it in its archive and image.
CONTRACT_SOURCE = Path(trainstack_contract.__file__).resolve().parent

# A dotted Python module name (`python -m` takes nothing else).
MODULE_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")
# Bounds on what a package archive may hold: it is code and small configuration, uploaded
# at every `pulumi up` that changes it and fetched by every node at every boot.
MAX_PACKAGE_FILES = 5000
MAX_PACKAGE_BYTES = 100 * 1024 * 1024
MAX_REQUIREMENTS_BYTES = 64 * 1024
# Entries a package's tree may have for trainstack to look at (hidden trees are not entered).
MAX_WALKED_ENTRIES = 20_000
# Left out of an archive: caches and hidden files (.git, .venv, editor state).
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
# Hex characters of the content hash in object names and image tags: 64 bits.
DIGEST_CHARS = 16
# A fixed timestamp: the same files give the same archive bytes, run after run.
_ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)

# Artifact Registry Docker images: LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE, with a
# tag or a digest (https://cloud.google.com/artifact-registry/docs/docker/names). IMAGE may
# have path components; each is lowercase, as Docker requires.
_IMAGE_PATH = r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*){0,8}"
_IMAGE_REFERENCE = r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})|@(?P<digest>sha256:[0-9a-f]{64}))"
FULL_IMAGE_PATTERN = re.compile(
    r"(?P<location>[a-z]+(?:-[a-z]+[0-9]+)?)-docker\.pkg\.dev"
    r"/(?P<project>[a-z][-a-z0-9]{4,28}[a-z0-9])"
    r"/(?P<repository>[a-z][a-z0-9-]{0,62})"
    rf"/(?P<image>{_IMAGE_PATH}){_IMAGE_REFERENCE}"
)
# NAME:TAG or NAME@sha256:...: an image in the stack's own repository.
SHORT_IMAGE_PATTERN = re.compile(rf"(?P<image>{_IMAGE_PATH}){_IMAGE_REFERENCE}")
MAX_IMAGE_CHARS = 1024


class CodeError(ValueError):
    """The job's code cannot be used as given; the message says why."""


def digest_of(chunks: list[tuple[str, bytes]]) -> str:
    """Content hash of named byte strings, order included (names and lengths delimit them)."""
    sha = hashlib.sha256()
    for name, data in chunks:
        sha.update(f"{name}\0{len(data)}\0".encode())
        sha.update(data)
    return sha.hexdigest()[:DIGEST_CHARS]


@dataclass(frozen=True)
class CodePackage:
    """A package to ship: its files by archive name, and the hash of their content."""

    source: Path
    module: str
    members: dict[str, Path]
    digest: str

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def object_name(self) -> str:
        return LAYOUT.code_archive(self.name, self.digest)

    @property
    def display_source(self) -> str:
        """The source relative to the project root when inside it (the same on every clone)."""
        try:
            return self.source.relative_to(PROJECT_ROOT).as_posix()
        except ValueError:
            return str(self.source)

    @functools.cached_property
    def archive(self) -> bytes:
        """The zip archive nodes fetch: the same files give the same bytes, so its sha256,
        pinned in the nodes' metadata, is known before anything is uploaded. Built once."""
        return zip_bytes({name: path.read_bytes() for name, path in self.members.items()})

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.archive).hexdigest()

    def write_archive(self, destination: Path) -> Path:
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(self.archive)
        return destination


def zip_bytes(files: dict[str, bytes]) -> bytes:
    """A zip archive of ``files`` (archive name -> bytes) whose bytes depend on nothing else:
    names in the order given, one fixed timestamp, fixed permissions."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


@dataclass(frozen=True)
class ExtraRequirements:
    """A requirements file installed on every node after the pinned ones."""

    path: Path
    digest: str
    # Of the file's bytes, as uploaded: pinned in the nodes' metadata.
    sha256: str

    @property
    def object_name(self) -> str:
        return LAYOUT.code_requirements(self.digest)


# A wheelhouse: wheel files only (pip runs no code to install a wheel, unlike a source
# archive), named as wheels are, within bounds the nodes also enforce.
WHEEL_FILE_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,200}\.whl")
MAX_WHEELS = 2000
MAX_WHEELHOUSE_BYTES = 20 * 1024**3


@dataclass(frozen=True)
class Wheelhouse:
    """Wheels nodes install from, by file name."""

    source: Path
    wheels: dict[str, Path]

    @functools.cached_property
    def digests(self) -> dict[str, str]:
        """Each wheel's sha256, read once (a wheelhouse of TensorFlow is gigabytes)."""
        digests = {}
        for name, path in self.wheels.items():
            sha = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    sha.update(chunk)
            digests[name] = sha.hexdigest()
        return digests


def load_wheelhouse(source: Path) -> Wheelhouse:
    if not source.is_dir() or source.is_symlink():
        raise CodeError(f"{source} is not a directory (a relative path starts at the project root, {PROJECT_ROOT})")
    wheels: dict[str, Path] = {}
    total = 0
    for path in sorted(source.iterdir()):
        if path.is_symlink() or not path.is_file():
            raise CodeError(f"{path.name} is not a regular file; a wheelhouse holds wheel files only")
        if WHEEL_FILE_PATTERN.fullmatch(path.name) is None:
            raise CodeError(
                f"{shorten(path.name)} is not a wheel (NAME-VERSION-TAGS.whl); a wheelhouse holds wheels only, "
                "which install without running code: `pip download --only-binary=:all: -d DIR -r FILE` makes one"
            )
        total += path.stat().st_size
        wheels[path.name] = path
        if len(wheels) > MAX_WHEELS or total > MAX_WHEELHOUSE_BYTES:
            raise CodeError(f"more than {MAX_WHEELS} wheels or {MAX_WHEELHOUSE_BYTES // 1024**3} GiB")
    if not wheels:
        raise CodeError(f"{source} holds no wheels")
    return Wheelhouse(source, wheels)


@dataclass(frozen=True)
class ImageRef:
    uri: str
    location: str
    project: str
    repository: str

    @property
    def registry_host(self) -> str:
        return f"{self.location}-docker.pkg.dev"


def project_path(value: str) -> Path:
    """A path from the stack file: absolute as given, else relative to the project root."""
    path = Path(value)
    return path if path.is_absolute() else PROJECT_ROOT / path


def _is_shipped(relative: Path) -> bool:
    if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
        return False
    return relative.suffix not in _SKIPPED_SUFFIXES


def package_members(source: Path, python_only: bool = False) -> dict[str, Path]:
    """Archive name -> file, in a stable order; names start with the package's own name.

    Hidden trees (.git, .venv) and caches are not entered at all: a checkout's .git alone
    held 150,000 files. Raises CodeError for a symlink (it could point anywhere on the
    machine that runs `pulumi up`), for a package past the size bounds, and for a tree with
    more than :data:`MAX_WALKED_ENTRIES` entries to look at."""
    members: dict[str, Path] = {}
    total = walked = 0
    for directory, subdirectories, files in os.walk(source):
        # Pruned in place: os.walk then never descends into them.
        subdirectories[:] = sorted(d for d in subdirectories if _is_shipped(Path(d)))
        walked += len(subdirectories) + len(files)
        if walked > MAX_WALKED_ENTRIES:
            raise CodeError(f"more than {MAX_WALKED_ENTRIES} files and directories to look at; a package is code")
        for name in [*subdirectories, *sorted(files)]:
            path = Path(directory) / name
            relative = path.relative_to(source)
            if not _is_shipped(relative):
                continue
            if path.is_symlink():
                raise CodeError(f"{relative} is a symlink; a package ships regular files only")
            if name in subdirectories or not path.is_file() or (python_only and path.suffix != ".py"):
                continue
            total += path.stat().st_size
            members[(Path(source.name) / relative).as_posix()] = path
            if len(members) > MAX_PACKAGE_FILES or total > MAX_PACKAGE_BYTES:
                raise CodeError(
                    f"more than {MAX_PACKAGE_FILES} files or {MAX_PACKAGE_BYTES // 2**20} MiB; "
                    "ship data through the bucket, not the package"
                )
    # In path order (by parts: "a/b" before "a-b"), as archives and digests were always made.
    return dict(sorted(members.items(), key=lambda member: Path(member[0]).parts))


def module_file(source: Path, module: str) -> Path | None:
    """The file `python -m module` runs from the package at ``source``, or None."""
    top, *rest = module.split(".")
    if top != source.name:
        return None
    where = source.joinpath(*rest)
    for candidate in (where.with_suffix(".py") if rest else None, where / "__main__.py"):
        if candidate is not None and candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


def missing_package(source: Path) -> str:
    return f"{source} is not a directory (a relative path starts at the project root, {PROJECT_ROOT})"


def missing_module(source: Path, module: str) -> str:
    return (
        f"package {source.name} at {source} has no module {module}: a package directory is named after its "
        f"import name, so the module is {source.name}.<file> for a <file>.py in it, or {source.name} with a __main__.py"
    )


def load_package(
    source: Path, module: str, python_only: bool = False, companions: tuple[Path, ...] = ()
) -> CodePackage:
    """The package at ``source``; ``companions`` are other packages shipped beside it in the
    same archive (the built-in trainer's contract)."""
    if source.is_symlink():
        raise CodeError(f"{source} is a symlink; name the package directory itself")
    if not source.is_dir():
        raise CodeError(missing_package(source))
    if module_file(source, module) is None:
        raise CodeError(missing_module(source, module))
    members = package_members(source, python_only)
    for companion in companions:
        members.update(package_members(companion, python_only))
    digest = digest_of([(name, path.read_bytes()) for name, path in members.items()])
    return CodePackage(source=source, module=module, members=members, digest=digest)


def builtin_package(source: Path = BUILTIN_SOURCE) -> CodePackage:
    """The built-in trainer as a package: its Python files and the contract's."""
    return load_package(source, BUILTIN_MODULE, python_only=True, companions=(CONTRACT_SOURCE,))


def load_requirements(path: Path) -> ExtraRequirements:
    if path.is_symlink():
        raise CodeError(f"{path} is a symlink; name the file itself (a link could point at any file of this machine)")
    if not path.is_file():
        raise CodeError(f"{path} is not a file (a relative path starts at the project root, {PROJECT_ROOT})")
    data = path.read_bytes()
    if len(data) > MAX_REQUIREMENTS_BYTES:
        raise CodeError(f"{path} is larger than {MAX_REQUIREMENTS_BYTES // 1024} KiB")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CodeError(f"{path} is not UTF-8 text") from error
    return ExtraRequirements(
        path=path, digest=digest_of([("requirements.txt", data)]), sha256=hashlib.sha256(data).hexdigest()
    )


def check_image_syntax(value: str) -> str:
    """``value`` when it names an Artifact Registry image or a NAME:TAG in the stack's own."""
    if len(value) <= MAX_IMAGE_CHARS:
        if FULL_IMAGE_PATTERN.fullmatch(value):
            return value
        # Docker reads a first component with a dot as a registry host (docker.io/..., gcr.io/...):
        # such a name is never an image of the stack's own repository.
        first, slash, _ = value.partition("/")
        if SHORT_IMAGE_PATTERN.fullmatch(value) and not (slash and "." in first):
            return value
    raise CodeError(
        f"{shorten(value)} is not an image trainstack can run: use NAME:TAG (or NAME@sha256:...) for an image in "
        "the stack's own repository, or LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/NAME:TAG for another Artifact "
        "Registry repository (the nodes get read access to it); copy other registries' images into one first"
    )


def resolve_image(value: str, registry_url: str) -> ImageRef:
    """The image ``value`` names, a short NAME:TAG taken as in the stack's repository."""
    check_image_syntax(value)
    uri = value if FULL_IMAGE_PATTERN.fullmatch(value) else f"{registry_url}/{value}"
    match = FULL_IMAGE_PATTERN.fullmatch(uri)
    if match is None:
        raise CodeError(f"{shorten(uri)} is not an Artifact Registry image")
    return ImageRef(uri=uri, location=match["location"], project=match["project"], repository=match["repository"])
