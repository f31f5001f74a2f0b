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
  (:class:`DirectoryBucket`; the tests can name a real bucket instead, :class:`GcsBucket`);
- self-stop: recorded in ``self-stop.log`` instead of shutting the machine down;
- compute: an HTTP server answering the Compute Engine API calls the chief makes for its
  Spot peers (get an instance, start it), each recorded in ``compute-api.log``; a start
  boots the stopped node again through the same boot script (:class:`ComputeApiServer`).
  ``--preempt`` stops a node as Compute Engine preempts a Spot VM: its metadata says
  preempted, SIGTERM to every process of the node, then SIGKILL after a grace period.

The nodes and these servers share a network namespace whose only interface is loopback
(:mod:`trainstack.localrun.netns`), where one can be made. Everything runs on the CPU whatever GPUs
the stack names; TF_CONFIG addresses are loopback ports instead of internal DNS names.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import posixpath
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import trainstack_contract as contract
from trainstack.base.project import PROJECT_ROOT
from trainstack.cloud import bootscripts
from trainstack.jobcode import artifacts
from trainstack.jobcode.package import BUILTIN_SOURCE, builtin_package
from trainstack.localrun.netns import LoopbackNetwork, NamespaceUnavailable
from trainstack.localrun.supervisor import Supervisor, free_loopback_ports
from trainstack.localrun.wheels import fetch_for_nodes
from trainstack.stackmodel.resolved import ResolvedCluster, ResolvedJob, resolve_stack
from trainstack.stackmodel.schema import StackConfig

# After SIGINT or SIGTERM, how long the nodes get to record INTERRUPTED and end their
# trainers (each agent gives its trainer 10 s) before what is left is killed.
INTERRUPT_GRACE_SECONDS = 15.0
# After the chief's script exits, how long the other nodes may take to end on their own
# (parameter servers notice the finished job by polling the job directory).
GRACE_SECONDS = 90.0
POLL_SECONDS = 0.1
# Local nodes share two cores: one intra-op thread pool per process keeps them from thrashing.
THREADS_PER_NODE = "1"
# Written into every work directory `trainstack local` creates; `--fresh` deletes nothing else.
WORKDIR_MARKER = ".trainstack-local-workdir"
# A preempted Spot VM gets about 30 s between the preemption notice (ACPI G2 soft off, which
# the guest turns into SIGTERM) and being stopped
# (https://cloud.google.com/compute/docs/instances/spot#preemption-process).
PREEMPT_GRACE_SECONDS = 30.0
# The node agent's line when it starts the job's code (trainstack_agent/node.py).
JOB_STARTED = "trainstack: starting the job"
# What the metadata server stand-in answers for the project id and the VM's token, and the
# Compute Engine stand-in accepts.
LOCAL_PROJECT = "trainstack-local"
LOCAL_TOKEN = "trainstack-local-token"
# Compute Engine's instance statuses, as the stand-in reports a node's.
RUNNING, STOPPING, TERMINATED = "RUNNING", "STOPPING", "TERMINATED"


# The first line each run writes to every node's log: `trainstack logs --local` shows one
# heading per run from it, instead of running successive runs together.
RUN_HEADING = "=== trainstack local run started "


def run_heading(started: float) -> str:
    return f"{RUN_HEADING}{datetime.fromtimestamp(started, UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC ==="


def node_log(workdir: Path, node: str) -> Path:
    """A node's output in a work directory, appended line by line as it arrives (every boot
    of the node adds to it, as a VM's journal keeps its earlier boots); `trainstack logs
    --local` reads it."""
    return workdir / "nodes" / node / "boot.log"


# TensorFlow's native start-up messages: absl/glog lines ("E0000 00:00:... cuda_platform.cc:52]
# failed call to cuInit ...", which every CPU-only node prints) and the notice before them.
# `local` shows them only with --verbose; nodes/<node>/boot.log keeps every line.
_NATIVE_LOG_LINE = re.compile(r"[IWEF]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] .*")
_NATIVE_NOTICES = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "To enable the following instructions:",
)


def is_runtime_noise(line: str) -> bool:
    """True for TensorFlow's native start-up chatter, which says nothing about the job."""
    return bool(_NATIVE_LOG_LINE.fullmatch(line)) or line.startswith(_NATIVE_NOTICES)


class WorkdirError(Exception):
    """A work directory `trainstack local` refuses to use or delete."""


@dataclass(frozen=True)
class TrainerOverrides:
    """Trainer flags a local run changes to keep a CPU job short (``--epochs 2`` ...)."""

    values: dict[str, str] = field(default_factory=dict)
    # More arguments for the job's code, after the stack's own (`local --args`).
    extra: tuple[str, ...] = ()

    def apply(self, args: list[str], dropped: tuple[str, ...] = ()) -> list[str]:
        """``args`` with every occurrence of each overridden flag (``--f V`` and ``--f=V``)
        replaced by one ``--f value`` at the end, and the ``dropped`` flags left out."""
        result: list[str] = []
        skip_value = False
        for arg in args:
            if skip_value:
                skip_value = False
                continue
            flag = arg.split("=", 1)[0]
            if flag in self.values or flag in dropped:
                skip_value = "=" not in arg
                continue
            result.append(arg)
        for flag, value in self.values.items():
            result += [flag, value]
        return [*result, *self.extra]


@dataclass
class LocalNode:
    # The contract's node name (chief, worker-0, tpu), its TF_CONFIG task, its instance name.
    name: str
    role: str
    index: int
    vm_name: str
    metadata: dict[str, str]
    state_dir: Path
    process: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)


class MetadataServer(ThreadingHTTPServer):
    """Answers ``/<node>/computeMetadata/v1/...`` like the metadata server answers that node."""

    def __init__(self, instances: dict[str, dict[str, str]], project: dict[str, str], zone: str) -> None:
        self.instances = instances
        self.project_attributes = project
        self.zone = zone
        # Nodes Compute Engine is preempting: their instance/preempted says TRUE.
        self.preempted: set[str] = set()
        # Paths ("instance/attributes/KEY") the server answers with an HTTP error status
        # instead (a test's unavailable metadata server).
        self.failures: dict[str, int] = {}
        super().__init__(("127.0.0.1", 0), _MetadataHandler)

    def root_for(self, node: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{node}/computeMetadata/v1"

    def lookup(self, node: str, path: str) -> str | None:
        attributes = self.instances.get(node)
        if attributes is None:
            return None
        if path.startswith("instance/attributes/"):
            return attributes.get(path.removeprefix("instance/attributes/"))
        if path.startswith("project/attributes/"):
            return self.project_attributes.get(path.removeprefix("project/attributes/"))
        if path == "instance/name":
            return node
        if path == "instance/zone":
            return f"projects/0/zones/{self.zone}"
        if path == "instance/preempted":
            return "TRUE" if node in self.preempted else "FALSE"
        if path == "project/project-id":
            return LOCAL_PROJECT
        if path == "instance/service-accounts/default/token":
            return json.dumps({"access_token": LOCAL_TOKEN, "expires_in": 3599, "token_type": "Bearer"})
        return None


class ComputeApiServer(ThreadingHTTPServer):
    """Answers the Compute Engine API calls a boot script makes on its cluster's instances:
    ``GET .../projects/P/zones/Z/instances/NAME`` (the instance's ``status``) and ``POST
    .../instances/NAME/start``. Both need the token the metadata stand-in hands out; any
    other instance, project, zone or verb is a 404, as a real API call on something that is
    not there. Every call is recorded (``calls``, and a line in ``log``)."""

    def __init__(
        self,
        zone: str,
        status: Callable[[str], str | None],
        start: Callable[[str], bool],
        log: Path,
    ) -> None:
        """``status(instance)``: its status, or None when there is no such instance;
        ``start(instance)``: boots it when stopped (False: no such instance)."""
        self.zone = zone
        self.status = status
        self.start = start
        self.log = log
        self.calls: list[str] = []
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ComputeHandler)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, call: str) -> None:
        with self._lock:
            self.calls.append(call)
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(f"{time.time():.3f} {call}\n")


# /projects/P/zones/Z/instances/NAME[/VERB]
_INSTANCE_PATH = re.compile(r"/projects/([a-z][-a-z0-9]*)/zones/([a-z0-9-]+)/instances/([a-z][-a-z0-9]*)(?:/(\w+))?")


class _ComputeHandler(BaseHTTPRequestHandler):
    server: ComputeApiServer

    def _target(self, method: str) -> tuple[str, str | None] | None:
        if self.headers.get("Authorization") != f"Bearer {LOCAL_TOKEN}":
            self.send_error(401, "Request is missing required authentication credential")
            return None
        match = _INSTANCE_PATH.fullmatch(self.path)
        if match is None or match[1] != LOCAL_PROJECT or match[2] != self.server.zone:
            self.send_error(404)
            return None
        instance, verb = match[3], match[4]
        self.server.record(f"{method} {instance}{'/' + verb if verb else ''}")
        return instance, verb

    def _answer(self, document: dict[str, Any]) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        target = self._target("GET")
        if target is None:
            return
        instance, verb = target
        status = self.server.status(instance) if verb is None else None
        if status is None:
            self.send_error(404)
            return
        self._answer({"kind": "compute#instance", "name": instance, "status": status})

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        target = self._target("POST")
        if target is None:
            return
        instance, verb = target
        # The body, if any, is read and ignored: start takes none.
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if verb != "start" or not self.server.start(instance):
            self.send_error(404)
            return
        self._answer(
            {"kind": "compute#operation", "operationType": "start", "targetLink": instance, "status": "RUNNING"}
        )

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: the calls are recorded in the log file instead."""


class _MetadataHandler(BaseHTTPRequestHandler):
    server: MetadataServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        # The real server refuses requests without this header; so does the stand-in.
        if self.headers.get("Metadata-Flavor") != "Google":
            self.send_error(403, "Missing Metadata-Flavor:Google header")
            return
        node, _, rest = self.path.lstrip("/").partition("/computeMetadata/v1/")
        failure = self.server.failures.get(rest)
        if failure is not None:
            self.send_error(failure)
            return
        value = self.server.lookup(node, rest)
        if value is None:
            self.send_error(404)
            return
        body = value.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/text")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: the nodes' own logs say what they fetched."""


def prepare_local_environment(env_dir: Path, stamp: str) -> None:
    """A virtual environment that sees this interpreter's packages, stamped as the boot
    script stamps a finished install: the nodes then take the already-installed path.

    Installing TensorFlow again per local node would take minutes and prove nothing new;
    the install path itself is exercised by the tests with a small wheelhouse.
    """
    marker = env_dir / ".trainstack-requirements"
    if marker.exists() and marker.read_text().strip() == stamp:
        return
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    site_packages = Path(
        subprocess.check_output(
            [str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (site_packages / "trainstack-host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    marker.write_text(stamp + "\n")


class StandInBucket(Protocol):
    """The bucket a local run's nodes use: what their metadata names, how :class:`LocalStackRun`
    puts the job's code into it, and how it reads the status objects back."""

    @property
    def uri(self) -> str:
        """The bucket as the nodes' metadata names it: a directory path, or ``gs://NAME``."""
        ...

    def put(self, name: str, write: Callable[[Path], object]) -> None:
        """Stores object ``name``, which ``write`` writes as a file at the path it is given."""
        ...

    def read_json(self, name: str) -> dict[str, Any] | None:
        """Object ``name`` as a JSON object, or None."""
        ...


@dataclass(frozen=True)
class DirectoryBucket:
    """The default stand-in: a directory whose layout is the bucket's; the boot script uses
    its plain paths as they are."""

    root: Path

    @property
    def uri(self) -> str:
        return str(self.root)

    def put(self, name: str, write: Callable[[Path], object]) -> None:
        destination = self.root / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        write(destination)

    def read_json(self, name: str) -> dict[str, Any] | None:
        return _read_json(self.root / name)


class GcsBucket:
    """A Cloud Storage bucket, for tests: the nodes' metadata names ``gs://NAME``, so the boot
    script reaches it through ``gcloud storage`` (a test puts a stand-in for gcloud on PATH);
    :class:`LocalStackRun` uploads the job's code with the client library and reads the status
    objects with the reader `trainstack status` uses (:class:`trainstack.commands.status.GcsObjects`).
    The client honours ``STORAGE_EMULATOR_HOST``, which points it at an emulator."""

    def __init__(self, project: str, name: str, client: Any = None) -> None:
        """``client``: a ``google.cloud.storage.Client``; by default one made on first use."""
        self.project = project
        self.name = name
        self._client = client

    @property
    def uri(self) -> str:
        return f"gs://{self.name}"

    def client(self) -> Any:
        if self._client is None:
            from google.cloud.storage import Client  # type: ignore[import-untyped]

            self._client = Client(project=self.project)
        return self._client

    def put(self, name: str, write: Callable[[Path], object]) -> None:
        with tempfile.TemporaryDirectory(prefix="trainstack-upload-") as staging:
            path = Path(staging) / posixpath.basename(name)
            write(path)
            self.client().bucket(self.name).blob(name).upload_from_filename(str(path))

    def read_json(self, name: str) -> dict[str, Any] | None:
        from trainstack.jobstate.report import GcsObjects, read_json

        return read_json(GcsObjects(self.project, self.name, self.client()), name)


@dataclass
class LocalStackRunResult:
    job_status: dict[str, Any] | None
    node_status: dict[str, dict[str, Any] | None]
    exit_codes: dict[str, int | None]
    self_stops: list[str]
    # A local path with the default stand-in bucket; a gs:// URI with a GcsBucket.
    job_dir: Path | str
    logs: dict[str, list[str]]
    # False for a cluster without a job: its nodes boot ready and start nothing.
    has_job: bool = True
    # The Compute Engine API calls the nodes made ("POST multiworker-worker-0/start"), and
    # the preemptions `--preempt` caused: (node, time.time() of the preemption notice).
    compute_calls: list[str] = field(default_factory=list)
    preemptions: list[tuple[str, float]] = field(default_factory=list)

    @property
    def start_calls(self) -> list[str]:
        return [call for call in self.compute_calls if call.startswith("POST ") and call.endswith("/start")]

    @property
    def found_finished(self) -> bool:
        """The chief's boot found the job SUCCEEDED already (an earlier run in this work directory)."""
        return any("job already SUCCEEDED" in line for line in self.logs.get(contract.CHIEF, []))

    @property
    def ready(self) -> bool:
        """A cluster without a job: every node's boot script ended well."""
        return not self.has_job and all(code == 0 for code in self.exit_codes.values())

    @property
    def succeeded(self) -> bool:
        return self.job_status is not None and self.job_status.get("state") == contract.STATES.succeeded


class LocalStackRun:
    """Starts every node's boot script, streams its output, and waits by the chief."""

    def __init__(
        self,
        cfg: StackConfig,
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
        Engine preempts a Spot VM (see :meth:`preempt`); :func:`check_preemptible` says
        which nodes may be named.

        ``trainer_source``, ``kind`` and ``environment_installed`` let tests swap in a
        small built-in trainer and requirements and exercise the script's own install path;
        ``gpu_count`` is what the nodes' metadata says they have (this machine has none).

        ``bucket``: where the nodes' storage is; by default the directory
        ``<workdir>/bucket/<bucket name>``. A test passes a :class:`GcsBucket` to have the
        boot script write its status objects to Cloud Storage (an emulator) through
        ``gcloud storage``: the code archive and requirements are then uploaded there, the
        metadata names ``gs://NAME``, :meth:`result` reads the status objects from there, and
        ``job_dir`` is a gs:// URI; node state and ``self-stop.log`` stay in ``workdir``."""
        if cfg.settings.cluster is None and cfg.settings.tpu is None:
            raise ValueError(f"stack {cfg.stack} has no trainstack:cluster or trainstack:tpu to run locally")
        self.stack = resolve_stack(cfg)
        cluster = self.stack.cluster
        tpu = self.stack.tpu
        self.job: ResolvedJob | None = self.stack.job
        if self.job is not None and self.job.builtin and trainer_source != BUILTIN_SOURCE:
            self.job = dataclasses.replace(self.job, package=builtin_package(trainer_source))
        self.workdir = workdir.resolve()
        self.echo = echo
        if kind is None:
            kind = (
                bootscripts.tpu_node_kind(tpu, self.stack.zone) if tpu is not None else bootscripts.cluster_node_kind()
            )
        self.kind = kind
        self.environment_installed = environment_installed
        # The bucket's stand-in: a directory of the same name; the layout inside is the bucket's.
        self.bucket: StandInBucket = bucket or DirectoryBucket(self.workdir / "bucket" / self.stack.bucket_name)
        job_name = self.job.name if self.job else "none"
        # The bucket of the job directory, its object prefix there (jobs/<job>), and the directory.
        self.job_bucket: StandInBucket = self.bucket
        self.job_prefix = posixpath.join(contract.LAYOUT.jobs, job_name)
        job_dir = contract.LAYOUT.job_dir(self.bucket.uri, job_name)
        if self.job is not None and self.job.job_dir_bucket and self.job.job_dir_prefix:
            if not isinstance(self.bucket, DirectoryBucket):
                raise ValueError("job.job_dir in another bucket runs locally with the directory stand-in only")
            # job.job_dir in a team's own bucket: a directory of that name stands in for it too.
            self.job_bucket = DirectoryBucket(self.workdir / "bucket" / self.job.job_dir_bucket)
            self.job_prefix = self.job.job_dir_prefix
            job_dir = str(self.job_bucket.root / self.job_prefix)
        if self.job is not None:
            # The nodes' metadata names the stand-in, not the cloud's job directory.
            self.job = dataclasses.replace(self.job, job_dir=job_dir)
        self.job_dir: Path | str = Path(job_dir) if isinstance(self.bucket, DirectoryBucket) else job_dir
        self.self_stop_log = self.workdir / "self-stop.log"
        self.project_attributes: dict[str, str] = {}
        # What differs from the cloud, said once the run starts (a TPU's stand-in).
        self.notes: list[str] = []
        if tpu is not None:
            self.template = bootscripts.TPU_VM
            self.script = self.workdir / "tpu-vm.sh"
            args, self.notes = tpu_stand_in(
                list(tpu.trainer_args), overrides, self.job is not None and self.job.builtin, tpu.accelerator_type
            )
            self.nodes = [
                LocalNode(
                    contract.TPU_NODE,
                    contract.CHIEF,
                    0,
                    tpu.vm_name,
                    bootscripts.tpu_metadata(self.stack, tpu, self.bucket.uri, tuple(args), self.kind, self.job),
                    self.workdir / "nodes" / contract.TPU_NODE / "state",
                )
            ]
            self.preempt_nodes: tuple[str, ...] = ()
            if preempt:
                raise PreemptError("--preempt: a TPU stack has no Compute Engine Spot VM for `local` to preempt")
        else:
            assert cluster is not None
            self.template = bootscripts.CLUSTER_NODE
            self.script = self.workdir / "cluster-node.sh"
            args = overrides.apply(list(cluster.trainer_args))
            self.nodes = [
                LocalNode(
                    node.name,
                    node.role,
                    node.index,
                    node.vm_name,
                    bootscripts.node_metadata(
                        cluster,
                        node,
                        self.bucket.uri,
                        self.job,
                        tuple(args),
                        gpu_count=gpu_count,
                        kind=self.kind,
                        wheelhouse=self.stack.wheelhouse,
                    ),
                    self.workdir / "nodes" / node.name / "state",
                )
                for node in cluster.nodes
            ]
            if cluster.tf_cluster:
                # The same cluster as on the cloud, with loopback ports for internal DNS names.
                ports = free_loopback_ports(len(cluster.nodes))
                local_cluster = contract.tf_cluster(
                    (node.role, f"127.0.0.1:{port}") for node, port in zip(cluster.nodes, ports, strict=True)
                )
                self.project_attributes[cluster.tf_cluster_metadata_key] = json.dumps(local_cluster)
            self.preempt_nodes = check_preemptible(cluster, preempt)
        # The nodes and the stand-ins they call share a namespace with nothing but loopback,
        # when one can be made; not with a bucket or an image that lives in this machine's own
        # network (an emulator, the Docker engine).
        self.network: LoopbackNetwork | None = None
        self.network_note: str | None = None
        if (
            isolate_network
            and isinstance(self.bucket, DirectoryBucket)
            and (self.job is None or self.job.image is None)
        ):
            try:
                self.network = LoopbackNetwork.create()
            except NamespaceUnavailable as reason:
                self.network_note = (
                    f"TensorFlow's gRPC servers of this run listen on every interface of this machine ({reason})"
                )

        def stand_ins() -> tuple[MetadataServer, ComputeApiServer]:
            return (
                MetadataServer({n.name: n.metadata for n in self.nodes}, self.project_attributes, self.stack.zone),
                ComputeApiServer(
                    self.stack.zone, self._instance_status, self._start_instance, self.workdir / "compute-api.log"
                ),
            )

        self.server, self.compute = self.network.run_inside(stand_ins) if self.network else stand_ins()
        self._by_instance = {n.vm_name: n for n in self.nodes}
        self.preempt_after = preempt_after
        self.preemptions: list[tuple[str, float]] = []
        # Held while a node is preempted or booted again, and while the run closes.
        self._machines = threading.Lock()
        self._closing = threading.Event()
        shown = None if verbose else (lambda line: not is_runtime_noise(line))
        self.supervisor = Supervisor(echo=echo, poll_seconds=POLL_SECONDS, shown=shown)

    def prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / WORKDIR_MARKER).write_text(
            f"trainstack local work directory of stack {self.stack.config.stack}\n"
        )
        self.script.write_text(bootscripts.render(self.template, self.stack, self.kind))
        agent = artifacts.agent_archive()
        self.bucket.put(agent.object_name, lambda destination: destination.write_bytes(agent.data))
        wheelhouse = self.stack.wheelhouse
        if wheelhouse is not None:
            manifest = artifacts.wheelhouse_manifest(wheelhouse)
            self.bucket.put(manifest.object_name, lambda destination: destination.write_bytes(manifest.data))
            for filename, path in wheelhouse.wheels.items():
                self.bucket.put(contract.LAYOUT.wheel(filename), functools.partial(_copy_into, path))
        job = self.job
        if job is not None and job.package is not None:
            self.bucket.put(job.package.object_name, job.package.write_archive)
        if job is not None and job.requirements is not None:
            requirements = job.requirements.path
            self.bucket.put(
                job.requirements.object_name, lambda destination: shutil.copyfile(requirements, destination)
            )
        for local_node in self.nodes:
            local_node.state_dir.mkdir(parents=True, exist_ok=True)
            venv = local_node.state_dir / "venv"
            if venv.is_symlink():
                # A work directory of an earlier version, whose nodes shared one environment.
                venv.unlink()
            if self.environment_installed:
                # One per node, as each machine has its own: the job's requirements and project
                # are then installed by every node's agent, as on the cloud.
                prepare_local_environment(venv, self.kind.requirements_stamp)
        self._fetch_for_pip()

    def _fetch_for_pip(self) -> None:
        """What the nodes' pip installs (the job's requirements and project), fetched here
        first: the nodes reach no package index (:mod:`trainstack.localrun.wheels`)."""
        job = self.job
        if job is None or job.package is None:
            return
        project = job.package.source if job.package.install == contract.PROJECT_INSTALL else None
        requirements = job.requirements.path if job.requirements is not None else None
        if project is None and requirements is None:
            return
        if self.echo:
            print("[local] fetching what the nodes install with pip (they reach no package index)", flush=True)
        venv_python = self.nodes[0].state_dir / "venv" / "bin" / "python"
        python = venv_python if venv_python.exists() else Path(sys.executable)
        fetched = fetch_for_nodes(python, self.pip_find_links, requirements, project)
        if self.echo and fetched:
            print(f"[local] fetched {', '.join(fetched)}", flush=True)

    @property
    def pip_find_links(self) -> Path:
        return self.workdir / "pip-find-links"

    def _environment(self, local_node: LocalNode) -> dict[str, str]:
        environment = dict(os.environ)
        environment.update(
            TRAINSTACK_METADATA_ROOT=self.server.root_for(local_node.name),
            TRAINSTACK_COMPUTE_API=self.compute.root,
            TRAINSTACK_STATE_DIR=str(local_node.state_dir),
            TRAINSTACK_SELF_STOP_LOG=str(self.self_stop_log),
            TRAINSTACK_PROFILE_DIR=str(local_node.state_dir),
            # The local Docker engine pulls with the credentials its user set up.
            TRAINSTACK_SKIP_REGISTRY_LOGIN="1",
            # pip on a node installs from what _fetch_for_pip put there: nodes reach no index.
            TRAINSTACK_PIP_FIND_LINKS=str(self.pip_find_links),
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

    def start(self) -> LocalStackRun:
        if self.echo:
            for note in [*self.notes, *([self.network_note] if self.network_note else [])]:
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
        self._logs_done = threading.Event()
        self._log_writer = threading.Thread(target=self._write_logs, name="local-node-logs", daemon=True)
        self._log_writer.start()
        if self.preempt_nodes:
            threading.Thread(target=self._preempt_later, name="local-preempt", daemon=True).start()
        return self

    # --- Spot VMs: preemption, and the Compute Engine API that starts them again -------------
    def _preempt_later(self) -> None:
        """Preempts each ``preempt`` node ``preempt_after`` seconds after its boot script
        started the job: counted from there, not from the boot, the preemption lands at the
        same point of training on a fast machine and a slow one."""
        pending = {name: None for name in self.preempt_nodes}
        due: dict[str, float] = {}
        while pending and not self._closing.wait(POLL_SECONDS):
            for name in list(pending):
                lines = self.supervisor.lines(name)
                if name not in due and any(line.startswith(JOB_STARTED) for line in lines):
                    due[name] = time.monotonic() + self.preempt_after
                if name in due and time.monotonic() >= due[name]:
                    del pending[name]
                    self.preempt(name)

    def preempt(self, name: str, grace_seconds: float = PREEMPT_GRACE_SECONDS) -> None:
        """What Compute Engine does to a preempted Spot VM: its metadata says preempted, the
        guest gets SIGTERM (every process of the node), and whatever still runs after
        ``grace_seconds`` is killed. The instance is then stopped (TERMINATED) until a start
        call boots it again."""
        with self._machines:
            if self._closing.is_set() or not self.supervisor.running(name):
                return
            process = self.supervisor.process(name)
            self.server.preempted.add(name)
            self.preemptions.append((name, time.time()))
            self.supervisor.signal(name, signal.SIGTERM)
        if self.echo:
            print(f"[local] {name} preempted: SIGTERM now, SIGKILL after {grace_seconds:.0f} s", flush=True)

        def end_of_grace() -> None:
            if process.poll() is None:
                with self._machines:
                    if self.supervisor.process(name) is process:
                        self.supervisor.signal(name, signal.SIGKILL)

        timer = threading.Timer(grace_seconds, end_of_grace)
        timer.daemon = True
        timer.start()

    def _instance_status(self, instance: str) -> str | None:
        local_node = self._by_instance.get(instance)
        if local_node is None:
            return None
        if self.supervisor.running(local_node.name):
            # Still running after the preemption notice: shutting down.
            return STOPPING if local_node.name in self.server.preempted else RUNNING
        return TERMINATED

    def _start_instance(self, instance: str) -> bool:
        """Boots a stopped node again with the same boot script, metadata and state (its
        disk); a running one is left as it is, as Compute Engine does."""
        local_node = self._by_instance.get(instance)
        if local_node is None:
            return False
        with self._machines:
            if self._closing.is_set() or self.supervisor.running(local_node.name):
                return True
            self.server.preempted.discard(local_node.name)
            local_node.process = self.supervisor.restart(
                local_node.name, self.boot_command(), env=self._environment(local_node), cwd=local_node.state_dir
            )
        if self.echo:
            print(f"[local] {local_node.name} started again by a Compute Engine API call", flush=True)
        return True

    def _write_logs(self) -> None:
        """Appends each node's new output lines to its :func:`node_log` every POLL_SECONDS,
        and the last ones once the run is closed."""
        written = {n.name: 0 for n in self.nodes}
        handles = {n.name: node_log(self.workdir, n.name).open("a", encoding="utf-8") for n in self.nodes}
        for handle in handles.values():
            handle.write(run_heading(self.started_at) + "\n")
        try:
            while True:
                closing = self._logs_done.is_set()
                for local_node in self.nodes:
                    new = local_node.lines[written[local_node.name] :]
                    if new:
                        handles[local_node.name].write("".join(f"{line}\n" for line in new))
                        handles[local_node.name].flush()
                        written[local_node.name] += len(new)
                if closing:
                    return
                self._logs_done.wait(POLL_SECONDS)
        finally:
            for handle in handles.values():
                handle.close()

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
        with self._machines:
            self._closing.set()
        self.supervisor.stop(timeout=INTERRUPT_GRACE_SECONDS)
        self._close()
        return self.result()

    def kill_all(self) -> None:
        """SIGKILL every node's whole process tree: what a host restart does to a VM."""
        self.supervisor.kill_all()
        self._close()

    def boot_command(self) -> list[str]:
        """How a node boots: its boot script, inside the run's namespace when there is one."""
        argv = ["bash", str(self.script)]
        return self.network.command(argv) if self.network else argv

    def _close(self) -> None:
        with self._machines:
            self._closing.set()
        self.supervisor.close()
        self._logs_done.set()
        self._log_writer.join()
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
        with self._machines:
            self._closing.set()
        others = [n.name for n in self.nodes[1:] if n.process is not None]
        self.supervisor.wait_for(lambda: self.supervisor.all_exited(others), time.monotonic() + GRACE_SECONDS)
        self.supervisor.stop()
        self._close()
        return self.result()

    def result(self) -> LocalStackRunResult:
        layout = contract.LAYOUT
        read = self.job_bucket.read_json
        return LocalStackRunResult(
            job_status=read(posixpath.join(self.job_prefix, layout.job_status)),
            node_status={n.name: read(posixpath.join(self.job_prefix, layout.node_status(n.name))) for n in self.nodes},
            exit_codes={n.name: n.process.returncode if n.process else None for n in self.nodes},
            self_stops=self.self_stop_log.read_text().splitlines() if self.self_stop_log.exists() else [],
            job_dir=self.job_dir,
            logs={n.name: n.lines for n in self.nodes},
            has_job=self.job is not None,
            compute_calls=list(self.compute.calls),
            preemptions=list(self.preemptions),
        )


class PreemptError(ValueError):
    """A ``--preempt`` that names no Spot node of the stack's cluster."""


# What a local run of a TPU stack's built-in trainer trains unless the command line says
# otherwise: a TPU's work (ResNet-50 on 224-pixel images, 128 per core) would take this CPU
# hours; this is minutes, enough to run every step of the job's life.
TPU_STAND_IN_WORK = {
    contract.FLAGS.epochs: "2",
    contract.FLAGS.steps_per_epoch: "5",
    contract.FLAGS.image_size: "64",
    contract.FLAGS.batch_size_per_replica: "8",
}
# Replicas of the stand-in: logical devices the CPU is split into, as a TPU's cores are.
TPU_STAND_IN_REPLICAS = 2


def tpu_stand_in(
    args: list[str], overrides: TrainerOverrides, builtin: bool, accelerator_type: str
) -> tuple[list[str], list[str]]:
    """The TPU VM's trainer arguments for this machine, and what differs from a real TPU.

    The built-in trainer trains with MirroredStrategy over logical CPU devices in place of
    TPUStrategy over the TPU's cores (no TPU answers --tpu local here); a team's own code
    runs as it is, and fails where it asks for a TPU."""
    if not builtin:
        return overrides.apply(args), [
            f"no TPU here: the job's own code runs on this machine's CPU as it is; where it connects to the "
            f"{accelerator_type} (TPUClusterResolver) it fails"
        ]
    flags = contract.FLAGS
    stand_in = TrainerOverrides(
        {
            **{flag: value for flag, value in TPU_STAND_IN_WORK.items() if flag not in overrides.values},
            **overrides.values,
            flags.strategy: contract.MIRRORED,
            flags.logical_cpus: str(TPU_STAND_IN_REPLICAS),
        },
        overrides.extra,
    )
    shrunk = ", ".join(f"{flag} {value}" for flag, value in TPU_STAND_IN_WORK.items() if flag not in overrides.values)
    notes = [
        f"no TPU here: MirroredStrategy over {TPU_STAND_IN_REPLICAS} logical CPU devices stands in for TPUStrategy "
        f"over the {accelerator_type}'s cores; the TPU runtime, XLA's compilation for it, bfloat16 and its memory "
        "are not exercised" + (f"; the work is cut to what a CPU trains in minutes ({shrunk})" if shrunk else "")
    ]
    return stand_in.apply(args, dropped=(flags.tpu,)), notes


def check_preemptible(cluster: ResolvedCluster, names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` when each is a Spot node of ``cluster`` (only Compute Engine's Spot VMs are
    preempted); otherwise a PreemptError naming the node and the Spot nodes there are."""
    spot = [node.name for node in cluster.nodes if node.spot]
    nodes = [node.name for node in cluster.nodes]
    for name in names:
        if name not in nodes:
            raise PreemptError(f"--preempt {name}: the cluster has no such node; its nodes: {', '.join(nodes)}")
        if name not in spot:
            choices = ", ".join(spot) if spot else "none (set spot: true on workers or parameter servers)"
            raise PreemptError(
                f"--preempt {name}: {name} is not a Spot VM, so it is never preempted; Spot nodes: {choices}"
            )
    if len(set(names)) != len(names):
        raise PreemptError(f"--preempt {','.join(names)}: a node is named twice")
    return names


def _copy_into(source: Path, destination: Path) -> None:
    shutil.copyfile(source, destination)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def clear_workdir(workdir: Path) -> None:
    """Delete a work directory that `trainstack local` made, and nothing else.

    Refused: a path that is not a directory or is a symlink, one without the marker file
    that :meth:`LocalStackRun.prepare` writes, and any directory holding the current directory,
    the repository or the home directory (a stack named ".." once pointed --fresh at the
    repository itself)."""
    if not workdir.exists() and not workdir.is_symlink():
        return
    if workdir.is_symlink() or not workdir.is_dir():
        raise WorkdirError(f"{workdir} is not a directory that trainstack local made; not deleting it")
    resolved = workdir.resolve()
    protected = {Path.cwd().resolve(), PROJECT_ROOT.resolve(), Path.home().resolve()}
    if any(resolved == p or resolved in p.parents for p in protected):
        raise WorkdirError(
            f"{workdir} holds {', '.join(str(p) for p in sorted(protected) if resolved == p or resolved in p.parents)}; not deleting it"
        )
    if not (resolved / WORKDIR_MARKER).is_file():
        raise WorkdirError(
            f"{workdir} has no {WORKDIR_MARKER} file, so trainstack local did not make it; not deleting it"
        )
    shutil.rmtree(resolved)


def check_adoptable(workdir: Path) -> None:
    """A work directory `trainstack local` may write into: absent, empty, or one it made. A
    non-empty directory it did not make is refused, so that a later --fresh never deletes a
    user's files (--fresh deletes only a directory holding the marker)."""
    if workdir.is_symlink() or (workdir.exists() and not workdir.is_dir()):
        raise WorkdirError(f"{workdir} is not a directory; choose another --workdir")
    if workdir.is_dir() and not (workdir / WORKDIR_MARKER).is_file() and any(workdir.iterdir()):
        raise WorkdirError(
            f"{workdir} is not empty and trainstack local did not make it; choose an empty or new --workdir"
        )


class LocalStackRunInterrupted(Exception):
    """The run was stopped by SIGINT (Ctrl-C) or SIGTERM; every node has been stopped."""

    def __init__(self, signal_name: str, result: LocalStackRunResult) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.result = result


def run_local(
    cfg: StackConfig,
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
    run = LocalStackRun(cfg, workdir, overrides, echo, verbose=verbose, preempt=preempt, preempt_after=preempt_after)

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


def _exit_text(code: int | None) -> str:
    """An exit status for the terminal: a node or job that has not exited has none yet."""
    return "not exited" if code is None else f"exit {code}"


def report(result: LocalStackRunResult, out: Any = None) -> None:
    from trainstack.jobstate.report import history_text

    # Looked up at call time: a default bound at import would miss a redirected sys.stdout.
    out = out or sys.stdout
    if not result.has_job:
        print(f"no job: the nodes booted {'ready' if result.ready else 'with errors'}", file=out)
        for node, code in result.exit_codes.items():
            print(f"  {node:<10} boot script exit {code}", file=out)
        return
    state = (result.job_status or {}).get("state", "UNKNOWN")
    print(f"job {state}", file=out)
    if result.found_finished:
        print(
            "  (it had already succeeded in this work directory, so nothing was trained this time; "
            "add --fresh to train it again from the start)",
            file=out,
        )
    for node, status in result.node_status.items():
        if status is None:
            print(f"  {node:<10} no status written ({_exit_text(result.exit_codes[node])})", file=out)
        else:
            print(
                f"  {node:<10} {status['state']:<10} {_exit_text(status['exit_code'])}  at {status['time']}", file=out
            )
            history = history_text(status)
            if history:
                print(f"  {'':<10} history: {history}", file=out)
    for node, _ in result.preemptions:
        print(f"preempted: {node}", file=out)
    if result.preemptions or result.start_calls:
        print(f"start calls recorded: {len(result.start_calls)}", file=out)
        for call in result.start_calls:
            print(f"  {call}", file=out)
    print(f"job directory: {result.job_dir}", file=out)
    for name in (contract.LAYOUT.model_dir, contract.LAYOUT.metrics):
        # A gs:// job directory (a test's GcsBucket) is not looked into.
        path = result.job_dir / name if isinstance(result.job_dir, Path) else None
        if path is not None and path.exists():
            print(f"  {name}: {path}", file=out)
    print(f"self-stop calls recorded: {len(result.self_stops)}", file=out)
    for line in result.self_stops:
        print(f"  {line}", file=out)


def exit_code(result: LocalStackRunResult) -> int:
    """0 when the job succeeded (or, without a job, every node booted ready); else the chief
    trainer's exit code, or 1 when it has none."""
    if result.succeeded or result.ready:
        return 0
    code = (result.job_status or {}).get("exit_code")
    return code if isinstance(code, int) and code > 0 else 1
