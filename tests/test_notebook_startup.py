"""What a Workbench notebook runs as root at startup is pinned by `pulumi up`, as a node's agent is.

Workbench's own `post-startup-script` key would have Workbench fetch and run whatever the bucket
object holds at that moment. The instance's `startup-script` (its metadata, which only the
deployer sets) fetches the post-startup object instead, checks it against the sha256 pinned
beside it, and runs it; one that does not match is not run and the notebook stops.

These tests run the rendered startup script with bash against a stand-in metadata server
(a real HTTP server on loopback), a stand-in `gcloud` that serves a bucket from a directory,
and the real rendered post-startup script as the object."""

from __future__ import annotations

import getpass
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from http_stand_in import Scripted, scripted_server

from stack_helpers import plan_for
from test_scripts import shellcheck
from trainstack.cloud import bootscripts
from trainstack.jobcode.artifacts import NAME_DIGEST_CHARS
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack, stack_file_path
from trainstack_contract import LAYOUT, METADATA_KEYS

WORKBENCH = "gcp:workbench/instance:Instance"
ATTRIBUTES = "/computeMetadata/v1/instance/attributes/"

# A stand-in `gcloud storage cp [--quiet] gs://BUCKET/OBJECT DEST` serving $BUCKET_DIR/OBJECT.
FAKE_GCLOUD = """#!/bin/bash
echo "$*" >> "$GCLOUD_CALLS"
[[ "$1 $2" == "storage cp" ]] || exit 2
source="${@: -2:1}"
object="${source#gs://*/}"
[[ -f "$BUCKET_DIR/$object" ]] || exit 1
cp -- "$BUCKET_DIR/$object" "${@: -1}"
"""


@dataclass(frozen=True)
class Notebook:
    startup: Path
    post_startup: str
    uri: str
    object_path: Path
    sha256: str


@pytest.fixture
def notebook(tmp_path: Path) -> Notebook:
    """The notebook stack's rendered scripts; its post-startup object in a stand-in bucket."""
    stack = resolve_stack(load_stack(stack_file_path("notebook"), "notebook")[0])
    boot = bootscripts.boot_files(stack)
    assert boot.notebook_script is not None
    assert boot.notebook_startup_script is not None
    startup = tmp_path / "workbench-startup.sh"
    startup.write_text(boot.notebook_startup_script)
    lint = shellcheck(startup)
    assert lint.returncode == 0, lint.stdout
    sha256 = hashlib.sha256(boot.notebook_script.encode()).hexdigest()
    name = LAYOUT.notebook_script(sha256[:NAME_DIGEST_CHARS])
    object_path = tmp_path / "bucket" / name
    object_path.parent.mkdir(parents=True)
    object_path.write_text(boot.notebook_script)
    return Notebook(startup, boot.notebook_script, f"{stack.bucket_uri}/{name}", object_path, sha256)


def boot(tmp_path: Path, notebook: Notebook, server: Scripted) -> subprocess.CompletedProcess[str]:
    """One boot of the notebook: Compute Engine runs its startup script as root."""
    server.answer(ATTRIBUTES + METADATA_KEYS.notebook_script, (200, notebook.uri.encode()))
    server.answer(ATTRIBUTES + METADATA_KEYS.notebook_script_sha256, (200, notebook.sha256.encode()))
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    for tool, body in {
        "gcloud": FAKE_GCLOUD,
        "chown": "#!/bin/sh\nexit 0\n",
        "nvidia-smi": "#!/bin/sh\nexit 1\n",
    }.items():
        (stubs / tool).write_text(body)
        (stubs / tool).chmod(0o755)
    environment = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "TRAINSTACK_METADATA_ROOT": server.root + "/computeMetadata/v1",
        "TRAINSTACK_STATE_DIR": str(tmp_path / "state"),
        "TRAINSTACK_SELF_STOP_LOG": str(tmp_path / "self-stop.log"),
        "TRAINSTACK_NOTEBOOK_HOME": str(tmp_path / "home"),
        "TRAINSTACK_NOTEBOOK_USER": getpass.getuser(),
        "TRAINSTACK_DRIVER_INSTALLER": str(tmp_path / "no-installer"),
        "BUCKET_DIR": str(tmp_path / "bucket"),
        "GCLOUD_CALLS": str(tmp_path / "gcloud-calls"),
        "MARKER": str(tmp_path / "tampered-code-ran"),
    }
    return subprocess.run(["bash", str(notebook.startup)], env=environment, capture_output=True, text=True, timeout=120)


def fetches(tmp_path: Path, notebook: Notebook) -> int:
    calls = tmp_path / "gcloud-calls"
    lines = calls.read_text().splitlines() if calls.exists() else []
    return sum(notebook.uri in line for line in lines)


def test_the_pinned_post_startup_script_runs_once(tmp_path: Path, notebook: Notebook) -> None:
    with scripted_server() as server:
        first = boot(tmp_path, notebook, server)
        assert first.returncode == 0, first.stderr
        note = tmp_path / "home" / "trainstack" / "README.txt"
        assert "This notebook belongs to the trainstack stack notebook." in note.read_text()
        assert not (tmp_path / "self-stop.log").exists()
        assert fetches(tmp_path, notebook) == 1
        # A later boot of the same deployment does not run it again (Workbench's run_once).
        note.unlink()
        again = boot(tmp_path, notebook, server)
    assert again.returncode == 0, again.stderr
    assert not note.exists()
    assert fetches(tmp_path, notebook) == 1


def test_a_tampered_post_startup_object_is_refused_and_the_notebook_stops(tmp_path: Path, notebook: Notebook) -> None:
    """Defect: Workbench ran the object as root with no digest check: whoever could write it
    became root on the notebook."""
    notebook.object_path.write_text('#!/bin/bash\ntouch "$MARKER"\n' + notebook.post_startup)
    with scripted_server() as server:
        completed = boot(tmp_path, notebook, server)
    assert completed.returncode != 0
    assert not (tmp_path / "tampered-code-ran").exists()
    assert not (tmp_path / "home" / "trainstack" / "README.txt").exists()
    assert f"{notebook.uri} does not match its sha256 in metadata" in completed.stderr
    assert "stop boot-script" in (tmp_path / "self-stop.log").read_text()
    # Nothing is recorded as done: the next boot checks again.
    assert not list((tmp_path / "state").glob("*.done"))


@pytest.mark.parametrize(
    "uri",
    ["gs://other-bucket/jobs/x/post-startup.sh", "gs://b/trainstack/notebook/post-startup-0123.sh; touch x"],
    ids=["not-the-layout", "not-a-name"],
)
def test_metadata_naming_another_object_is_refused(tmp_path: Path, notebook: Notebook, uri: str) -> None:
    with scripted_server() as server:
        completed = boot(tmp_path, Notebook(notebook.startup, "", uri, notebook.object_path, notebook.sha256), server)
    assert completed.returncode != 0
    assert "is not a notebook post-startup script" in completed.stderr
    assert fetches(tmp_path, notebook) == 0
    assert "stop boot-script" in (tmp_path / "self-stop.log").read_text()


def test_the_instance_pins_its_startup_in_metadata_and_sets_no_post_startup_script() -> None:
    """Workbench's post-startup-script key runs whatever the object holds when Workbench fetches
    it; the instance's startup-script (set by `pulumi up`) names the object and its sha256."""
    stack = resolve_stack(load_stack(stack_file_path("notebook"), "notebook")[0])
    boot_files = bootscripts.boot_files(stack)
    assert boot_files.notebook_script is not None
    sha256 = hashlib.sha256(boot_files.notebook_script.encode()).hexdigest()
    plan = plan_for("notebook")
    [instance] = plan.of_type(WORKBENCH)
    metadata = instance.inputs["gceSetup"]["metadata"]
    assert "post-startup-script" not in metadata
    assert metadata["startup-script"] == boot_files.notebook_startup_script
    assert metadata[METADATA_KEYS.notebook_script_sha256] == sha256
    [script] = plan.of_type("gcp:storage/bucketObject:BucketObject")
    assert script.inputs["name"] == LAYOUT.notebook_script(sha256[:NAME_DIGEST_CHARS])
    assert metadata[METADATA_KEYS.notebook_script] == f"{stack.bucket_uri}/{script.inputs['name']}"
