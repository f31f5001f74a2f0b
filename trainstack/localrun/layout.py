"""Where everything of a local run is, and putting it in place: the stand-in bucket and the
job directory in it, each node with its metadata and state directory, the boot script."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from trainstack.base.bucket import Bucket, DirectoryBucket
from trainstack.cloud import bootscripts
from trainstack.jobcode.package import BUILTIN_SOURCE, builtin_package
from trainstack.localrun import staging
from trainstack.localrun.nodes import (
    LocalMachines,
    LocalNode,
    NodeSetup,
    TrainerOverrides,
    cluster_machines,
    tpu_machine,
)
from trainstack.localrun.outcome import LocalStackRunResult
from trainstack.localrun.standins import JobDirectory, job_directory, stand_in_json
from trainstack.localrun.workdir import (
    FIND_LINKS_DIR,
    JobUserUnreachable,
    job_user_obstacle,
    mark_workdir,
    nodes_python3,
)
from trainstack.stackmodel.resolved import ResolvedJob, ResolvedStack
from trainstack_contract import CHIEF, LAYOUT
from trainstack_contract.jobuser import JOB_USER_NAME
from trainstack_contract.lifecycle import JobState
from trainstack_contract.status import StatusDocument, StatusFormatError, utc_now


class LayoutOptions(TypedDict, total=False):
    """:func:`lay_out`'s options, for callers that pass them on."""

    trainer_source: Path
    kind: bootscripts.NodeKind | None
    environment_installed: bool
    gpu_count: int
    bucket: Bucket | None
    preempt: tuple[str, ...]
    idle_seconds: int | None


@dataclass(frozen=True)
class LocalRunLayout:
    stack: ResolvedStack
    workdir: Path
    kind: bootscripts.NodeKind
    bucket: Bucket
    # The job as the nodes' metadata names it: its job directory is the stand-in's.
    job: ResolvedJob | None
    job_directory: JobDirectory
    machines: LocalMachines
    environment_installed: bool

    @property
    def nodes(self) -> list[LocalNode]:
        return self.machines.nodes

    @property
    def nodes_bin(self) -> Path:
        """Where :func:`~trainstack.localrun.workdir.nodes_python3` links the nodes' ``python3``."""
        return self.workdir / "bin"

    @property
    def job_dir(self) -> Path | str:
        """A local path with the directory stand-in; a gs:// URI with a test's GcsBucket."""
        uri = self.job_directory.uri
        return Path(uri) if isinstance(self.bucket, DirectoryBucket) else uri

    @property
    def script(self) -> Path:
        return self.workdir / self.machines.script_name

    @property
    def self_stop_log(self) -> Path:
        return self.workdir / "self-stop.log"

    @property
    def pip_find_links(self) -> Path:
        return self.workdir / FIND_LINKS_DIR

    def prepare(self, echo: bool) -> None:
        """The work directory as ``pulumi up`` and the VMs' disks would leave it.
        :class:`~trainstack.localrun.workdir.JobUserUnreachable` when, run as root, the job's
        code could not run as the cloud's unprivileged job user here (the run would no longer
        show what the cloud enforces: never a quiet downgrade to root)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        obstacle = job_user_obstacle(self.workdir)
        if obstacle is not None:
            raise JobUserUnreachable(
                f"the job's code would run as root here, not as the unprivileged {JOB_USER_NAME} it runs as on the "
                f"cloud: {obstacle}"
            )
        mark_workdir(self.workdir, self.stack.stack)
        if not self.environment_installed:
            nodes_python3(self.workdir)
        self.script.write_text(bootscripts.render(self.machines.template, self.stack, self.kind))
        staging.upload_objects(self.bucket, self.job, self.stack.wheelhouse, self.kind.lock_artifact)
        staging.prepare_node_disks(self.nodes, self.kind.requirements_stamp, self.environment_installed)
        venv_python = self.nodes[0].state_dir / "venv" / "bin" / "python"
        python = venv_python if venv_python.exists() else Path(sys.executable)
        staging.fetch_for_pip(self.job, python, self.pip_find_links, echo)


def lay_out(
    stack: ResolvedStack,
    workdir: Path,
    overrides: TrainerOverrides,
    trainer_source: Path = BUILTIN_SOURCE,
    kind: bootscripts.NodeKind | None = None,
    environment_installed: bool = True,
    gpu_count: int = 0,
    bucket: Bucket | None = None,
    preempt: tuple[str, ...] = (),
    idle_seconds: int | None = None,
) -> LocalRunLayout:
    """``preempt``: nodes `--preempt` names (:func:`~trainstack.localrun.nodes.check_preemptible`
    says which may be named). ``idle_seconds``: how long nodes that run the job queue wait for
    a job before they end (`local --standing`: the stack's idle wait); None, a one-shot run: the
    nodes run no queue, the stack's own job alone, as before the queue.

    ``trainer_source``, ``kind`` and ``environment_installed`` let tests swap in a small
    built-in trainer and requirements and exercise the script's own install path;
    ``gpu_count`` is what the nodes' metadata says they have (this machine has none).

    ``bucket``: where the nodes' storage is; by default the directory
    ``<workdir>/bucket/<bucket name>``. A test passes a
    :class:`~trainstack.base.bucket.GcsBucket` to have the boot script write its status
    objects to Cloud Storage (an emulator) through ``gcloud storage``: the code archive and
    requirements are then uploaded there, the metadata names ``gs://NAME``, the status
    objects are read from there, and ``job_dir`` is a gs:// URI; node state and
    ``self-stop.log`` stay in ``workdir``."""
    if stack.cluster is None and stack.tpu is None:
        raise ValueError(f"stack {stack.name} has no trainstack:cluster or trainstack:tpu to run locally")
    workdir = workdir.resolve()
    kind = kind or (
        bootscripts.tpu_node_kind(stack.tpu, stack.zone) if stack.tpu is not None else bootscripts.cluster_node_kind()
    )
    # The bucket's stand-in: a directory of the same name; the layout inside is the bucket's.
    bucket = bucket or DirectoryBucket(workdir / "bucket" / stack.bucket_name)
    job = stack.job
    if job is not None and job.builtin and trainer_source != BUILTIN_SOURCE:
        job = dataclasses.replace(job, package=builtin_package(trainer_source))
    directory = job_directory(bucket, job, workdir)
    # The nodes' metadata names the stand-in, not the cloud's job directory.
    job = None if job is None else dataclasses.replace(job, job_dir=directory.uri)
    setup = NodeSetup(job, bucket.uri, overrides, kind, workdir, preempt, idle_seconds)
    machines = tpu_machine(stack, setup) if stack.tpu is not None else cluster_machines(stack, setup, gpu_count)
    return LocalRunLayout(stack, workdir, kind, bucket, job, directory, machines, environment_installed)


def collect_result(
    layout: LocalRunLayout, compute_calls: list[str], preemptions: list[tuple[str, float]]
) -> LocalStackRunResult:
    """What the run's nodes recorded (status objects, exits, self-stops, output) and what the
    stand-ins saw (Compute Engine calls, preemptions)."""
    directory = layout.job_directory
    bucket = directory.bucket

    def read(name: str) -> dict[str, Any] | None:
        return stand_in_json(bucket, name)

    self_stop_log = layout.self_stop_log
    return LocalStackRunResult(
        job_status=read(posixpath.join(directory.prefix, LAYOUT.job_status)),
        node_status={n.name: read(posixpath.join(directory.prefix, LAYOUT.node_status(n.name))) for n in layout.nodes},
        exit_codes={n.name: n.process.returncode if n.process else None for n in layout.nodes},
        self_stops=self_stop_log.read_text().splitlines() if self_stop_log.exists() else [],
        job_dir=layout.job_dir,
        logs={n.name: n.lines for n in layout.nodes},
        has_job=layout.job is not None,
        compute_calls=compute_calls,
        preemptions=preemptions,
    )


def _ended_how(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def _write_status(bucket: Bucket, name: str, document: StatusDocument) -> None:
    def write(destination: Path) -> None:
        partial = destination.with_name(destination.name + ".partial")
        partial.write_text(document.to_json())
        partial.replace(destination)

    bucket.put(name, write)


def record_lost_agents(layout: LocalRunLayout) -> list[str]:
    """Once every process of the run has ended: a node whose agent ended (killed, or a crash)
    while its status still said RUNNING is recorded FAILED, and so is the job when that node
    is the chief, as nothing else would ever end that state; the nodes so recorded. On the
    cloud the chief's heartbeat going stale says the same."""
    directory = layout.job_directory
    if layout.job is None:
        return []
    lost = []
    for local_node in layout.nodes:
        code = local_node.process.returncode if local_node.process is not None else None
        if code is None:
            continue
        names = [LAYOUT.node_status(local_node.name)] + ([LAYOUT.job_status] if local_node.role == CHIEF else [])
        for name in names:
            path = posixpath.join(directory.prefix, name)
            raw = stand_in_json(directory.bucket, path)
            try:
                document = StatusDocument.from_json(json.dumps(raw)) if raw is not None else None
            except StatusFormatError:
                continue
            if document is None or document.state != JobState.RUNNING:
                continue
            reason = f"the node agent of {local_node.name} ended ({_ended_how(code)}) without recording an end"
            failed = document.then(
                JobState.FAILED,
                time=utc_now(),
                incarnation=document.incarnation,
                attempt=document.attempt,
                exit_code=code,
                reason=reason,
            )
            _write_status(directory.bucket, path, failed)
            if local_node.name not in lost:
                lost.append(local_node.name)
    return lost
