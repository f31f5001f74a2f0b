"""A package index of wheels a test makes (uv's and pip's --find-links): what a resolution must
pick is then known, and no test reaches a real index. tests/conftest.py points every test's
requirement locks at an empty one of these, offline."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from trainstack.jobcode.node_environment import NODE_LOCK, locked_requirements


def node_pins(name: str) -> list[str]:
    """The versions locks/node.txt pins for ``name`` (one for each Python it marks)."""
    versions = [entry.version for entry in locked_requirements(NODE_LOCK.read_text()) if entry.name == name]
    pinned = [version for version in versions if version is not None]
    assert pinned == versions, f"locks/node.txt leaves {name} unpinned"
    assert pinned, f"locks/node.txt pins no {name}"
    return pinned


def wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> str:
    """A pure-Python wheel of ``name`` ``version`` in ``folder``; its sha256."""
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires
    )
    files = {
        f"{dist}.dist-info/METADATA": metadata,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
        f"{len(text.encode())}\n"
        for path, text in files.items()
    )
    files[f"{dist}.dist-info/RECORD"] = record + f"{dist}.dist-info/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return hashlib.sha256(path.read_bytes()).hexdigest()
