"""Only verified code runs: digests, archives and the wheelhouse manifest."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest

from agent_fakes import MemoryStorage
from trainstack_agent.artifacts import ArtifactError, DigestMismatch, fetch_verified, fetch_wheelhouse, unpack
from trainstack_agent.settings import Artifact

URI = "gs://bkt/trainstack/code/pkg-0123456789abcdef.zip"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_object_that_matches_its_digest_is_kept(tmp_path: Path) -> None:
    storage = MemoryStorage()
    storage.objects[URI] = b"code"
    assert fetch_verified(storage, Artifact(URI, sha(b"code")), tmp_path / "a.zip", 100).read_bytes() == b"code"  # type: ignore[arg-type]


def test_an_object_that_does_not_match_is_refused_by_name_and_removed(tmp_path: Path) -> None:
    storage = MemoryStorage()
    storage.objects[URI] = b"code written by someone else"
    with pytest.raises(DigestMismatch, match=r"trainstack/code/pkg-0123456789abcdef\.zip does not match"):
        fetch_verified(storage, Artifact(URI, sha(b"code")), tmp_path / "a.zip", 100)  # type: ignore[arg-type]
    assert not (tmp_path / "a.zip").exists()


def _zip(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
        if link is not None:
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16
            bundle.writestr(info, "/etc/passwd")
    return path


def test_an_archive_unpacks_its_files(tmp_path: Path) -> None:
    unpack(_zip(tmp_path / "a.zip", {"pkg/__init__.py": b"", "pkg/task.py": b"x = 1\n"}), tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "task.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("name", ["../escape.py", "/etc/cron.d/x", "pkg/../../escape.py"])
def test_a_member_outside_the_archive_root_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ArtifactError, match="outside its root"):
        unpack(_zip(tmp_path / "a.zip", {name: b"x"}), tmp_path / "out")
    assert not (tmp_path / "escape.py").exists()


def test_a_link_in_an_archive_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="has a link"):
        unpack(_zip(tmp_path / "a.zip", {"pkg/a.py": b""}, link="pkg/passwd"), tmp_path / "out")


def _wheelhouse(storage: MemoryStorage, wheels: dict[str, bytes], served: dict[str, bytes] | None = None) -> Artifact:
    prefix = "gs://bkt/trainstack/wheelhouse"
    manifest = json.dumps({"wheels": [{"file": name, "sha256": sha(data)} for name, data in wheels.items()]}).encode()
    storage.objects[f"{prefix}/manifest-0123456789abcdef.json"] = manifest
    for name, data in (served or wheels).items():
        storage.objects[f"{prefix}/{name}"] = data
    return Artifact(f"{prefix}/manifest-0123456789abcdef.json", sha(manifest))


def test_a_wheelhouse_is_fetched_wheel_by_wheel_each_verified(tmp_path: Path) -> None:
    storage = MemoryStorage()
    manifest = _wheelhouse(storage, {"a-1.0-py3-none-any.whl": b"A", "b-2.0-py3-none-any.whl": b"B"})
    paths = fetch_wheelhouse(storage, manifest, tmp_path / "wheels")  # type: ignore[arg-type]
    assert sorted(p.name for p in paths) == ["a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"]


def test_a_wheel_that_was_replaced_is_refused_by_name(tmp_path: Path) -> None:
    storage = MemoryStorage()
    manifest = _wheelhouse(
        storage,
        {"a-1.0-py3-none-any.whl": b"A"},
        served={"a-1.0-py3-none-any.whl": b"A with something added"},
    )
    with pytest.raises(DigestMismatch, match=r"a-1\.0-py3-none-any\.whl does not match"):
        fetch_wheelhouse(storage, manifest, tmp_path / "wheels")  # type: ignore[arg-type]


def test_a_manifest_that_was_replaced_is_refused(tmp_path: Path) -> None:
    storage = MemoryStorage()
    manifest = _wheelhouse(storage, {"a-1.0-py3-none-any.whl": b"A"})
    storage.objects[manifest.uri] += b" "
    with pytest.raises(DigestMismatch, match=re.escape("manifest-0123456789abcdef.json does not match")):
        fetch_wheelhouse(storage, manifest, tmp_path / "wheels")  # type: ignore[arg-type]


@pytest.mark.parametrize("file", ["../../etc/x.whl", "a b.whl", "a.tar.gz"])
def test_a_manifest_naming_anything_but_a_wheel_file_is_refused(tmp_path: Path, file: str) -> None:
    storage = MemoryStorage()
    manifest = _wheelhouse(storage, {file: b"A"})
    with pytest.raises(ArtifactError, match="not a wheel file name"):
        fetch_wheelhouse(storage, manifest, tmp_path / "wheels")  # type: ignore[arg-type]
