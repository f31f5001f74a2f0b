"""storage.wheelhouse: wheels `pulumi up` uploads for nodes to install from, each pinned by digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from stack_helpers import base_config, plan_of, write_stack
from trainstack.commands.main import main
from trainstack.jobcode.node_environment import NODE_LOCK, locked_requirements
from trainstack_contract import LAYOUT

INSTANCE = "gcp:compute/instance:Instance"
OBJECT = "gcp:storage/bucketObject:BucketObject"
# Wheels for what the cluster's machines' lock pins (locks/node.txt, every dependency), by
# name: validation reads names and versions, pip on the nodes the bytes (against the lock's hashes).
PINNED = {
    f"{entry.name.replace('-', '_')}-{entry.version}-py3-none-any.whl": entry.name.encode()
    for entry in locked_requirements(NODE_LOCK.read_text(encoding="utf-8"))
    if entry.marker is None
}


def wheelhouse(tmp_path: Path, files: dict[str, bytes]) -> Path:
    directory = tmp_path / "wheels"
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


def config_with(directory: Path) -> dict[str, object]:
    config = base_config()
    config["trainstack:storage"] = {"wheelhouse": str(directory)}
    return config


def test_every_wheel_is_uploaded_and_the_nodes_pin_the_manifest_that_lists_their_digests(tmp_path: Path) -> None:
    wheels = {**PINNED, "a-1.0-py3-none-any.whl": b"A"}
    plan = plan_of(write_stack(tmp_path, config_with(wheelhouse(tmp_path, wheels))))
    objects = {o.inputs["name"]: o.inputs for o in plan.of_type(OBJECT)}
    for name, data in wheels.items():
        assert objects[LAYOUT.wheel(name)]["source"]["sha256"] == hashlib.sha256(data).hexdigest()
    [manifest_name] = [name for name in objects if name.startswith(f"{LAYOUT.wheelhouse}/manifest-")]
    for vm in plan.of_type(INSTANCE):
        metadata = vm.inputs["metadata"]
        assert metadata["trainstack-wheelhouse"] == manifest_name
        assert metadata["trainstack-wheelhouse-sha256"] == objects[manifest_name]["source"]["sha256"]
    staged = Path(__file__).resolve().parents[1] / ".trainstack" / "artifacts" / manifest_name.rsplit("/", 1)[1]
    listed = json.loads(staged.read_text())["wheels"]
    assert listed == [{"file": n, "sha256": hashlib.sha256(d).hexdigest()} for n, d in sorted(wheels.items())]


def test_a_stack_without_one_installs_from_the_index_and_says_what_the_nat_carries(tmp_path: Path) -> None:
    plan = plan_of(write_stack(tmp_path, base_config()))
    assert all("trainstack-wheelhouse" not in vm.inputs["metadata"] for vm in plan.of_type(INSTANCE))
    assert any("through Cloud NAT (none with storage.wheelhouse)" in note for note in plan.cost.notes)


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"tensorflow-2.21.0.tar.gz": b"x"}, "is not a wheel"),
        ({**PINNED, "notes.txt": b"x"}, "is not a wheel"),
        ({}, "holds no wheels"),
        ({"tf_keras-2.21.0-py3-none-any.whl": b"x"}, "tensorflow==2.21.0, "),
        ({k: v for k, v in PINNED.items() if not k.startswith("nvidia_cudnn")}, "no wheel for nvidia-cudnn-cu12=="),
        ({**PINNED, "tensorflow-2.20.0-cp312-cp312-manylinux_2_27_x86_64.whl": b"x"}, None),
    ],
)
def test_what_is_not_a_directory_of_the_wheels_the_machines_need_is_refused_by_key(
    tmp_path: Path, files: dict[str, bytes], words: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_stack(tmp_path, config_with(wheelhouse(tmp_path, files)))
    if words is None:
        assert main(["validate", "--stack-file", str(path)]) == 0
        return
    assert main(["validate", "--stack-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert "trainstack:storage.wheelhouse" in err
    assert words in err
    assert "Traceback" not in err


def test_a_link_in_a_wheelhouse_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = wheelhouse(tmp_path, PINNED)
    (directory / "b-1.0-py3-none-any.whl").symlink_to("/etc/passwd")
    assert main(["validate", "--stack-file", str(write_stack(tmp_path, config_with(directory)))]) == 1
    assert "is not a regular file" in capsys.readouterr().err
