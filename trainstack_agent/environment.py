"""What the job's code needs on this machine: a Python environment, its code, or its image.

The environment is installed once per hash-locked requirements file (a stamp records its
sha256, so a restart after host maintenance or a preemption reuses it), with ``pip install
--require-hashes --no-deps``: pip refuses any file whose hash the lock does not list, from the
stack's verified wheelhouse when it declares one, else from the package index. The job's extra
requirements (hash-locked too, checked at `validate`) and code archive are fetched at every
boot, checked against their pinned digests first.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from trainstack_agent import artifacts
from trainstack_agent.gcs import Storage
from trainstack_agent.hypertune import fresh_metric_file
from trainstack_agent.jobuser import JobUser, prepare_job_user
from trainstack_agent.processes import Log, Processes
from trainstack_agent.settings import Artifact, NodeSettings, PythonSettings
from trainstack_contract import PROJECT_INSTALL, requirements_stamp

# Bounds on each install step: a hung mirror must not keep a node billing.
APT_SECONDS = 900
PIP_SECONDS = 3600
DOCKER_PULL_SECONDS = 3600
GCLOUD_SECONDS = 300


class PreparationError(Exception):
    """A step of preparing the job failed; the message says which."""


@dataclass(frozen=True)
class Prepared:
    """Where the job's code is, once prepared."""

    python: Path
    code_dir: Path | None
    state_dir: Path
    # The unprivileged user the job's code runs as (None: the agent's own user).
    user: JobUser | None = None
    # This job's own cloudml-hypertune report file (trainstack_agent.hypertune), if any.
    metric_file: Path | None = None


def run_step(processes: Processes, argv: list[str], timeout: float, what: str) -> None:
    """One install step, bounded by ``timeout``; :class:`PreparationError` names a failed one."""
    code = processes.run(argv, timeout)
    if code != 0:
        raise PreparationError(f"{what} failed (exit {code})")


@dataclass(frozen=True)
class PythonEnvironment:
    """The job's virtual environment: the pinned requirements once per lock, the job's extra
    requirements and its project once per content."""

    settings: PythonSettings
    state_dir: Path
    storage: Storage
    processes: Processes
    log: Log
    # Where pip finds what the job installs instead of a package index: `trainstack local`
    # fetches it there first, as its nodes reach no network.
    find_links: Path | None = None

    def _run(self, argv: list[str], timeout: float, what: str) -> None:
        run_step(self.processes, argv, timeout, what)

    @property
    def venv(self) -> Path:
        return self.state_dir / "venv"

    @property
    def wheelhouse(self) -> Path:
        return self.state_dir / "wheelhouse"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def _pip(self, *arguments: str, what: str) -> None:
        if self.wheelhouse.is_dir():
            source = ["--no-index", "--find-links", str(self.wheelhouse)]
        elif self.find_links is not None:
            source = ["--no-index", "--find-links", str(self.find_links)]
        else:
            source = ["--timeout", "60"]
        self._run([str(self.python), "-m", "pip", "install", "--quiet", *source, *arguments], PIP_SECONDS, what)

    def install(self) -> None:
        """The virtual environment with the pinned requirements, installed once per stamp."""
        python = self.settings
        stamp = requirements_stamp(python.lock.sha256 if python.lock is not None else None)
        marker = self.venv / ".trainstack-requirements"
        if marker.is_file() and marker.read_text().strip() == stamp:
            self.log(f"python environment ready ({self.venv})")
            return
        self.log(f"installing the python environment into {self.venv}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if importlib.util.find_spec("ensurepip") is None:
            # Stock Debian and Ubuntu images (parameter servers boot from one) lack venv support.
            self.log("installing python3-venv")
            self._run(["apt-get", "update", "-qq"], APT_SECONDS, "apt-get update")
            self._run(["apt-get", "install", "-y", "-qq", "python3-venv"], APT_SECONDS, "installing python3-venv")
        command = [sys.executable, "-m", "venv", str(self.venv)]
        if python.system_site_packages:
            command.insert(3, "--system-site-packages")
        self._run(command, 600, "creating the virtual environment")
        if python.wheelhouse is not None:
            shutil.rmtree(self.wheelhouse, ignore_errors=True)
            staging = self.state_dir / "wheelhouse.download"
            shutil.rmtree(staging, ignore_errors=True)
            artifacts.fetch_wheelhouse(self.storage, python.wheelhouse, staging)
            staging.rename(self.wheelhouse)
        if python.lock is not None:
            lock = artifacts.fetch_verified(
                self.storage, python.lock, self.state_dir / "requirements.lock", artifacts.MAX_LOCK_BYTES
            )
            self._pip("--require-hashes", "--no-deps", "-r", str(lock), what="installing the pinned requirements")
        marker.write_text(stamp + "\n")

    def job_requirements(self, requirements: Artifact) -> None:
        """The job's extra requirements file, verified, installed once per content."""
        marker = self.venv / ".trainstack-job-requirements"
        if marker.is_file() and marker.read_text().strip() == requirements.sha256:
            return
        self.log(f"installing the job's requirements ({requirements.name})")
        path = artifacts.fetch_verified(
            self.storage, requirements, self.state_dir / "job-requirements.txt", artifacts.MAX_REQUIREMENTS_BYTES
        )
        # Hash-locked (`validate` refuses any other file): pip refuses a file the lock does not
        # name, and a dependency the file does not list unless the environment already has it.
        self._pip("--require-hashes", "-r", str(path), what="installing the job's requirements")
        marker.write_text(requirements.sha256 + "\n")

    def project(self, code_dir: Path, archive: Artifact) -> None:
        """The job's project (pyproject.toml or setup.py), installed with pip with its
        dependencies, once per archive: a restart reuses it."""
        marker = self.venv / ".trainstack-job-project"
        if marker.is_file() and marker.read_text().strip() == archive.sha256:
            return
        self.log(f"installing the job's project ({archive.name})")
        self._pip(str(code_dir), what="installing the job's project")
        marker.write_text(archive.sha256 + "\n")


# Written into a code directory once its archive is wholly unpacked: the archive's sha256.
UNPACKED_MARKER = ".trainstack-unpacked"


class Environment:
    """Everything the job's code needs before it starts: its Python environment
    (:class:`PythonEnvironment`) and code archive, or its image; and the job's user."""

    def __init__(
        self,
        settings: NodeSettings,
        state_dir: Path,
        storage: Storage,
        processes: Processes,
        log: Log,
        skip_registry_login: bool = False,
        find_links: Path | None = None,
        job_as_agent_user: bool = False,
    ) -> None:
        self.settings = settings
        self.state_dir = state_dir
        self.storage = storage
        self.packages = PythonEnvironment(settings.python, state_dir, storage, processes, log, find_links)
        self.processes = processes
        self.log = log
        self.skip_registry_login = skip_registry_login
        self.job_as_agent_user = job_as_agent_user

    @property
    def python(self) -> Path:
        return self.packages.python

    def _run(self, argv: list[str], timeout: float, what: str) -> None:
        run_step(self.processes, argv, timeout, what)

    def code(self, archive: Artifact) -> Path:
        """The job's code archive, verified and unpacked into a directory named after it, once
        for as long as the node's jobs run that code: a standing node's warm interpreter may
        still import from it as it rehearses the job before (trainstack_agent.warm), and must
        not see it removed or half unpacked. It is the agent's, and the job's user may only
        read it. A directory a stopped unpacking left incomplete is unpacked afresh, and the
        code of other archives goes."""
        code_root = self.state_dir / "code"
        destination = code_root / archive.name.removesuffix(".zip")
        marker = destination / UNPACKED_MARKER
        try:
            unpacked = marker.read_text(encoding="utf-8").strip() == archive.sha256
        except OSError:
            unpacked = False
        if not unpacked:
            shutil.rmtree(destination, ignore_errors=True)
            downloaded = artifacts.fetch_verified(
                self.storage, archive, self.state_dir / "code.zip", artifacts.MAX_ARCHIVE_BYTES
            )
            artifacts.unpack(downloaded, destination)
            marker.write_text(archive.sha256 + "\n", encoding="utf-8")
        for other in code_root.iterdir():
            if other != destination:
                if other.is_dir() and not other.is_symlink():
                    shutil.rmtree(other, ignore_errors=True)
                else:
                    other.unlink(missing_ok=True)
        return destination

    def docker(self, image: str) -> None:
        """Docker (from the OS's packages where the image lacks it), the NVIDIA runtime on a GPU
        node, registry credentials, and the job's image."""
        if shutil.which("docker") is None:
            self.log("installing Docker (docker.io)")
            self._run(["apt-get", "update", "-qq"], APT_SECONDS, "apt-get update")
            self._run(["apt-get", "install", "-y", "-qq", "docker.io"], APT_SECONDS, "installing Docker")
        if self.settings.gpu_count > 0 and shutil.which("nvidia-ctk") is not None:
            # Installed above where it was missing: Debian's docker.io puts it in /usr/bin.
            docker = shutil.which("docker") or "/usr/bin/docker"
            info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=60, check=False)
            if "nvidia" not in info.stdout.lower():
                self.log("configuring the NVIDIA container runtime for Docker")
                self._run(["nvidia-ctk", "runtime", "configure", "--runtime=docker"], 120, "configuring nvidia-ctk")
                self._run(["systemctl", "restart", "docker"], 120, "restarting Docker")
        if not self.skip_registry_login:
            registry = image.split("/", 1)[0]
            self._run(
                ["gcloud", "auth", "configure-docker", registry, "--quiet"], GCLOUD_SECONDS, "registry credentials"
            )
        self._run(["docker", "pull", "--quiet", image], DOCKER_PULL_SECONDS, f"pulling {image}")

    def prepare_for_job_user(self) -> Prepared:
        """:meth:`prepare`, then the job's user (:mod:`trainstack_agent.jobuser`), with what a
        module's code reads shared with it read-only, and the job's own hypertune report file. An image job's docker client stays root's
        (Docker's socket is root's to use); its container runs as that user."""
        prepared = self.prepare()
        job = self.settings.job
        assert job is not None
        user = None
        if not self.job_as_agent_user:
            readable = (self.packages.venv, self.state_dir / "code") if job.module is not None else ()
            user = prepare_job_user(self.state_dir, readable, job.job_dir)
        # A new report file for every job: a standing node's next job never sees this one's.
        return replace(prepared, user=user, metric_file=fresh_metric_file(self.state_dir, user))

    def prepare(self) -> Prepared:
        """Everything the job's code needs before it starts."""
        job = self.settings.job
        assert job is not None
        if job.image is not None:
            self.docker(job.image)
            return Prepared(self.python, None, self.state_dir)
        assert job.code is not None
        self.packages.install()
        if job.requirements is not None:
            self.packages.job_requirements(job.requirements)
        code_dir = self.code(job.code)
        if job.install == PROJECT_INSTALL:
            self.packages.project(code_dir, job.code)
            # Installed: run from the environment, not from the unpacked tree.
            return Prepared(self.python, None, self.state_dir)
        return Prepared(self.python, code_dir, self.state_dir)
