"""``trainstack local``: a stack's training cluster run on this machine by its own boot script
and node agent.

Each node (chief, workers, parameter servers) is one ``bash cluster-node.sh`` process: the
script ``pulumi up`` would put on the VM, rendered the same way, which fetches and runs the
same node agent (``trainstack_agent``). Only the agent's cloud is bound to local stand-ins,
through its ``TRAINSTACK_*`` variables:

- metadata: an HTTP server answering as the metadata server does, with the attributes
  :func:`trainstack.cloud.bootscripts.node_metadata` gives the Pulumi program;
- storage: a local directory stands in for the stack's bucket (plain paths are used as they
  are), holding the agent, the trainer package, the job directory and status objects
  (:mod:`trainstack.localrun.standins`; the tests can name a real bucket instead);
- self-stop: recorded in ``self-stop.log`` instead of shutting the machine down;
- compute: an HTTP server answering the Compute Engine API calls the chief makes for its
  Spot peers (get an instance, start it), each recorded in ``compute-api.log``; a start
  boots the stopped node again through the same boot script (:mod:`trainstack.localrun.spot`).
  ``--preempt`` stops a node as Compute Engine preempts a Spot VM: its metadata says
  preempted, SIGTERM to every process of the node, then SIGKILL after a grace period.

The nodes and these servers share a network namespace whose only interface is loopback
(:mod:`trainstack.localrun.netns`), where one can be made. Everything runs on the CPU whatever GPUs
the stack names; TF_CONFIG addresses are loopback ports instead of internal DNS names.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import trainstack_contract as contract
from trainstack.cloud import bootscripts
from trainstack.jobcode.package import BUILTIN_SOURCE, builtin_package
from trainstack.localrun import staging
from trainstack.localrun.netns import LoopbackNetwork, NamespaceUnavailable
from trainstack.localrun.nodelogs import NodeLogWriter, is_runtime_noise
from trainstack.localrun.nodes import LocalMachines, LocalNode, TrainerOverrides, cluster_machines, tpu_machine
from trainstack.localrun.outcome import LocalStackRunInterrupted, LocalStackRunResult
from trainstack.localrun.spot import PREEMPT_GRACE_SECONDS, SpotMachines
from trainstack.localrun.standins import (
    ComputeApiServer,
    DirectoryBucket,
    MetadataServer,
    StandInBucket,
    job_directory,
)
from trainstack.localrun.supervisor import Supervisor
from trainstack.localrun.workdir import WORKDIR_MARKER, check_adoptable, clear_workdir
from trainstack.stackmodel.resolved import ResolvedJob, ResolvedStack

# After SIGINT or SIGTERM, how long the nodes get to record INTERRUPTED and end their
# trainers (each agent gives its trainer 10 s) before what is left is killed.
INTERRUPT_GRACE_SECONDS = 15.0
# After the chief's script exits, how long the other nodes may take to end on their own
# (parameter servers notice the finished job by polling the job directory).
GRACE_SECONDS = 90.0
POLL_SECONDS = 0.1
# Local nodes share two cores: one intra-op thread pool per process keeps them from thrashing.
THREADS_PER_NODE = "1"


def node_environment(
    local_node: LocalNode, metadata_root: str, compute_root: str, self_stop_log: Path, pip_find_links: Path
) -> dict[str, str]:
    """This process's environment with the node agent's cloud bound to the run's stand-ins,
    and TensorFlow kept to the CPU and one thread pool."""
    environment = dict(os.environ)
    environment.update(
        TRAINSTACK_METADATA_ROOT=metadata_root,
        TRAINSTACK_COMPUTE_API=compute_root,
        TRAINSTACK_STATE_DIR=str(local_node.state_dir),
        TRAINSTACK_SELF_STOP_LOG=str(self_stop_log),
        TRAINSTACK_PROFILE_DIR=str(local_node.state_dir),
        # The local Docker engine pulls with the credentials its user set up.
        TRAINSTACK_SKIP_REGISTRY_LOGIN="1",
        # pip on a node installs from what staging.fetch_for_pip put there: nodes reach no index.
        TRAINSTACK_PIP_FIND_LINKS=str(pip_find_links),
        # A job's secrets come from this environment, as the caller exported them.
        TRAINSTACK_SECRETS_FROM_ENVIRONMENT="1",
        # gs:// objects (a test's GcsBucket) go to the emulator the client library uses.
        **(
            {"TRAINSTACK_STORAGE_API": os.environ["STORAGE_EMULATOR_HOST"]}
            if "STORAGE_EMULATOR_HOST" in os.environ
            else {}
        ),
        # The machine has no GPU; every node trains on the CPU whatever the stack names.
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_NUM_INTRAOP_THREADS=THREADS_PER_NODE,
        OMP_NUM_THREADS=THREADS_PER_NODE,
        PYTHONUNBUFFERED="1",
    )
    return environment


def loopback_network(
    isolate: bool, bucket: StandInBucket, job: ResolvedJob | None
) -> tuple[LoopbackNetwork | None, str | None]:
    """A namespace with nothing but loopback for the nodes and the stand-ins they call, when
    one can be made (else a note why not); none for a bucket or an image that lives in this
    machine's own network (an emulator, the Docker engine)."""
    if not isolate or not isinstance(bucket, DirectoryBucket) or (job is not None and job.image is not None):
        return None, None
    try:
        return LoopbackNetwork.create(), None
    except NamespaceUnavailable as reason:
        return None, f"TensorFlow's gRPC servers of this run listen on every interface of this machine ({reason})"


class LocalStackRun:
    """Starts every node's boot script, streams its output, and waits by the chief."""

    def __init__(
        self,
        stack: ResolvedStack,
        workdir: Path,
        overrides: TrainerOverrides,
        echo: bool = True,
        trainer_source: Path = BUILTIN_SOURCE,
        kind: bootscripts.NodeKind | None = None,
        environment_installed: bool = True,
        gpu_count: int = 0,
        verbose: bool = False,
        bucket: StandInBucket | None = None,
        preempt: tuple[str, ...] = (),
        preempt_after: float = 0.0,
        isolate_network: bool = True,
    ) -> None:
        """``preempt``: nodes to preempt ``preempt_after`` seconds after the start, as Compute
        Engine preempts a Spot VM (:class:`~trainstack.localrun.spot.SpotMachines`);
        :func:`~trainstack.localrun.nodes.check_preemptible` says which nodes may be named.

        ``trainer_source``, ``kind`` and ``environment_installed`` let tests swap in a
        small built-in trainer and requirements and exercise the script's own install path;
        ``gpu_count`` is what the nodes' metadata says they have (this machine has none).

        ``bucket``: where the nodes' storage is; by default the directory
        ``<workdir>/bucket/<bucket name>``. A test passes a
        :class:`~trainstack.localrun.standins.GcsBucket` to have the boot script write its
        status objects to Cloud Storage (an emulator) through ``gcloud storage``: the code
        archive and requirements are then uploaded there, the metadata names ``gs://NAME``,
        :meth:`result` reads the status objects from there, and ``job_dir`` is a gs:// URI;
        node state and ``self-stop.log`` stay in ``workdir``."""
        if stack.cluster is None and stack.tpu is None:
            raise ValueError(f"stack {stack.name} has no trainstack:cluster or trainstack:tpu to run locally")
        self.stack = stack
        self.workdir = workdir.resolve()
        self.echo = echo
        self.kind = kind or (
            bootscripts.tpu_node_kind(stack.tpu, stack.zone)
            if stack.tpu is not None
            else bootscripts.cluster_node_kind()
        )
        self.environment_installed = environment_installed
        # The bucket's stand-in: a directory of the same name; the layout inside is the bucket's.
        self.bucket: StandInBucket = bucket or DirectoryBucket(self.workdir / "bucket" / stack.bucket_name)
        job = stack.job
        if job is not None and job.builtin and trainer_source != BUILTIN_SOURCE:
            job = dataclasses.replace(job, package=builtin_package(trainer_source))
        self.job_directory = job_directory(self.bucket, job, self.workdir)
        # The nodes' metadata names the stand-in, not the cloud's job directory.
        self.job: ResolvedJob | None = None if job is None else dataclasses.replace(job, job_dir=self.job_directory.uri)
        self.job_dir: Path | str = (
            Path(self.job_directory.uri) if isinstance(self.bucket, DirectoryBucket) else self.job_directory.uri
        )
        self.self_stop_log = self.workdir / "self-stop.log"
        self.machines: LocalMachines = (
            tpu_machine(stack, self.job, self.bucket.uri, overrides, self.kind, self.workdir, preempt)
            if stack.tpu is not None
            else cluster_machines(
                stack, self.job, self.bucket.uri, overrides, self.kind, self.workdir, preempt, gpu_count
            )
        )
        self.nodes = self.machines.nodes
        self.script = self.workdir / self.machines.script_name
        self.network, self.network_note = loopback_network(isolate_network, self.bucket, self.job)
        shown = None if verbose else (lambda line: not is_runtime_noise(line))
        self.supervisor = Supervisor(echo=echo, poll_seconds=POLL_SECONDS, shown=shown)
        self.spot = SpotMachines(self.supervisor, self.nodes, self._boot_again, echo)
        self.preempt_after = preempt_after

        def stand_ins() -> tuple[MetadataServer, ComputeApiServer]:
            return (
                MetadataServer(
                    {n.name: n.metadata for n in self.nodes},
                    self.machines.project_attributes,
                    stack.zone,
                    preempted=self.spot.preempted,
                ),
                ComputeApiServer(
                    stack.zone, self.spot.instance_status, self.spot.start_instance, self.workdir / "compute-api.log"
                ),
            )

        self.server, self.compute = self.network.run_inside(stand_ins) if self.network else stand_ins()

    @property
    def notes(self) -> list[str]:
        """What differs from the cloud, said once the run starts."""
        return [*self.machines.notes, *([self.network_note] if self.network_note else [])]

    @property
    def pip_find_links(self) -> Path:
        return self.workdir / "pip-find-links"

    def prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / WORKDIR_MARKER).write_text(f"trainstack local work directory of stack {self.stack.name}\n")
        self.script.write_text(bootscripts.render(self.machines.template, self.stack, self.kind))
        staging.upload_objects(self.bucket, self.job, self.stack.wheelhouse)
        staging.prepare_node_disks(self.nodes, self.kind.requirements_stamp, self.environment_installed)
        venv_python = self.nodes[0].state_dir / "venv" / "bin" / "python"
        python = venv_python if venv_python.exists() else Path(sys.executable)
        staging.fetch_for_pip(self.job, python, self.pip_find_links, self.echo)

    def _environment(self, local_node: LocalNode) -> dict[str, str]:
        return node_environment(
            local_node,
            self.server.root_for(local_node.name),
            self.compute.root,
            self.self_stop_log,
            self.pip_find_links,
        )

    def boot_command(self) -> list[str]:
        """How a node boots: its boot script, inside the run's namespace when there is one."""
        argv = ["bash", str(self.script)]
        return self.network.command(argv) if self.network else argv

    def _boot_again(self, local_node: LocalNode) -> subprocess.Popen[str]:
        return self.supervisor.restart(
            local_node.name, self.boot_command(), env=self._environment(local_node), cwd=local_node.state_dir
        )

    def start(self) -> LocalStackRun:
        if self.echo:
            for note in self.notes:
                print(f"[local] note: {note}", flush=True)
        self.prepare()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self.compute.serve_forever, daemon=True).start()
        self.started_at = time.time()
        for local_node in self.nodes:
            # Own process group: killing it takes the trainer down too, as a host restart does.
            local_node.process = self.supervisor.start(
                local_node.name, self.boot_command(), env=self._environment(local_node), cwd=local_node.state_dir
            )
            local_node.lines = self.supervisor.lines(local_node.name)
        self._log_writer = NodeLogWriter(self.workdir, {n.name: n.lines for n in self.nodes}, self.started_at)
        if self.machines.preempt:
            threading.Thread(
                target=self.spot.preempt_after_job_start,
                args=(self.machines.preempt, self.preempt_after),
                name="local-preempt",
                daemon=True,
            ).start()
        return self

    def preempt(self, name: str, grace_seconds: float = PREEMPT_GRACE_SECONDS) -> None:
        """Preempts node ``name`` now, as Compute Engine preempts a Spot VM."""
        self.spot.preempt(name, grace_seconds)

    def signal_node(self, name: str, signum: int) -> None:
        """Send ``signum`` to one node's whole process tree: SIGTERM is what a guest shutdown,
        a reboot or host maintenance sends; SIGKILL is a VM that vanishes."""
        [local_node] = [n for n in self.nodes if n.name == name]
        if local_node.process is not None:
            self.supervisor.signal(local_node.name, signum)

    def interrupt(self) -> LocalStackRunResult:
        """Stops every node as a shutdown stops a VM (SIGTERM to all its processes: its agent
        records INTERRUPTED and ends its trainer; SIGKILL to what is left after a grace), and
        closes the run: no node is booted again, no process outlives it."""
        self.spot.close()
        self.supervisor.stop(timeout=INTERRUPT_GRACE_SECONDS)
        self._close()
        return self.result()

    def kill_all(self) -> None:
        """SIGKILL every node's whole process tree: what a host restart does to a VM."""
        self.supervisor.kill_all()
        self._close()

    def _close(self) -> None:
        self.spot.close()
        self.supervisor.close()
        self._log_writer.close()
        for server in (self.server, self.compute):
            server.shutdown()
            server.server_close()
        if self.network is not None:
            self.network.close()

    def wait(self, timeout: float | None = None) -> LocalStackRunResult:
        chief = self.nodes[0]
        assert chief.role == contract.CHIEF and chief.process is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        self.supervisor.wait_for(lambda: not self.supervisor.running(chief.name), deadline)
        # No node boots again once the chief is done: it would find the job over.
        self.spot.close()
        others = [n.name for n in self.nodes[1:] if n.process is not None]
        self.supervisor.wait_for(lambda: self.supervisor.all_exited(others), time.monotonic() + GRACE_SECONDS)
        self.supervisor.stop()
        self._close()
        return self.result()

    def result(self) -> LocalStackRunResult:
        layout = contract.LAYOUT
        directory = self.job_directory
        read = directory.bucket.read_json
        return LocalStackRunResult(
            job_status=read(posixpath.join(directory.prefix, layout.job_status)),
            node_status={
                n.name: read(posixpath.join(directory.prefix, layout.node_status(n.name))) for n in self.nodes
            },
            exit_codes={n.name: n.process.returncode if n.process else None for n in self.nodes},
            self_stops=self.self_stop_log.read_text().splitlines() if self.self_stop_log.exists() else [],
            job_dir=self.job_dir,
            logs={n.name: n.lines for n in self.nodes},
            has_job=self.job is not None,
            compute_calls=list(self.compute.calls),
            preemptions=list(self.spot.preemptions),
        )


def run_local(
    stack: ResolvedStack,
    workdir: Path,
    overrides: TrainerOverrides,
    fresh: bool = False,
    echo: bool = True,
    timeout: float | None = None,
    verbose: bool = False,
    preempt: tuple[str, ...] = (),
    preempt_after: float = 0.0,
) -> LocalStackRunResult:
    """Runs the stack's cluster to its end. On SIGINT or SIGTERM every node is stopped as a
    VM's shutdown stops it (its agent records INTERRUPTED; SIGKILL after a grace), and
    :class:`LocalStackRunInterrupted` carries what they recorded: the job stays resumable."""
    if fresh:
        clear_workdir(workdir)
    check_adoptable(workdir)
    run = LocalStackRun(stack, workdir, overrides, echo, verbose=verbose, preempt=preempt, preempt_after=preempt_after)

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        try:
            return run.start().wait(timeout)
        except KeyboardInterrupt as interrupt:
            # Further signals may not cut the stopping short.
            for each in (signal.SIGINT, signal.SIGTERM):
                signal.signal(each, signal.SIG_IGN)
            name = str(interrupt) or "SIGINT"
            raise LocalStackRunInterrupted(name, run.interrupt()) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
