"""What `pulumi up` puts in the bucket for nodes to run, each built once and pinned by sha256.

Every object a node executes or installs is built here from files in the repository or the
stack, with bytes that depend on content alone: the node agent's archive, the job's code
archive and requirements (``trainstack.jobcode.package``), a wheelhouse's manifest. Their object names
carry a content hash, and their full sha256 goes into the nodes' metadata, where the boot
script (for the agent) and the agent (for the rest) check it before use. Only `pulumi up`
writes them: the nodes' accounts may write their job's directory alone, never ``trainstack/``
(``components/identity``).

Pulumi uploads a file by path (``pulumi.FileAsset``), so the exact bytes are staged once under
``.trainstack/jobcode/artifacts/`` (named by content: a later run reuses them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import trainstack_agent
import trainstack_contract
from trainstack.base.project import PROJECT_ROOT
from trainstack.jobcode.package import Wheelhouse, zip_bytes
from trainstack_contract import LAYOUT

# The agent's archive holds these packages, Python files only, and a __main__ that runs it.
AGENT_SOURCES = (Path(trainstack_agent.__file__).parent, Path(trainstack_contract.__file__).parent)
_AGENT_MAIN = b"import sys\n\nfrom trainstack_agent.main import main\n\nsys.exit(main())\n"
STAGING_DIR = PROJECT_ROOT / ".trainstack" / "artifacts"
# Object names carry this many hex characters of the sha256 (64 bits).
NAME_DIGEST_CHARS = 16


@dataclass(frozen=True)
class BuiltArtifact:
    """One object as `pulumi up` uploads it."""

    object_name: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def uri(self, bucket: str) -> str:
        """Where a node finds it: ``gs://BUCKET/NAME``, or a path under a local bucket."""
        return f"{bucket}/{self.object_name}"

    def staged(self) -> Path:
        """A file with exactly these bytes, for ``pulumi.FileAsset``."""
        return stage(self.object_name.rsplit("/", 1)[-1], self.data)


def _python_files(root: Path) -> dict[str, bytes]:
    files = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent)
        if "__pycache__" not in relative.parts:
            files[relative.as_posix()] = path.read_bytes()
    return files


@functools.lru_cache(maxsize=1)
def agent_archive() -> BuiltArtifact:
    """The node agent as a zip application, ``python3 ARCHIVE`` runs it."""
    files = {"__main__.py": _AGENT_MAIN}
    for source in AGENT_SOURCES:
        files.update(_python_files(source))
    data = zip_bytes(files)
    return BuiltArtifact(LAYOUT.agent_archive(hashlib.sha256(data).hexdigest()[:NAME_DIGEST_CHARS]), data)


def stage(name: str, data: bytes) -> Path:
    """``data`` as a file named ``name`` in the staging directory (written only when missing
    or different, atomically, so concurrent plans share it safely); a temporary directory
    when the repository cannot be written."""
    for directory in (STAGING_DIR, Path(tempfile.gettempdir()) / "trainstack-artifacts"):
        path = directory / name
        try:
            if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
                return path
            directory.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
            return path
        except OSError:
            continue
    raise OSError(f"cannot stage {name} for upload: neither {STAGING_DIR} nor the temporary directory is writable")


def wheelhouse_manifest(wheelhouse: Wheelhouse) -> BuiltArtifact:
    """The list of a wheelhouse's wheels with their digests, which a node checks each wheel
    against; its own sha256 is pinned in the nodes' metadata."""
    entries = [{"file": name, "sha256": digest} for name, digest in sorted(wheelhouse.digests.items())]
    data = (json.dumps({"wheels": entries}, indent=1, sort_keys=True) + "\n").encode()
    return BuiltArtifact(LAYOUT.wheelhouse_manifest(hashlib.sha256(data).hexdigest()[:NAME_DIGEST_CHARS]), data)


def python_lock(data: bytes) -> BuiltArtifact:
    """A node environment's hash-locked requirements (locks/ in the repository), which the
    agent installs with ``pip install --require-hashes --no-deps``; its sha256 is pinned in
    the nodes' metadata."""
    return BuiltArtifact(LAYOUT.python_lock(hashlib.sha256(data).hexdigest()[:NAME_DIGEST_CHARS]), data)
