"""``trainstack local``: a stack's training cluster run on this machine by its own boot script
and node agent.

Each node (chief, workers, parameter servers) is one ``bash cluster-node.sh`` process: the
script ``pulumi up`` would put on the VM, rendered the same way, which fetches and runs the
same node agent (``trainstack_agent``). Only the agent's cloud is bound to local stand-ins,
through its ``TRAINSTACK_*`` variables:

- metadata: an HTTP server answering as the metadata server does, with the attributes
  :func:`trainstack.cloud.bootscripts.cluster_node_metadata` gives the Pulumi program;
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
(:mod:`trainstack.localrun.netns`); where none can be had (no root, an image job), the run is
refused unless told to run them in this machine's own network. Everything runs on the CPU whatever GPUs
the stack names; TF_CONFIG addresses are loopback ports instead of internal DNS names.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Unpack

from trainstack.base.bucket import Bucket, DirectoryBucket
from trainstack.localrun.layout import LayoutOptions, LocalRunLayout, collect_result, lay_out, record_lost_agents
from trainstack.localrun.netns import LoopbackNetwork, NamespaceUnavailable
from trainstack.localrun.nodelogs import NodeLogWriter, is_runtime_noise
from trainstack.localrun.nodes import LocalNode, TrainerOverrides
from trainstack.localrun.outcome import LocalStackRunInterrupted, LocalStackRunResult
from trainstack.localrun.run_settings import write_record
from trainstack.localrun.spot import PREEMPT_GRACE_SECONDS, SpotMachines, serve_stand_ins
from trainstack.localrun.standing import WAKE_SIGNAL, remove_standing, write_standing
from trainstack.localrun.supervisor import STOP_SECONDS, Supervisor, print_flushed
from trainstack.localrun.workdir import check_adoptable, clear_workdir
from trainstack.stackmodel.resolved import ResolvedJob, ResolvedStack
from trainstack_contract.overrides import LocalOverrides

# After SIGINT or SIGTERM, how long the nodes get to record INTERRUPTED and end their
# trainers (each agent gives its trainer 10 s) before what is left is killed.
INTERRUPT_GRACE_SECONDS = 15.0
# After the chief's script exits, how long the other nodes may take to end on their own
# (parameter servers notice the finished job by polling the job directory).
GRACE_SECONDS = 90.0
# Local nodes share two cores: one intra-op thread pool per process keeps them from thrashing.
THREADS_PER_NODE = "1"


def node_environment(local_node: LocalNode, roots: tuple[str, str, str], layout: LocalRunLayout) -> dict[str, str]:
    """This process's environment with the node agent's cloud bound to the run's stand-ins,
    and TensorFlow kept to the CPU and one thread pool. ``roots``: the stand-ins' roots (the
    node's metadata, Compute Engine, the token service)."""
    metadata_root, compute_root, sts_root = roots
    self_stop_log, pip_find_links = layout.self_stop_log, layout.pip_find_links
    environment = dict(os.environ)
    if (layout.nodes_bin / "python3").is_symlink():
        # The python3 the nodes' boot script runs their agent with, as a VM's own: one the
        # job's user can run too (trainstack.localrun.workdir.nodes_python3).
        environment["PATH"] = f"{layout.nodes_bin}{os.pathsep}{environment.get('PATH', '')}"
    overrides = LocalOverrides(
        metadata_root=metadata_root,
        compute_api=compute_root,
        sts_api=sts_root,
        state_dir=str(local_node.state_dir),
        self_stop_log=str(self_stop_log),
        profile_dir=str(local_node.state_dir),
        # The local Docker engine pulls with the credentials its user set up.
        skip_registry_login=True,
        # pip on a node installs from what staging.fetch_for_pip put there: nodes reach no index.
        pip_find_links=str(pip_find_links),
        # A job's secrets come from this environment, as the caller exported them.
        secrets_from_environment=True,
        # gs:// objects (a test's GcsBucket) go to the emulator the client library uses.
        storage_api=os.environ.get("STORAGE_EMULATOR_HOST"),
    )
    environment.update(
        overrides.to_environment(),
        # The machine has no GPU; every node trains on the CPU whatever the stack names.
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_NUM_INTRAOP_THREADS=THREADS_PER_NODE,
        OMP_NUM_THREADS=THREADS_PER_NODE,
        PYTHONUNBUFFERED="1",
    )
    return environment


class SharedNetworkRefused(Exception):
    """The nodes cannot have a namespace of their own and the run was not told to go on without
    one; the message says why, and how to get one."""


# How to get isolation, or go on without it: the end of each refusal.
_WAYS_ON = (
    "`local` runs no node in this machine's own network unless told to: add --allow-shared-network "
    "on a machine whose other users and network may reach these ports"
)


def run_notes(machine_notes: list[str], network_note: str | None, job: ResolvedJob | None) -> list[str]:
    """What differs from the cloud: the machines' notes, the network's, and for an image named
    by tag that it is not pinned here (`pulumi up` pins it to a digest; `local` does not)."""
    notes = [*machine_notes, *([network_note] if network_note else [])]
    if job is not None and job.image is not None and job.image.tag is not None:
        notes.append(
            f"the job's image {job.image.uri} is named by tag and not pinned here: this machine's Docker engine "
            "pulls whatever the tag names now (on the cloud, `pulumi up` resolves the tag to its digest and "
            "nodes pull that)"
        )
    return notes


def loopback_network(
    allow_shared: bool, bucket: Bucket, job: ResolvedJob | None
) -> tuple[LoopbackNetwork | None, str | None]:
    """A namespace with nothing but loopback for the nodes and the stand-ins they call. Where
    none can be had (no root, or a bucket or an image that lives in this machine's own network:
    an emulator, the Docker engine), TensorFlow's gRPC servers would listen on every interface of
    this machine: :class:`SharedNetworkRefused`, unless ``allow_shared`` (then a note says so)."""
    every_interface = "TensorFlow's gRPC servers of this run listen on every interface of this machine"
    if job is not None and job.image is not None:
        reason = (
            f"the job runs the image {job.image.uri}, whose container shares the Docker engine's network "
            "(--network host), which no namespace of `local` holds"
        )
        how = "; or run the job's code as a package (job.package and job.module) as root, in a namespace of its own"
    elif not isinstance(bucket, DirectoryBucket):
        reason, how = "the nodes reach the bucket through this machine's network", ""
    else:
        try:
            return LoopbackNetwork.create(), None
        except NamespaceUnavailable as unavailable:
            reason = str(unavailable)
        how = "; or run `local` as root (sudo), where its nodes get a network namespace with nothing but loopback"
    if not allow_shared:
        raise SharedNetworkRefused(f"{every_interface} ({reason}): {_WAYS_ON}{how}")
    return None, f"{every_interface} ({reason})"


def stop_nodes(supervisor: Supervisor, layout: LocalRunLayout, echo: bool, timeout: float = STOP_SECONDS) -> None:
    """Every node's processes stopped (:meth:`Supervisor.stop`); then a node whose agent died
    without recording an end (``kill -9``) is recorded FAILED rather than left RUNNING."""
    supervisor.stop(timeout=timeout)
    for name in record_lost_agents(layout):
        if echo:
            # After SIGHUP the terminal answers EIO: the record stands, the line is lost.
            echo = print_flushed(
                f"[local] {name}: its node agent ended without recording an end; recorded FAILED", sys.stdout
            )


class LocalStackRun:
    """Starts every node's boot script, streams its output, and waits by the chief."""

    def __init__(
        self,
        stack: ResolvedStack,
        workdir: Path,
        overrides: TrainerOverrides,
        echo: bool = True,
        verbose: bool = False,
        preempt_after: float = 0.0,
        allow_shared_network: bool = False,
        **layout: Unpack[LayoutOptions],
    ) -> None:
        """``layout``: what :func:`~trainstack.localrun.layout.lay_out` takes besides the stack
        (``preempt``: the nodes to preempt ``preempt_after`` seconds after their job starts, as
        Compute Engine preempts a Spot VM; see :class:`~trainstack.localrun.spot.SpotMachines`);
        ``allow_shared_network``: see :func:`loopback_network`."""
        self.layout = lay_out(stack, workdir, overrides, **layout)
        self.stack, self.workdir, self.job = stack, self.layout.workdir, self.layout.job
        self.machines, self.nodes, self.job_dir = self.layout.machines, self.layout.nodes, self.layout.job_dir
        self.script = self.layout.script
        self.echo = echo
        self.network, self.network_note = loopback_network(allow_shared_network, self.layout.bucket, self.job)
        shown = None if verbose else (lambda line: not is_runtime_noise(line))
        self.supervisor = Supervisor(echo=echo, shown=shown)
        self.spot = SpotMachines(self.supervisor, self.nodes, self._boot_again, echo)
        self.preempt_after = preempt_after
        proc_net = self.network.proc_net if self.network else Path("/proc/self/net")
        stand_ins = functools.partial(serve_stand_ins, self.machines, stack.zone, self.spot, self.workdir, proc_net)
        self.server, self.compute, self.tokens = self.network.run_inside(stand_ins) if self.network else stand_ins()

    def prepare(self) -> None:
        self.layout.prepare(self.echo)

    def _environment(self, local_node: LocalNode) -> dict[str, str]:
        roots = (self.server.root_for(local_node.name), self.compute.root, self.tokens.root)
        return node_environment(local_node, roots, self.layout)

    def boot_command(self) -> list[str]:
        """How a node boots: its boot script, inside the run's namespace when there is one."""
        argv = ["bash", str(self.script)]
        return self.network.command(argv) if self.network else argv

    def _boot_again(self, local_node: LocalNode) -> subprocess.Popen[str]:
        # The same boot script, environment and directory as its first boot.
        return self.supervisor.restart(local_node.name)

    def start(self) -> LocalStackRun:
        if self.echo:
            # What differs from the cloud.
            for note in run_notes(self.machines.notes, self.network_note, self.job):
                print(f"[local] note: {note}", flush=True)
        self.prepare()
        for server in (self.server, self.compute, self.tokens):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self.started_at = time.time()
        for local_node in self.nodes:
            # Own process group: killing it takes the trainer down too, as a host restart does.
            local_node.process = self.supervisor.start(
                local_node.name, self.boot_command(), env=self._environment(local_node), cwd=local_node.state_dir
            )
            local_node.lines = self.supervisor.lines(local_node.name)
        self._log_writer = NodeLogWriter(self.workdir, {n.name: n.lines for n in self.nodes}, self.started_at)
        if self.machines.preempt:
            preempting = (self.machines.preempt, self.preempt_after)
            threading.Thread(target=self.spot.preempt_after_job_start, args=preempting, daemon=True).start()
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
        stop_nodes(self.supervisor, self.layout, self.echo, INTERRUPT_GRACE_SECONDS)
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
        for server in (self.server, self.compute, self.tokens):
            server.shutdown()
            server.server_close()
        if self.network is not None:
            self.network.close()

    def wait(self, timeout: float | None = None) -> LocalStackRunResult:
        chief = self.nodes[0]  # lay_out puts the chief first
        assert chief.process is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        self.supervisor.wait_for(lambda: not self.supervisor.running(chief.name), deadline)
        # No node boots again once the chief is done: it would find the job over.
        self.spot.close()
        others = [n.name for n in self.nodes[1:] if n.process is not None]
        self.supervisor.wait_for(lambda: self.supervisor.all_exited(others), time.monotonic() + GRACE_SECONDS)
        stop_nodes(self.supervisor, self.layout, self.echo)
        self._close()
        return self.result()

    def result(self) -> LocalStackRunResult:
        return collect_result(self.layout, list(self.compute.calls), list(self.spot.preemptions))


# How many times the standing run boots its nodes again for a job left queued as they stopped.
MAX_BOOTS_FOR_A_QUEUED_JOB = 2


def queued_job(run: LocalStackRun) -> int | None:
    """The id of a job of the queue that has not ended and is not cancelled, if any."""
    from trainstack.base.bucket import BucketError, DirectoryBucket
    from trainstack.jobqueue.history import outstanding
    from trainstack.jobqueue.queue import read_index
    from trainstack_contract.queue import QueueFormatError

    bucket = run.layout.bucket
    if not isinstance(bucket, DirectoryBucket):
        return None
    try:
        left = outstanding(read_index(bucket).entries, bucket)
    except (BucketError, QueueFormatError):
        return None
    return left[0].id if left else None


def wait_standing(run: LocalStackRun, wake: threading.Event, timeout: float | None = None) -> LocalStackRunResult:
    """`local --standing`: waits until every node's processes have exited (each idled out, or
    ended) or ``timeout``; each time ``wake`` is set (SIGUSR1: a job was submitted), boots every
    node that has exited again. Then stops what is left, as :meth:`LocalStackRun.wait` does."""
    names = [n.name for n in run.nodes]
    deadline = None if timeout is None else time.monotonic() + timeout
    booted_for: dict[int, int] = {}
    while run.supervisor.wait_for(lambda: wake.is_set() or run.supervisor.all_exited(names), deadline):
        if wake.is_set():
            wake.clear()
            run.spot.boot_stopped("a job was submitted")
            continue
        # The idle-stop race: a job came as the nodes ended their idle wait (each looked at the
        # queue just before), and the wake found them still up. It would wait for the next
        # `submit`: the nodes boot again for it, as `submit` starts a stopped VM. Twice at most
        # for one job: nodes that boot and leave it be will not take it.
        job = queued_job(run)
        if job is None or booted_for.get(job, 0) >= MAX_BOOTS_FOR_A_QUEUED_JOB:
            break
        booted_for[job] = booted_for.get(job, 0) + 1
        run.spot.boot_stopped(f"job {job} came as the nodes stopped")
    run.spot.close()
    stop_nodes(run.supervisor, run.layout, run.echo)
    run._close()
    return run.result()


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
    allow_shared_network: bool = False,
    standing: bool = False,
    standing_note: str = "",
) -> LocalStackRunResult:
    """Runs the stack's cluster to its end. ``standing`` (`local --standing`): the nodes wait
    for queued jobs for the stack's idle time instead of none, the run lasts until every node
    has exited, ``<workdir>/standing.json`` names this process meanwhile, and SIGUSR1 boots
    every node that has exited again (:func:`wait_standing`); ``standing_note`` is
    printed once it is up. On SIGINT, SIGTERM or SIGHUP (its terminal closed,
    its ssh session dropped: the nodes, in sessions of their own, hear none of it) every node is
    stopped as a VM's shutdown stops it (its agent records INTERRUPTED; SIGKILL after a grace),
    and :class:`LocalStackRunInterrupted` carries what they recorded: the job stays resumable."""
    if fresh:
        clear_workdir(workdir)
    check_adoptable(workdir)
    run = LocalStackRun(
        stack,
        workdir,
        overrides,
        echo,
        verbose=verbose,
        preempt=preempt,
        preempt_after=preempt_after,
        allow_shared_network=allow_shared_network,
        idle_seconds=(stack.idle_seconds or 0) if standing else None,
    )
    wake = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # A SIGHUP this process was started ignoring (nohup) stays ignored.
    handled = [signal.SIGTERM, *([signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else [])]
    previous = {signum: signal.signal(signum, on_signal) for signum in handled}
    if standing:
        previous[WAKE_SIGNAL] = signal.signal(WAKE_SIGNAL, lambda signum, frame: wake.set())
    try:
        try:
            started = run.start()
            if stack.job is not None:
                # What a resume must keep (trainstack.localrun.run_settings), once the work
                # directory is one that `local` made.
                write_record(workdir, stack.job.name, overrides)
            if not standing:
                return started.wait(timeout)
            write_standing(run.workdir, stack.stack)
            if echo and standing_note:
                print(standing_note, flush=True)
            return wait_standing(started, wake, timeout)
        except KeyboardInterrupt as interrupt:
            # Further signals may not cut the stopping short.
            for each in (signal.SIGINT, *handled):
                signal.signal(each, signal.SIG_IGN)
            name = str(interrupt) or "SIGINT"
            raise LocalStackRunInterrupted(name, run.interrupt()) from None
    finally:
        if standing:
            remove_standing(run.workdir)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)
