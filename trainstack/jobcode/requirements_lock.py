"""A team's requirements file as the nodes install it: hash-locked, resolved once for them.

Nodes install a job's requirements with ``pip install --require-hashes``. A team's file as
AI Platform took it (``numpy>=1.14``, ``cloudml-hypertune``) pins nothing, so trainstack locks
it: ``uv pip compile --generate-hashes --universal`` resolves it once, for every Python the
nodes' images run, with the node environment's own lock as constraints (so no version a
node pins moves), through the package index this machine's pip is set up for. The lock is
kept in ``.trainstack/requirement-locks/`` (git-ignored; or where TRAINSTACK_REQUIREMENT_LOCKS
says), named by the digests of the file
and of those constraints: a later `validate`, `plan` or `pulumi up` of the same file uses it
without reaching an index, and it is what `pulumi up` uploads and every node installs. A file
that is already hash-locked is used as it is.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainstack.base.project import PROJECT_ROOT
from trainstack.jobcode.node_environment import NODE_LOCK, tpu_lock, unhashed_requirements

# Where locks are kept; TRAINSTACK_REQUIREMENT_LOCKS names another folder (a CI cache).
LOCKS_VARIABLE = "TRAINSTACK_REQUIREMENT_LOCKS"
LOCK_DIR = Path(os.environ.get(LOCKS_VARIABLE) or PROJECT_ROOT / ".trainstack" / "requirement-locks")
# The oldest and the newest Python of the nodes' images (TPU VM: 3.10; Deep Learning VM: 3.12):
# one universal resolution covers them all, as scripts/lock does for the node environment.
NODE_PYTHON = "3.10"
# Bound on one resolution: a hung index must not hang `validate`.
RESOLVE_SECONDS = 300
# Characters of uv's error quoted in the one line that says why a lock could not be made.
MAX_SAID = 300
# The first line of every lock trainstack writes: a file without it is not one of ours.
LOCK_HEADER = "# Hash-locked by trainstack for the nodes"


class LockError(ValueError):
    """The requirements could not be locked; the message says why, in one line."""


@dataclass(frozen=True)
class Constraints:
    """What the nodes have installed before the job's requirements: versions a lock keeps."""

    name: str  # shown in the lock's header and messages: locks/node.txt
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def node_constraints() -> Constraints:
    """A cluster node's environment: locks/node.txt, every package with its version."""
    return Constraints(f"{NODE_LOCK.parent.name}/{NODE_LOCK.name}", NODE_LOCK.read_text(encoding="utf-8"))


def tpu_constraints(tensorflow_version: str) -> Constraints:
    """A TPU VM's: its runtime's TensorFlow and what trainstack adds to it (locks/tpu-tf-X.Y.txt)."""
    minor = ".".join(tensorflow_version.split(".")[:2])
    lock = tpu_lock(minor)
    added = lock.read_text(encoding="utf-8") if lock.is_file() else ""
    pinned = f"tensorflow=={tensorflow_version}\n"
    return Constraints(f"{lock.parent.name}/{lock.name}", pinned + added)


def is_hash_locked(text: str) -> bool:
    """Every requirement pinned with == and carrying a hash: pip's --require-hashes takes it."""
    return not unhashed_requirements(text)


def lock_path(data: bytes, constraints: Constraints) -> Path:
    """Where the lock of a file with content ``data`` against ``constraints`` is kept."""
    return LOCK_DIR / f"{hashlib.sha256(data).hexdigest()[:16]}-{constraints.sha256[:16]}.txt"


def pip_index_options(python: str = sys.executable) -> list[str]:
    """uv's option for the package index this machine's pip installs from (its configuration
    files' index-url, or PIP_INDEX_URL): uv reads neither. Empty when pip names none (PyPI, or
    what uv's own settings say: UV_INDEX_URL, UV_EXTRA_INDEX_URL, uv.toml). pip's extra indexes
    and find-links are not carried over: a lock is resolved for every Python the nodes run, and
    a local mirror holding one Python's wheels of a version would hide the index's others."""
    if os.environ.get("PIP_INDEX_URL"):
        return ["--index-url", os.environ["PIP_INDEX_URL"]]
    try:
        listed = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        listed = ""
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.rpartition(".")[2] == "index-url" and value.strip().strip("'\""):
            return ["--index-url", value.strip().strip("'\"")]
    return []


def _uv() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        raise LockError("uv is not installed in trainstack's environment: run scripts/bootstrap") from None
    return str(find_uv_bin())


def _resolve(name: str, data: bytes, constraints: Constraints) -> str:
    """``uv pip compile`` of the file against the constraints, in a scratch folder holding them
    under their own names (so that the lock's annotations name them, not the folder)."""
    with tempfile.TemporaryDirectory(prefix="trainstack-lock-") as scratch:
        folder = Path(scratch)
        constraint_name = Path(constraints.name).name
        (folder / name).write_bytes(data)
        (folder / constraint_name).write_text(constraints.text, encoding="utf-8")
        command = [
            _uv(),
            *("pip", "compile", "--quiet", "--no-header", "--generate-hashes", "--universal"),
            *("--python-version", NODE_PYTHON, "--no-cache", "--constraint", constraint_name),
            *pip_index_options(),
            *(name, "--output-file", "lock.txt"),
        ]
        try:
            completed = subprocess.run(
                command, cwd=folder, capture_output=True, text=True, timeout=RESOLVE_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            raise LockError(f"uv did not resolve it within {RESOLVE_SECONDS} s") from None
        if completed.returncode != 0:
            raise LockError(uv_failure(completed.stderr, completed.returncode))
        return (folder / "lock.txt").read_text(encoding="utf-8")


def pinned_lines(text: str) -> list[str]:
    """Each requirement of a lock without its hashes: ``numpy==2.2.6 ; python_full_version < '3.11'``."""
    from trainstack.jobcode.node_environment import requirement_lines

    return [line.split(" --", 1)[0].strip() for _, line in requirement_lines(text)]


def uv_failure(stderr: str, returncode: int) -> str:
    """uv's error in one line: what failed (its first line) and the last cause it gives (an
    index it cannot reach, the requirements that exclude each other)."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not said:
        return f"uv exit {returncode}"
    causes = [line.removeprefix("cause:").strip() for line in said if line.startswith("cause:")]
    first = said[0].removeprefix("error:").strip()
    text = "; ".join(dict.fromkeys([first, *causes[-1:]]))
    return text if len(text) <= MAX_SAID else text[: MAX_SAID - 3] + "..."


def lock_requirements(path: Path, shown: str, data: bytes, constraints: Constraints) -> tuple[bytes, Path]:
    """The hash lock of the requirements file ``path`` (content ``data``, ``shown`` in messages):
    the one kept from an earlier resolution, else a new one, kept. LockError says why not."""
    kept = lock_path(data, constraints)
    if kept.is_file():
        text = kept.read_text(encoding="utf-8", errors="replace")
        if text.startswith(LOCK_HEADER) and is_hash_locked(text):
            return text.encode(), kept
    try:
        resolved = _resolve(path.name, data, constraints)
    except LockError as error:
        raise LockError(
            f"{shown} pins no versions, so trainstack locks it for the nodes, and could not: {error} (lock it where "
            f"the package index is reachable, or give a file written by `uv pip compile --generate-hashes`)"
        ) from None
    header = (
        f"{LOCK_HEADER}: {shown}\n"
        f"#   sha256 {hashlib.sha256(data).hexdigest()}\n"
        f"# resolved keeping every version {constraints.name} pins\n"
        f"#   sha256 {constraints.sha256}\n"
        f"# by `uv pip compile {shlex.join(['--generate-hashes', '--universal', '--python-version', NODE_PYTHON])}`.\n"
    )
    text = header + resolved
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(kept)
    return text.encode(), kept
