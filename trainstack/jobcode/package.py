"""The code a job runs: a Python package (the built-in trainer is one) or a container image.

``job.package`` names one of three layouts, found from the files alone (none of the team's
code runs at plan time), and every node runs ``python -m MODULE``:

- AI Platform's ``--package-path``: the top-level package directory itself
  (``examples/tabular_mlp`` for ``tabular_mlp.task``);
- a directory holding the top-level package (``team/`` with ``team/trainer/task.py``):
  shipped whole, so sibling packages import too;
- a project root with ``pyproject.toml`` or ``setup.py`` (the package beside it or under
  ``src/``): shipped whole and installed with pip on the node, its dependencies with it.

A package ships as a zip archive
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
from trainstack.base.credentials import credential_kind
from trainstack.base.errors import shorten
from trainstack.base.project import PROJECT_ROOT
from trainstack.jobcode.node_environment import HASH_OPTION, logical_lines, unhashed_requirements
from trainstack.jobcode.requirements_lock import Constraints, LockError, is_hash_locked, lock_requirements
from trainstack_contract import BUILTIN_MODULE, BUILTIN_PACKAGE, LAYOUT
from trainstack_contract.names import MAX_WHEELS, MODULE_NAME, PROJECT_ID, WHEEL_FILE

# Relative package and requirements paths are relative to the project root, where
# Pulumi.yaml is, whatever directory a command runs from.
BUILTIN_SOURCE = PROJECT_ROOT / BUILTIN_PACKAGE
# The contract the built-in trainer imports: shipped beside it in its archive and image.
CONTRACT_SOURCE = Path(trainstack_contract.__file__).resolve().parent

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
    rf"/(?P<project>{PROJECT_ID.pattern})"
    r"/(?P<repository>[a-z][a-z0-9-]{0,62})"
    rf"/(?P<image>{_IMAGE_PATH}){_IMAGE_REFERENCE}"
)
# NAME:TAG or NAME@sha256:...: an image in the stack's own repository.
SHORT_IMAGE_PATTERN = re.compile(rf"(?P<image>{_IMAGE_PATH}){_IMAGE_REFERENCE}")
IMAGE_DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
MAX_IMAGE_CHARS = 1024


# The layouts job.package may name (see the module docstring).
PACKAGE_LAYOUT = "package"
DIRECTORY_LAYOUT = "directory"
PROJECT_LAYOUT = "project"
# Files that make a directory a Python project pip can install.
PROJECT_FILES = ("pyproject.toml", "setup.py")
# Left out of a project's archive at its root: what an earlier build of it left behind.
_BUILD_OUTPUTS = ("build", "dist")
# How far around a wrong job.package path to look for the one that would work.
_SEARCH_DEPTH = 3
_SEARCH_ENTRIES = 5000


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
    layout: str = PACKAGE_LAYOUT

    @property
    def name(self) -> str:
        """The module's top-level package: names the archive whatever the layout."""
        return self.module.split(".", 1)[0]

    @property
    def install(self) -> str:
        """How a node makes the module importable (trainstack_contract.CODE_INSTALLS)."""
        return (
            trainstack_contract.PROJECT_INSTALL if self.layout == PROJECT_LAYOUT else trainstack_contract.PATH_INSTALL
        )

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
    # The bytes as checked: what `pulumi up` uploads, whatever the file holds by then.
    data: bytes = b""
    # The requirement lines, checked (pip's --hash options left out).
    lines: tuple[str, ...] = ()
    # Where trainstack kept the hash lock it made of the file (``data``); None for a file that
    # was hash-locked already, uploaded as it is (trainstack.jobcode.requirements_lock).
    lock: Path | None = None

    @property
    def object_name(self) -> str:
        return LAYOUT.code_requirements(self.digest)

    @property
    def display_path(self) -> str:
        """The file relative to the project root when inside it (the same on every clone)."""
        return _shown(self.path)

    @property
    def installed_file(self) -> Path:
        """The file whose bytes are ``data``: what the nodes install."""
        return self.lock or self.path


# A wheelhouse: wheel files only (WHEEL_FILE, at most MAX_WHEELS), within bounds the nodes
# also enforce.
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
        if WHEEL_FILE.fullmatch(path.name) is None:
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
    # The image's path in its repository, and its tag or its digest (sha256:HEX): one of the two.
    name: str = ""
    tag: str | None = None
    digest: str | None = None

    @property
    def registry_host(self) -> str:
        return f"{self.location}-docker.pkg.dev"

    @property
    def repository_url(self) -> str:
        return f"{self.registry_host}/{self.project}/{self.repository}"

    def by_digest(self, digest: str) -> str:
        """This image's URI pinned to ``digest`` (sha256:HEX), which nodes pull whatever the tag now names."""
        if IMAGE_DIGEST_PATTERN.fullmatch(digest) is None:
            raise CodeError(f"{shorten(digest)} is not an image digest (sha256: and 64 hex characters)")
        return f"{self.repository_url}/{self.name}@{digest}"


def project_path(value: str) -> Path:
    """A path from the stack file: absolute as given, else relative to the project root."""
    path = Path(value)
    return path if path.is_absolute() else PROJECT_ROOT / path


def _is_shipped(relative: Path) -> bool:
    if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
        return False
    return relative.suffix not in _SKIPPED_SUFFIXES


def package_members(
    source: Path, python_only: bool = False, prefixed: bool = True, skipped: tuple[str, ...] = ()
) -> dict[str, Path]:
    """Archive name -> file, in a stable order; names start with the package's own name when
    ``prefixed`` (a package directory), else they are relative to ``source`` (a directory
    or project shipped whole, leaving out the top-level entries named in ``skipped``).

    Hidden trees (.git, .venv) and caches are not entered at all: a checkout's .git alone
    held 150,000 files. Raises CodeError for a symlink (it could point anywhere on the
    machine that runs `pulumi up`), for a package past the size bounds, and for a tree with
    more than :data:`MAX_WALKED_ENTRIES` entries to look at."""
    members: dict[str, Path] = {}
    total = walked = 0
    for directory, subdirectories, files in os.walk(source):
        # Pruned in place: os.walk then never descends into them.
        at_top = Path(directory) == source
        subdirectories[:] = sorted(
            d for d in subdirectories if _is_shipped(Path(d)) and not (at_top and _is_skipped(d, skipped))
        )
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
            members[((Path(source.name) / relative) if prefixed else relative).as_posix()] = path
            if len(members) > MAX_PACKAGE_FILES or total > MAX_PACKAGE_BYTES:
                raise CodeError(
                    f"more than {MAX_PACKAGE_FILES} files or {MAX_PACKAGE_BYTES // 2**20} MiB; "
                    "ship data through the bucket, not the package"
                )
    # In path order (by parts: "a/b" before "a-b"), as archives and digests were always made.
    return dict(sorted(members.items(), key=lambda member: Path(member[0]).parts))


def _is_skipped(name: str, skipped: tuple[str, ...]) -> bool:
    return name in skipped or (bool(skipped) and name.endswith(".egg-info"))


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


def is_project(source: Path) -> bool:
    return any((source / name).is_file() for name in PROJECT_FILES)


def package_layout(source: Path, module: str) -> str | None:
    """Which layout of job.package ``source`` is for ``module``, or None when the module
    is not where any of them puts it. Looks at files only."""
    top = module.split(".", 1)[0]
    if source.name == top and module_file(source, module) is not None:
        return PACKAGE_LAYOUT
    if is_project(source):
        found = any(module_file(where / top, module) is not None for where in (source, source / "src"))
        return PROJECT_LAYOUT if found else None
    return DIRECTORY_LAYOUT if module_file(source / top, module) is not None else None


def _directories_below(root: Path) -> list[Path]:
    """Directories under ``root`` down to _SEARCH_DEPTH levels, hidden trees left out, bounded."""
    found: list[Path] = []
    level = [root]
    for _ in range(_SEARCH_DEPTH):
        below = []
        for directory in level:
            try:
                entries = sorted(directory.iterdir())
            except OSError:
                continue
            below += [e for e in entries if e.is_dir() and not e.is_symlink() and _is_shipped(Path(e.name))]
            if len(found) + len(below) > _SEARCH_ENTRIES:
                return found + below
        found += below
        level = below
    return found


def package_that_works(source: Path, module: str) -> Path | None:
    """The job.package path that holds ``module``, near the ``source`` given: the project or
    directory around it, or the one below it; None when none is found."""
    top = module.split(".", 1)[0]
    nearest = next((p for p in [source, *source.parents] if p.is_dir()), None)
    if nearest is None:
        return None
    around = {
        ancestor: layout
        for ancestor in [nearest, *nearest.parents][: _SEARCH_DEPTH + 1]
        if ancestor != source and (layout := package_layout(ancestor, module)) is not None
    }
    if around:
        # A project root (its dependencies install with it) over the package inside it.
        projects = [ancestor for ancestor, layout in around.items() if layout == PROJECT_LAYOUT]
        return (projects or list(around))[0]
    for directory in _directories_below(nearest):
        if directory.name == top and module_file(directory, module) is not None:
            # A src/ layout's project root, else the directory that holds the package.
            parent = directory.parent
            if parent.name == "src" and parent != nearest and is_project(parent.parent):
                return parent.parent
            return parent
    return None


def _shown(path: Path) -> str:
    """A path as a stack file may give it: relative to the project root when inside it."""
    try:
        return path.relative_to(PROJECT_ROOT).as_posix()
    except ValueError:
        return str(path)


def missing_package(source: Path, module: str) -> str:
    hint = f"a relative path starts at the project root, {PROJECT_ROOT}"
    better = package_that_works(source, module)
    if better is not None:
        hint = f"job.package: {_shown(better)} holds {module}"
    return f"{source} is not a directory ({hint})"


def module_meant(source: Path, module: str) -> str | None:
    """The module name ``module`` stands for when given relative to the package at ``source``
    (``task`` for ``trainer.task``), or None."""
    meant = f"{source.name}.{module}"
    if MODULE_NAME.fullmatch(meant) and module_file(source, meant) is not None:
        return meant
    return None


def modules_of(package: Path) -> list[str]:
    """The modules `python -m` can run from the package directory ``package``, sorted: its own
    and its subpackages' (a package with ``__main__.py`` by its own name). Hidden trees are
    not entered, and at most :data:`_SEARCH_ENTRIES` entries are looked at."""
    found: list[str] = []
    looked = 0
    level = [(package, package.name)]
    while level:
        below = []
        for directory, dotted in level:
            entries = _entries(directory)
            looked += len(entries)
            if looked > _SEARCH_ENTRIES:
                return sorted(found)
            for entry in entries:
                is_module = entry.suffix == ".py" and entry.is_file()
                part = entry.stem if is_module else entry.name
                if entry.is_symlink() or not _is_shipped(Path(entry.name)) or "." in part or part == "__init__":
                    continue
                name = dotted if part == "__main__" else f"{dotted}.{part}"
                if MODULE_NAME.fullmatch(name) is None:
                    continue
                if is_module:
                    found.append(name)
                elif entry.is_dir():
                    below.append((entry, name))
        level = below
    return sorted(found)


# How many modules a message lists (the rest are counted).
MAX_LISTED_MODULES = 12


def listed_modules(modules: list[str]) -> str:
    if not modules:
        return "it holds no module to run (no .py file)"
    more = len(modules) - MAX_LISTED_MODULES
    return f"its modules: {', '.join(modules[:MAX_LISTED_MODULES])}" + (f" and {more} more" if more > 0 else "")


def misplaced_module(source: Path, module: str) -> tuple[str, str]:
    """Which of job.package and job.module is wrong when ``source`` does not hold ``module``
    in any layout ("package" or "module"), and what would work instead."""
    top = module.split(".", 1)[0]
    better = package_that_works(source, module)
    if better is not None:
        return "package", f"{source} does not hold module {module}; job.package: {_shown(better)} does"
    meant = module_meant(source, module)
    if meant is not None:
        return "module", f"{source} holds no module {module}; it is job.module: {meant}"
    if source.name == top or (source / "__init__.py").is_file():
        return (
            "module",
            f"package {source.name} at {_shown(source)} has no module {module}; {listed_modules(modules_of(source))}",
        )
    # A directory or project holding the package, but not the module: the package is there.
    roots = (source, source / "src") if is_project(source) else (source,)
    holder = next((root / top for root in roots if (root / top).is_dir() and not (root / top).is_symlink()), None)
    if holder is not None:
        return "module", (
            f"{_shown(source)} holds package {top} but no module {module}; {listed_modules(modules_of(holder))}"
        )
    # The packages it does hold (directories with __init__.py), should job.module be the wrong one.
    packages = [
        entry
        for root in roots
        for entry in _entries(root)
        if entry.is_dir() and not entry.is_symlink() and (entry / "__init__.py").is_file()
    ]
    held = [name for package in packages[:MAX_LISTED_MODULES] for name in modules_of(package)]
    return "package", (
        f"{source} does not hold module {module}: job.package names the package directory {top} itself "
        f"(AI Platform's --package-path), a directory holding {top}/, or a project root with pyproject.toml or "
        f"setup.py holding {top}/ or src/{top}/" + (f"; {listed_modules(sorted(held))}" if held else "")
    )


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


def load_package(
    source: Path, module: str, python_only: bool = False, companions: tuple[Path, ...] = ()
) -> CodePackage:
    """The package at ``source``; ``companions`` are other packages shipped beside it in the
    same archive (the built-in trainer's contract)."""
    if source.is_symlink():
        raise CodeError(f"{source} is a symlink; name the package directory itself")
    if not source.is_dir():
        raise CodeError(missing_package(source, module))
    layout = package_layout(source, module)
    if layout is None:
        raise CodeError(misplaced_module(source, module)[1])
    members = package_members(
        source,
        python_only,
        prefixed=layout == PACKAGE_LAYOUT,
        skipped=_BUILD_OUTPUTS if layout == PROJECT_LAYOUT else (),
    )
    for companion in companions:
        members.update(package_members(companion, python_only))
    chunks = [(name, path.read_bytes()) for name, path in members.items()]
    if layout != PACKAGE_LAYOUT:
        # The same files shipped whole as a directory or installed as a project are two archives.
        chunks.insert(0, ("layout", layout.encode()))
    digest = digest_of(chunks)
    return CodePackage(source=source, module=module, members=members, digest=digest, layout=layout)


def builtin_package(source: Path = BUILTIN_SOURCE) -> CodePackage:
    """The built-in trainer as a package: its Python files and the contract's."""
    return load_package(source, BUILTIN_MODULE, python_only=True, companions=(CONTRACT_SOURCE,))


# What a job's requirements file may hold, line by line: pip reads the file on every node as
# root, so options (-r and -c read other files, -e and --index-url and --find-links fetch from
# elsewhere) and anything else pip would take are refused.
ALLOWED_REQUIREMENT_LINES = (
    "one requirement per line as PEP 508 writes it (NAME, NAME[EXTRA]>=VERSION ; MARKER, NAME @ https://URL "
    "without user or password), optionally followed by pip's --hash=sha256:HEX; comments (#) and blank lines"
)
# URL schemes a requirement may name (pip fetches them on the node).
_REQUIREMENT_URL_SCHEMES = ("https", "git+https")


def _requirement_line_problem(line: str) -> str | None:
    """Why a logical line of a requirements file is not allowed, or None. The line is never
    quoted where it could hold a credential."""
    from urllib.parse import urlsplit

    from packaging.requirements import InvalidRequirement, Requirement

    words = line.split()
    text = line
    while words and HASH_OPTION.fullmatch(words[-1]):
        # A sha256 is long random hex by design: it is a pin, not a credential.
        words.pop()
        text = " ".join(words)
    kind = credential_kind(text)
    if kind is not None:
        return f"holds what looks like a credential ({kind}), which would be uploaded to the bucket"
    if not words:
        return "holds --hash options without a requirement"
    if words[0].startswith("-"):
        return f"{shorten(words[0].split('=', 1)[0], 40)} is a pip option, not a requirement"
    if "$" in line:
        return "holds $: pip would put the node's environment variables into it"
    if any(word.startswith("-") for word in words):
        return "holds a pip option other than --hash=sha256:HEX after the requirement"
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return f"{shorten(text, 80)} is not a PEP 508 requirement"
    if requirement.url is not None:
        parts = urlsplit(requirement.url)
        if "@" in parts.netloc:
            return "its URL holds a user or password, which would be uploaded to the bucket"
        if parts.scheme not in _REQUIREMENT_URL_SCHEMES or not parts.hostname:
            return f"its URL is not https://HOST/... ({shorten(parts.scheme, 20) or 'no scheme'})"
    return None


def checked_requirement_lines(text: str, shown: str) -> tuple[str, ...]:
    """The requirements of a job's requirements file (continued lines joined, comments and
    --hash options left out); CodeError naming the first line that is not allowed."""
    found: list[str] = []
    lines, unterminated = logical_lines(text)
    for start, line in lines:
        problem = _requirement_line_problem(line)
        if problem is not None:
            raise CodeError(f"{shown} line {start}: {problem}; allowed: {ALLOWED_REQUIREMENT_LINES}")
        found.append(" ".join(word for word in line.split() if not HASH_OPTION.fullmatch(word)))
    if unterminated is not None:
        raise CodeError(
            f"{shown} line {unterminated}: ends in a line continuation (\\); allowed: {ALLOWED_REQUIREMENT_LINES}"
        )
    return tuple(found)


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    """Whether ``path`` lies below one of ``roots``, in no hidden folder there (.git, .venv)."""
    return any(path.is_relative_to(root) and _is_shipped(path.relative_to(root)) for root in roots)


def requirement_roots(package: Path | None) -> tuple[Path, ...]:
    """Where a job's requirements file may lie besides the project: the job's package, and the
    package's own project directory (its parent, where it holds setup.py or pyproject.toml:
    AI Platform's packages kept requirements.txt beside setup.py), never further up."""
    if package is None:
        return ()
    parent = package.resolve().parent
    own_project = (parent,) if is_project(parent) else ()
    return (package, *own_project)


def load_requirements(path: Path, package: Path | None = None) -> ExtraRequirements:
    """The job's requirements file, which must lie inside the project or the job's package
    ``package`` (links resolved): `pulumi up` uploads it where every account of the stack can
    read it, so no other file of this machine may be named. One that is not hash-locked yet
    is locked by :func:`as_installed` before anything is uploaded."""
    if path.is_symlink():
        raise CodeError(f"{path} is a symlink; name the file itself (a link could point at any file of this machine)")
    if not path.is_file():
        raise CodeError(f"{path} is not a file (a relative path starts at the project root, {PROJECT_ROOT})")
    roots = tuple(root.resolve() for root in (PROJECT_ROOT, *requirement_roots(package)))
    if not _inside(path.resolve(), roots):
        where = f"the project ({PROJECT_ROOT})" + (
            f" or the job's package ({package}) and its own project directory" if package else ""
        )
        raise CodeError(
            f"{path} is outside {where}, or in a hidden folder there: a requirements file lives in one of them (it "
            "is uploaded where every account of the stack can read it)"
        )
    data = path.read_bytes()
    if len(data) > MAX_REQUIREMENTS_BYTES:
        raise CodeError(f"{path} is larger than {MAX_REQUIREMENTS_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CodeError(f"{path} is not UTF-8 text") from error
    lines = checked_requirement_lines(text, _shown(path))
    if not is_hash_locked(text):
        check_lockable(path, text)
    return _requirements(path, data, lines)


def _requirements(path: Path, data: bytes, lines: tuple[str, ...], lock: Path | None = None) -> ExtraRequirements:
    return ExtraRequirements(
        path=path,
        digest=digest_of([("requirements.txt", data)]),
        sha256=hashlib.sha256(data).hexdigest(),
        data=data,
        lines=lines,
        lock=lock,
    )


def as_installed(requirements: ExtraRequirements, constraints: Constraints) -> ExtraRequirements:
    """``requirements`` as the nodes install them: a hash-locked file as it is, another one
    locked against ``constraints`` (what the nodes have before it: trainstack.jobcode.requirements_lock)."""
    text = requirements.data.decode("utf-8")
    if is_hash_locked(text):
        return requirements
    try:
        data, lock = lock_requirements(requirements.path, requirements.display_path, requirements.data, constraints)
    except LockError as error:
        raise CodeError(str(error)) from None
    return _requirements(requirements.path, data, requirements.lines, lock)


def check_lockable(path: Path, text: str) -> None:
    """A file trainstack locks names no hash: a file with some hashes was meant to be locked
    already, and half-locked it would be re-resolved behind its author's back."""
    from trainstack.jobcode.node_environment import locked_requirements

    hashed = [entry for entry in locked_requirements(text) if entry.hashes]
    if hashed:
        check_hash_locked(path, text)


def check_hash_locked(path: Path, text: str) -> None:
    """Nodes install a job's requirements with ``pip install --require-hashes``, as root: every
    line must pin one version with ``==`` and carry its sha256 (what ``pip-compile
    --generate-hashes`` or ``uv pip compile --generate-hashes`` writes)."""
    unhashed = unhashed_requirements(text)
    if unhashed:
        shown = ", ".join(f"line {entry.line} ({shorten(entry.text.partition(' --')[0])})" for entry in unhashed[:3])
        more = f" and {len(unhashed) - 3} more" if len(unhashed) > 3 else ""
        raise CodeError(
            f"{path.name}: {shown}{more} not pinned to one version with == and a --hash=sha256:...; nodes install "
            "the job's requirements hash-locked: generate the file with `pip-compile --generate-hashes` or `uv pip "
            "compile --generate-hashes`, or give it without any --hash and trainstack locks it (docs/own-code.md)"
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
        "Registry repository (the nodes get read access to it); `pulumi up` pins a tag to its digest in Artifact "
        "Registry only: copy other registries' images into a repository first"
    )


def resolve_image(value: str, registry_url: str) -> ImageRef:
    """The image ``value`` names, a short NAME:TAG taken as in the stack's repository."""
    check_image_syntax(value)
    uri = value if FULL_IMAGE_PATTERN.fullmatch(value) else f"{registry_url}/{value}"
    match = FULL_IMAGE_PATTERN.fullmatch(uri)
    if match is None:
        raise CodeError(f"{shorten(uri)} is not an Artifact Registry image")
    return ImageRef(
        uri=uri,
        location=match["location"],
        project=match["project"],
        repository=match["repository"],
        name=match["image"],
        tag=match["tag"],
        digest=match["digest"],
    )
