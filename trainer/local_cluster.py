"""Runs a TF_CONFIG cluster of trainer processes on this machine, over loopback.

Used by the tests and for local runs:

    python -m trainer.local_cluster --workers 2 --ps 1 --chief -- \\
        --job-dir /tmp/job --data synthetic --image-size 32 --epochs 2 --steps-per-epoch 10

Every node is ``python -m trainer.task <args>`` with its own TF_CONFIG and no
visible GPU. Output lines are prefixed with the node name (``[worker-0] ...``).
The chief (the ``chief`` task, or ``worker-0`` without one) decides the outcome:
once it exits, the other nodes get a grace period to finish (parameter servers
and parameter-server workers exit by themselves when metrics.json appears) and
are then terminated. The CLI exits with the chief's status.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
# After the chief exits, how long the other nodes may take to finish on their own.
DEFAULT_GRACE_SECONDS = 60.0
# After a node other than a ps fails, how long the rest get before they are stopped:
# MultiWorkerMirroredStrategy peers notice a dead peer by health checks, not at once.
FAILURE_GRACE_SECONDS = 30.0
# After the chief failed, how long the others may take to exit on their own.
CHIEF_FAILED_GRACE_SECONDS = 15.0
POLL_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class Node:
    task_type: str
    task_id: int

    @property
    def name(self) -> str:
        return f"{self.task_type}-{self.task_id}"


@dataclasses.dataclass
class ClusterResult:
    chief: str
    chief_exit_code: int | None
    exit_codes: dict[str, int | None]
    logs: dict[str, list[str]]
    timed_out: bool = False

    def log_text(self, node: str | None = None) -> str:
        """One node's output, or every node's prefixed lines."""
        if node is not None:
            return "\n".join(self.logs.get(node, []))
        return "\n".join(f"[{name}] {line}" for name, lines in self.logs.items() for line in lines)


def free_loopback_ports(count: int) -> list[int]:
    """Ports the kernel reports free, all held open together so none repeats."""
    sockets = []
    try:
        for _ in range(count):
            handle = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            handle.bind(("127.0.0.1", 0))
            sockets.append(handle)
        return [handle.getsockname()[1] for handle in sockets]
    finally:
        for handle in sockets:
            handle.close()


def cluster_nodes(workers: int, ps: int, chief: bool, evaluator: bool) -> list[Node]:
    nodes = [Node("chief", 0)] if chief else []
    nodes += [Node("worker", index) for index in range(workers)]
    nodes += [Node("ps", index) for index in range(ps)]
    if evaluator:
        nodes.append(Node("evaluator", 0))
    return nodes


def tf_configs(nodes: Sequence[Node]) -> dict[str, str]:
    """TF_CONFIG per node name; the evaluator is not part of the cluster spec."""
    members = [node for node in nodes if node.task_type != "evaluator"]
    ports = free_loopback_ports(len(members))
    cluster: dict[str, list[str]] = {}
    for node, port in zip(members, ports):
        cluster.setdefault(node.task_type, []).append(f"127.0.0.1:{port}")
    return {
        node.name: json.dumps({"cluster": cluster,
                               "task": {"type": node.task_type, "index": node.task_id}})
        for node in nodes
    }


class LocalCluster:
    """Starts the nodes, streams their logs, and ends them by the chief's outcome."""

    def __init__(self, workers: int, ps: int = 0, chief: bool = False, evaluator: bool = False,
                 args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 threads_per_node: int | None = None, echo: bool = True,
                 python: str = sys.executable) -> None:
        if workers < 1 and not chief:
            raise ValueError("a cluster needs at least one worker or a chief")
        if ps and not chief:
            raise ValueError("parameter-server training needs a chief (the coordinator)")
        self.nodes = cluster_nodes(workers, ps, chief, evaluator)
        self.chief = "chief-0" if chief else "worker-0"
        self.args = list(args)
        self.env = dict(env or {})
        self.threads_per_node = threads_per_node
        self.echo = echo
        self.python = python
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self.logs: dict[str, list[str]] = {node.name: [] for node in self.nodes}
        self._readers: list[threading.Thread] = []
        self._echo_lock = threading.Lock()

    def _environment(self, tf_config: str) -> dict[str, str]:
        environment = dict(os.environ)
        environment.update(self.env)
        environment["TF_CONFIG"] = tf_config
        # Local nodes share one machine: no GPU, so every node behaves alike.
        environment["CUDA_VISIBLE_DEVICES"] = ""
        environment["PYTHONUNBUFFERED"] = "1"
        environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        pythonpath = environment.get("PYTHONPATH", "")
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), pythonpath]))
        if self.threads_per_node:
            # Several TensorFlow processes on few cores thrash if each sizes its
            # thread pools for the whole machine.
            # Only the intra-op pool: a parameter-server worker with one inter-op
            # thread deadlocks (a remote step waits on ops that need a second one).
            threads = str(self.threads_per_node)
            environment["TF_NUM_INTRAOP_THREADS"] = threads
            environment["OMP_NUM_THREADS"] = threads
        return environment

    def _read(self, name: str, stream: IO[str]) -> None:
        for line in stream:
            line = line.rstrip("\n")
            self.logs[name].append(line)
            if self.echo:
                with self._echo_lock:
                    print(f"[{name}] {line}", flush=True)

    def start(self) -> LocalCluster:
        configs = tf_configs(self.nodes)
        for node in self.nodes:
            process = subprocess.Popen(
                [self.python, "-m", "trainer.task", *self.args],
                cwd=str(REPOSITORY_ROOT), env=self._environment(configs[node.name]),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                # Own process group: a kill reaches anything the node started.
                start_new_session=True)
            self.processes[node.name] = process
            reader = threading.Thread(target=self._read, args=(node.name, process.stdout),
                                      daemon=True)
            reader.start()
            self._readers.append(reader)
        return self

    def signal_all(self, signal_number: int = signal.SIGKILL) -> None:
        """Sends a signal to every node's process group (SIGKILL = a host restart)."""
        for process in self.processes.values():
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal_number)
                except ProcessLookupError:
                    pass

    def _stop(self, names: Sequence[str]) -> None:
        for name in names:
            process = self.processes[name]
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for name in names:
            try:
                self.processes[name].wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.processes[name].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.processes[name].wait()

    def _wait_until(self, done: Callable[[], bool], deadline: float | None) -> bool:
        while not done():
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(POLL_SECONDS)
        return True

    def wait(self, timeout: float | None = None,
             grace_seconds: float = DEFAULT_GRACE_SECONDS) -> ClusterResult:
        """Waits for the chief, then lets the rest finish or stops them."""
        chief = self.processes[self.chief]
        deadline = None if timeout is None else time.monotonic() + timeout
        failed_at: list[float] = []

        def chief_done() -> bool:
            if chief.poll() is not None:
                return True
            # A failed worker leaves synchronous peers waiting; give them time
            # to notice, then end the run instead of hanging.
            for name, process in self.processes.items():
                if name.startswith("worker") and process.poll() not in (None, 0):
                    if not failed_at:
                        failed_at.append(time.monotonic())
                    return time.monotonic() - failed_at[0] > FAILURE_GRACE_SECONDS
            return False

        finished = self._wait_until(chief_done, deadline)
        others = [name for name in self.processes if name != self.chief]
        if finished:
            # After a failed chief the others usually fail the same way (say, bad
            # data on every node) or wait for it forever; a short grace tells the two apart.
            grace = grace_seconds if chief.poll() == 0 else min(grace_seconds,
                                                                CHIEF_FAILED_GRACE_SECONDS)
            self._wait_until(lambda: all(self.processes[name].poll() is not None
                                         for name in others),
                             time.monotonic() + grace)
        self._stop(list(self.processes))
        for reader in self._readers:
            reader.join(timeout=10)
        return ClusterResult(
            chief=self.chief, chief_exit_code=chief.returncode if finished else None,
            exit_codes={name: process.returncode for name, process in self.processes.items()},
            logs=self.logs, timed_out=not finished)


def run_local_cluster(workers: int = 2, ps: int = 0, chief: bool = False,
                      evaluator: bool = False, args: Sequence[str] = (),
                      job_dir: str | os.PathLike[str] | None = None,
                      env: Mapping[str, str] | None = None, timeout: float | None = None,
                      threads_per_node: int | None = None, echo: bool = True) -> ClusterResult:
    """Runs a whole job and returns the chief's exit code and every node's log."""
    full_args = list(args) + (["--job-dir", os.fspath(job_dir)] if job_dir is not None else [])
    cluster = LocalCluster(workers=workers, ps=ps, chief=chief, evaluator=evaluator,
                           args=full_args, env=env, threads_per_node=threads_per_node,
                           echo=echo)
    cluster.start()
    try:
        return cluster.wait(timeout=timeout)
    except BaseException:
        cluster.signal_all(signal.SIGKILL)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.local_cluster",
        description="Run trainer.task as a local multi-process cluster; "
                    "arguments after -- go to every node.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=0, help="parameter servers (needs --chief)")
    parser.add_argument("--chief", action="store_true", help="add a chief task")
    parser.add_argument("--evaluator", action="store_true", help="add a side-car evaluator")
    parser.add_argument("--threads-per-node", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=None, help="seconds before giving up")
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    trainer_args = options.trainer_args
    if trainer_args and trainer_args[0] == "--":
        trainer_args = trainer_args[1:]
    result = run_local_cluster(workers=options.workers, ps=options.ps, chief=options.chief,
                               evaluator=options.evaluator, args=trainer_args,
                               timeout=options.timeout,
                               threads_per_node=options.threads_per_node)
    status = "timed out" if result.timed_out else f"exit status {result.chief_exit_code}"
    print(f"[local_cluster] chief {result.chief}: {status}; "
          f"all nodes: {result.exit_codes}", file=sys.stderr)
    return 1 if result.chief_exit_code is None else result.chief_exit_code


if __name__ == "__main__":
    sys.exit(main())
