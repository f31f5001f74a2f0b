"""What a node runs, fetched and checked against the sha256 pinned in its metadata.

Nothing the agent fetches is used before its digest matches: the job's code archive, its
requirements, the wheelhouse's manifest and every wheel it lists. A mismatch raises
:class:`DigestMismatch`, naming the object, and the node records FAILED and releases itself.
Archives are unpacked member by member, refusing absolute names, ``..``, links and sizes past
the bounds.
"""

from __future__ import annotations

import json
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from trainstack_agent.gcs import Storage
from trainstack_agent.settings import Artifact
from trainstack_contract.names import MAX_WHEELS, SHA256, WHEEL_FILE

# Bounds on what a node downloads and unpacks (the Pulumi side refuses larger packages).
MAX_ARCHIVE_BYTES = 200 * 1024 * 1024
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
MAX_ARCHIVE_MEMBERS = 20_000
MAX_REQUIREMENTS_BYTES = 64 * 1024
# A node environment's lock (locks/node.txt is about 100 KiB: every wheel's hash).
MAX_LOCK_BYTES = 1024 * 1024
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_WHEEL_BYTES = 8 * 1024 * 1024 * 1024


class ArtifactError(Exception):
    """An object the node needs is missing, too large or malformed; the message names it."""


class DigestMismatch(ArtifactError):
    """An object's content is not what `pulumi up` pinned in metadata."""


def fetch_verified(storage: Storage, artifact: Artifact, destination: Path, max_bytes: int) -> Path:
    """Downloads ``artifact`` to ``destination`` and checks its sha256; on a mismatch the file
    is removed before DigestMismatch is raised."""
    actual = storage.download(artifact.uri, destination, max_bytes)
    if actual != artifact.sha256:
        destination.unlink(missing_ok=True)
        raise DigestMismatch(
            f"{artifact.uri} does not match the sha256 pinned in metadata "
            f"(expected {artifact.sha256[:16]}..., got {actual[:16]}...); it was not written by `pulumi up`"
        )
    return destination


def unpack(archive: Path, destination: Path) -> None:
    """Extracts a zip archive of regular files into ``destination``, refusing members that
    would land outside it, links, and archives past the bounds."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = bundle.infolist()
            if len(members) > MAX_ARCHIVE_MEMBERS:
                raise ArtifactError(f"{archive.name} has more than {MAX_ARCHIVE_MEMBERS} members")
            if sum(member.file_size for member in members) > MAX_UNPACKED_BYTES:
                raise ArtifactError(f"{archive.name} unpacks to more than {MAX_UNPACKED_BYTES} bytes")
            for member in members:
                name = PurePosixPath(member.filename)
                if name.is_absolute() or ".." in name.parts or "\\" in member.filename:
                    raise ArtifactError(f"{archive.name} has a member outside its root: {member.filename[:100]!r}")
                if stat.S_ISLNK(member.external_attr >> 16):
                    raise ArtifactError(f"{archive.name} has a link: {member.filename[:100]!r}")
            destination.mkdir(parents=True, exist_ok=True)
            bundle.extractall(destination)
    except zipfile.BadZipFile:
        raise ArtifactError(f"{archive.name} is not a zip archive") from None


@dataclass(frozen=True)
class Wheel:
    filename: str
    sha256: str


def read_manifest(path: Path) -> list[Wheel]:
    """The wheels a (verified) manifest lists: ``{"wheels": [{"file": ..., "sha256": ...}]}``."""
    try:
        document = json.loads(path.read_bytes())
        entries = document["wheels"]
        wheels = [Wheel(entry["file"], entry["sha256"]) for entry in entries]
    except (ValueError, KeyError, TypeError):
        raise ArtifactError(f"{path.name} is not a wheelhouse manifest") from None
    if len(wheels) > MAX_WHEELS:
        raise ArtifactError(f"{path.name} lists more than {MAX_WHEELS} wheels")
    for wheel in wheels:
        if not (
            isinstance(wheel.filename, str)
            and WHEEL_FILE.fullmatch(wheel.filename)
            and isinstance(wheel.sha256, str)
            and SHA256.fullmatch(wheel.sha256)
        ):
            raise ArtifactError(f"{path.name} lists an entry that is not a wheel file name with its sha256")
    return wheels


def fetch_wheelhouse(storage: Storage, manifest: Artifact, directory: Path) -> list[Path]:
    """Every wheel the manifest lists, each checked against its digest, into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    listed = fetch_verified(storage, manifest, directory.parent / "wheelhouse-manifest.json", MAX_MANIFEST_BYTES)
    wheels = read_manifest(listed)
    prefix = manifest.uri.rsplit("/", 1)[0]
    paths = []
    for wheel in wheels:
        path = directory / wheel.filename
        fetch_verified(storage, Artifact(f"{prefix}/{wheel.filename}", wheel.sha256), path, MAX_WHEEL_BYTES)
        paths.append(path)
    return paths
