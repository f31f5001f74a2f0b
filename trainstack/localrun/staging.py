"""What a local run puts in place before its nodes boot, as ``pulumi up`` and a VM's disk
would have it: the bucket's objects (the agent, the wheelhouse, the job's code and
requirements), each node's Python environment, and what the nodes' pip installs."""

from __future__ import annotations

import functools
import shutil
import sys
from pathlib import Path

import trainstack_contract as contract
from trainstack.base.bucket import Bucket
from trainstack.jobcode import artifacts
from trainstack.jobcode.package import Wheelhouse
from trainstack.localrun import workdir
from trainstack.localrun.nodes import LocalNode
from trainstack.localrun.wheels import fetch_for_nodes
from trainstack.stackmodel.resolved import ResolvedJob


def _copy_into(source: Path, destination: Path) -> None:
    shutil.copyfile(source, destination)


def upload_objects(
    bucket: Bucket, job: ResolvedJob | None, wheelhouse: Wheelhouse | None, lock: artifacts.BuiltArtifact
) -> None:
    """The objects ``pulumi up`` uploads: the node agent, the nodes' lock, the wheelhouse with
    its manifest, the job's code archive and requirements."""
    agent = artifacts.agent_archive()
    bucket.put(agent.object_name, lambda destination: destination.write_bytes(agent.data))
    bucket.put(lock.object_name, lambda destination: destination.write_bytes(lock.data))
    if wheelhouse is not None:
        manifest = artifacts.wheelhouse_manifest(wheelhouse)
        bucket.put(manifest.object_name, lambda destination: destination.write_bytes(manifest.data))
        for filename, path in wheelhouse.wheels.items():
            bucket.put(contract.LAYOUT.wheel(filename), functools.partial(_copy_into, path))
    if job is not None and job.package is not None:
        bucket.put(job.package.object_name, job.package.write_archive)
    if job is not None and job.requirements is not None:
        checked = job.requirements.data
        bucket.put(job.requirements.object_name, lambda destination: destination.write_bytes(checked))


def python_for_nodes() -> Path:
    """The interpreter the nodes' environments are made from: this one, or one the job's
    unprivileged user can run (:func:`~trainstack.localrun.workdir.interpreter_for_job_user`)."""
    return workdir.interpreter_for_job_user() or Path(sys.executable)


def prepare_local_environment(env_dir: Path, stamp: str) -> None:
    """A virtual environment that sees this interpreter's packages, stamped as the boot
    script stamps a finished install: the nodes then take the already-installed path.

    Installing TensorFlow again per local node would take minutes and prove nothing new;
    the install path itself is exercised by the tests with a small wheelhouse.
    """
    marker = env_dir / ".trainstack-requirements"
    python = python_for_nodes()
    made_from = env_dir / "bin" / "python"
    if marker.exists() and marker.read_text().strip() == stamp and made_from.resolve() == python.resolve():
        return
    workdir.host_packages_venv(env_dir, python, clear=True)
    marker.write_text(stamp + "\n")


def prepare_node_disks(nodes: list[LocalNode], requirements_stamp: str, environment_installed: bool) -> None:
    """Each node's state directory (its disk) and, with ``environment_installed``, its
    Python environment: one per node, as each machine has its own, so the job's
    requirements and project are installed by every node's agent, as on the cloud."""
    for local_node in nodes:
        local_node.state_dir.mkdir(parents=True, exist_ok=True)
        venv = local_node.state_dir / "venv"
        if venv.is_symlink():
            # A work directory of an earlier version, whose nodes shared one environment.
            venv.unlink()
        if environment_installed:
            prepare_local_environment(venv, requirements_stamp)


def fetch_for_pip(job: ResolvedJob | None, python: Path, find_links: Path, echo: bool) -> None:
    """What the nodes' pip installs (the job's requirements and project), fetched here
    first into ``find_links``: the nodes reach no package index (:mod:`trainstack.localrun.wheels`)."""
    if job is None or job.package is None:
        return
    project = job.package.source if job.package.install == contract.PROJECT_INSTALL else None
    requirements = job.requirements.installed_file if job.requirements is not None else None
    if project is None and requirements is None:
        return
    if echo:
        print("[local] fetching what the nodes install with pip (they reach no package index)", flush=True)
    fetched = fetch_for_nodes(python, find_links, requirements, project)
    if echo and fetched:
        print(f"[local] fetched {', '.join(fetched)}", flush=True)
