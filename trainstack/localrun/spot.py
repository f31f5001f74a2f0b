"""Compute Engine's side of a local run's Spot VMs: a node preempted as Compute Engine
preempts one, the status its stand-in API reports for each instance, and the start call that
boots a stopped node again."""

from __future__ import annotations

import signal
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from trainstack.cloud.machines import RUNNING, STOPPING_NOW, TERMINATED
from trainstack.localrun.nodes import LocalMachines, LocalNode
from trainstack.localrun.standins import ComputeApiServer, MetadataServer, TokenServiceServer
from trainstack.localrun.supervisor import POLL_SECONDS, Supervisor

# How many times a stand-in server is made again when the kernel gave it a cluster port.
MAX_PORT_TRIES = 20
ServerT = TypeVar("ServerT", bound=socketserver.TCPServer)
# A preempted Spot VM gets about 30 s between the preemption notice (ACPI G2 soft off, which
# the guest turns into SIGTERM) and being stopped
# (https://cloud.google.com/compute/docs/instances/spot#preemption-process).
PREEMPT_GRACE_SECONDS = 30.0
# The node agent's line when it starts the job's code (trainstack_agent/training.py).
JOB_STARTED = "trainstack: starting the job"
# Compute Engine's instance statuses, as the stand-in reports a node's.


class SpotMachines:
    """The nodes as Compute Engine sees them: running, stopping after a preemption notice, or
    stopped until a start call. ``boot`` boots a stopped node again (its boot script, metadata
    and state, as the VM's disk keeps them)."""

    def __init__(
        self,
        supervisor: Supervisor,
        nodes: list[LocalNode],
        boot: Callable[[LocalNode], subprocess.Popen[str]],
        echo: bool,
    ) -> None:
        self.supervisor = supervisor
        self.echo = echo
        self._boot = boot
        self._by_instance = {n.vm_name: n for n in nodes}
        # Nodes being preempted: the metadata stand-in answers instance/preempted TRUE for them.
        self.preempted: set[str] = set()
        # (node, time.time() of the preemption notice), in order.
        self.preemptions: list[tuple[str, float]] = []
        # Held while a node is preempted or booted again, and while the run closes.
        self._lock = threading.Lock()
        self._closing = threading.Event()

    def close(self) -> None:
        """No node is preempted or booted again from now on."""
        with self._lock:
            self._closing.set()

    def preempt_after_job_start(self, names: tuple[str, ...], seconds: float) -> None:
        """Preempts each of ``names`` ``seconds`` after its agent started the job: counted from
        there, not from the boot, the preemption lands at the same point of training on a fast
        machine and a slow one. Returns when all are preempted or the run closes."""
        pending = dict.fromkeys(names)
        due: dict[str, float] = {}
        while pending and not self._closing.wait(POLL_SECONDS):
            for name in list(pending):
                if name not in due and any(line.startswith(JOB_STARTED) for line in self.supervisor.lines(name)):
                    due[name] = time.monotonic() + seconds
                if name in due and time.monotonic() >= due[name]:
                    del pending[name]
                    self.preempt(name)

    def preempt(self, name: str, grace_seconds: float = PREEMPT_GRACE_SECONDS) -> None:
        """What Compute Engine does to a preempted Spot VM: its metadata says preempted, the
        guest gets SIGTERM (every process of the node), and whatever still runs after
        ``grace_seconds`` is killed. The instance is then stopped (TERMINATED) until a start
        call boots it again."""
        with self._lock:
            if self._closing.is_set() or not self.supervisor.running(name):
                return
            process = self.supervisor.process(name)
            self.preempted.add(name)
            self.preemptions.append((name, time.time()))
            self.supervisor.signal(name, signal.SIGTERM)
        if self.echo:
            print(f"[local] {name} preempted: SIGTERM now, SIGKILL after {grace_seconds:.0f} s", flush=True)

        def end_of_grace() -> None:
            if process.poll() is None:
                with self._lock:
                    if self.supervisor.process(name) is process:
                        self.supervisor.signal(name, signal.SIGKILL)

        timer = threading.Timer(grace_seconds, end_of_grace)
        timer.daemon = True
        timer.start()

    def instance_status(self, instance: str) -> str | None:
        """The instance's Compute Engine status, or None when there is no such instance."""
        local_node = self._by_instance.get(instance)
        if local_node is None:
            return None
        if self.supervisor.running(local_node.name):
            # Still running after the preemption notice: shutting down.
            return STOPPING_NOW if local_node.name in self.preempted else RUNNING
        return TERMINATED

    def start_instance(self, instance: str) -> bool:
        """Boots a stopped node again; a running one is left as it is, as Compute Engine does.
        False: no such instance."""
        local_node = self._by_instance.get(instance)
        if local_node is None:
            return False
        with self._lock:
            if self._closing.is_set() or self.supervisor.running(local_node.name):
                return True
            self.preempted.discard(local_node.name)
            local_node.process = self._boot(local_node)
        if self.echo:
            print(f"[local] {local_node.name} started again by a Compute Engine API call", flush=True)
        return True

    def boot_stopped(self, reason: str) -> list[str]:
        """Boots every node whose processes have all exited again, through its boot script (as
        :meth:`start_instance` does); the nodes booted. Nothing once the run closes."""
        booted = []
        with self._lock:
            for local_node in self._by_instance.values():
                if self._closing.is_set() or self.supervisor.running(local_node.name):
                    continue
                self.preempted.discard(local_node.name)
                local_node.process = self._boot(local_node)
                booted.append(local_node.name)
        if self.echo and booted:
            print(f"[local] {', '.join(booted)} booted again: {reason}", flush=True)
        return booted


def serve_stand_ins(
    machines: LocalMachines, zone: str, spot: SpotMachines, workdir: Path, proc_net: Path
) -> tuple[MetadataServer, ComputeApiServer, TokenServiceServer]:
    """The metadata server the machines read (a preempted node's says so; the node's token to
    the agents alone, ``proc_net`` the nodes' socket tables), the Compute Engine API their
    chief calls and the token service their agents downscope jobs' tokens at, each on a free
    loopback port (Compute Engine calls logged in ``compute-api.log``); started by the caller."""
    ports = machines.cluster_ports
    metadata = clear_of(
        ports,
        lambda: MetadataServer(
            {n.name: n.metadata for n in machines.nodes},
            machines.project_attributes,
            zone,
            preempted=spot.preempted,
            proc_net=proc_net,
        ),
    )
    compute = clear_of(
        ports, lambda: ComputeApiServer(zone, spot.instance_status, spot.start_instance, workdir / "compute-api.log")
    )
    return metadata, compute, clear_of(ports, TokenServiceServer)


def clear_of(ports: tuple[int, ...], make: Callable[[], ServerT]) -> ServerT:
    """A server on a free port that is none of ``ports``: the kernel may give a server bound to
    port 0 a port the run's TF_CONFIG already gave a node, picked before (then the node's
    TensorFlow server could not listen, and the job fail)."""
    for _ in range(MAX_PORT_TRIES):
        server = make()
        if server.server_address[1] not in ports:
            return server
        server.server_close()
    raise OSError(f"no free port other than the cluster's {ports} after {MAX_PORT_TRIES} tries")
