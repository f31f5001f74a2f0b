"""A GPU notebook's driver: Workbench installs one only through gceSetup.gpuDriverConfig, which
pulumi-gcp cannot set, and overwrites the `install-nvidia-driver` metadata key (one of its
protected keys). The rendered post-startup script installs it with the installer that Google's
Deep Learning images ship; these tests run that script against stand-ins for the GPU tools."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stack_helpers import plan_for
from test_scripts import shellcheck
from trainstack.cloud import bootscripts
from trainstack.stackmodel.resolved import resolve_stack
from trainstack.stackmodel.stackfile import load_stack, stack_file_path

WORKBENCH = "gcp:workbench/instance:Instance"


def post_startup_script(tmp_path: Path, gpus: bool) -> Path:
    cfg = load_stack(stack_file_path("notebook"), "notebook")[0]
    if not gpus:
        assert cfg.settings.notebook is not None
        notebook = cfg.settings.notebook.model_copy(update={"accelerator": None})
        cfg = cfg.model_copy(update={"settings": cfg.settings.model_copy(update={"notebook": notebook})})
    path = tmp_path / "post-startup.sh"
    path.write_text(bootscripts.render(bootscripts.WORKBENCH, resolve_stack(cfg)))
    assert shellcheck(path).returncode == 0
    return path


def run(tmp_path: Path, script: Path, installer: str | None) -> tuple[subprocess.CompletedProcess[str], str]:
    """Runs ``script`` with nvidia-smi answering only once ``installer`` (a shell body, or None for
    an image without one) has run; returns the run and the note left in the user's home."""
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    installed = tmp_path / "driver-installed"
    tools = {
        "nvidia-smi": f'#!/bin/sh\n[ -f "{installed}" ]\n',
        "gcloud": "#!/bin/sh\nexit 1\n",
        "chown": "#!/bin/sh\nexit 0\n",
    }
    for tool, body in tools.items():
        (stubs / tool).write_text(body)
        (stubs / tool).chmod(0o755)
    environment = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "TRAINSTACK_NOTEBOOK_HOME": str(tmp_path / "home"),
        "TRAINSTACK_DRIVER_INSTALLER": str(tmp_path / "install-driver.sh"),
        "INSTALLED": str(installed),
        "CALLS": str(tmp_path / "installer-calls"),
    }
    if installer is not None:
        (tmp_path / "install-driver.sh").write_text(f'#!/bin/sh\necho called >> "$CALLS"\n{installer}\n')
        (tmp_path / "install-driver.sh").chmod(0o755)
    completed = subprocess.run(["bash", str(script)], env=environment, capture_output=True, text=True, timeout=60)
    return completed, (tmp_path / "home" / "trainstack" / "README.txt").read_text()


def installer_calls(tmp_path: Path) -> int:
    calls = tmp_path / "installer-calls"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_a_gpu_notebook_installs_its_driver_with_the_images_installer(tmp_path: Path) -> None:
    completed, note = run(tmp_path, post_startup_script(tmp_path, gpus=True), 'touch "$INSTALLED"')
    assert completed.returncode == 0, completed.stderr
    assert installer_calls(tmp_path) == 1
    assert f"The NVIDIA driver was installed by {tmp_path / 'install-driver.sh'}." in note


def test_a_driver_already_there_is_not_installed_again(tmp_path: Path) -> None:
    (tmp_path / "driver-installed").touch()
    completed, note = run(tmp_path, post_startup_script(tmp_path, gpus=True), "exit 0")
    assert completed.returncode == 0, completed.stderr
    assert installer_calls(tmp_path) == 0
    assert "The NVIDIA driver was already installed." in note


@pytest.mark.parametrize("installer", [None, "exit 3", "exit 0"], ids=["missing", "failing", "no-driver-after"])
def test_a_driver_that_cannot_be_installed_is_said_in_the_notebook_and_the_log(
    tmp_path: Path, installer: str | None
) -> None:
    completed, note = run(tmp_path, post_startup_script(tmp_path, gpus=True), installer)
    assert completed.returncode == 0
    assert "The NVIDIA driver could not be installed" in note
    assert "The NVIDIA driver could not be installed" in completed.stderr


def test_a_cpu_notebook_installs_no_driver(tmp_path: Path) -> None:
    completed, note = run(tmp_path, post_startup_script(tmp_path, gpus=False), 'touch "$INSTALLED"')
    assert completed.returncode == 0, completed.stderr
    assert installer_calls(tmp_path) == 0
    assert "NVIDIA" not in note


def test_the_notebook_sets_no_protected_metadata_key() -> None:
    """Defect: the program set install-nvidia-driver, which Workbench overwrites: a GPU
    notebook came up without a driver."""
    [notebook] = plan_for("notebook").of_type(WORKBENCH)
    metadata = notebook.inputs["gceSetup"]["metadata"]
    assert "install-nvidia-driver" not in metadata
    assert metadata["startup-script"]
