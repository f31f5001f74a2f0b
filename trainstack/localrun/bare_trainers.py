"""Runs a TF_CONFIG cluster of trainer processes on this machine, over loopback.

A development and test tool; it lives outside the ``trainer`` package, which ships to
every node. Used by the tests and for local runs:

    python -m trainstack.localrun.bare_trainers --workers 2 --ps 1 --chief -- \\
        --job-dir /tmp/job --data synthetic --image-size 32 --epochs 2 --steps-per-epoch 10

Every node is ``python -m trainer.task <args>`` with its own TF_CONFIG and no visible GPU,
started from the repository root with the root on PYTHONPATH. Nodes are named as
:func:`trainstack_contract.node_name` names them (``chief``, ``worker-0``, ``ps-0``, and
``evaluator-0`` for the side-car evaluator, which is not a cluster member); output lines
are prefixed with the node name (``[worker-0] ...``). The chief (the ``chief`` task, or
``worker-0`` without one) decides the outcome: once it exits, the other nodes get a grace
period to finish (parameter servers and parameter-server workers exit by themselves when
metrics.json appears) and are then terminated. The CLI exits with the chief's status.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence

import trainstack_contract as contract
from trainstack.base.project import PROJECT_ROOT
from trainstack.localrun.supervisor import Supervisor, free_loopback_ports

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
        return contract.node_name(self.task_type, self.task_id)


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


def cluster_nodes(workers: int, ps: int, chief: bool, evaluator: bool) -> list[Node]:
    nodes = [Node(contract.CHIEF, 0)] if chief else []
    nodes += [Node(contract.WORKER, index) for index in range(workers)]
    nodes += [Node(contract.PS, index) for index in range(ps)]
    if evaluator:
        nodes.append(Node(contract.EVALUATOR, 0))
    return nodes


def tf_configs(nodes: Sequence[Node]) -> dict[str, str]:
    """TF_CONFIG per node name; the evaluator is not part of the cluster spec."""
    members = [node for node in nodes if node.task_type != contract.EVALUATOR]
    ports = free_loopback_ports(len(members))
    cluster = contract.tf_cluster(
        (node.task_type, f"127.0.0.1:{port}") for node, port in zip(members, ports, strict=True)
    )
    return {node.name: contract.tf_config(cluster, node.task_type, node.task_id) for node in nodes}


class BareTrainerCluster:
    """Starts the nodes, streams their logs, and ends them by the chief's outcome."""

    def __init__(
        self,
        workers: int,
        ps: int = 0,
        chief: bool = False,
        evaluator: bool = False,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        threads_per_node: int | None = None,
        echo: bool = True,
        python: str = sys.executable,
    ) -> None:
        if workers < 1 and not chief:
            raise ValueError("a cluster needs at least one worker or a chief")
        if ps and not chief:
            raise ValueError("parameter-server training needs a chief (the coordinator)")
        self.nodes = cluster_nodes(workers, ps, chief, evaluator)
        self.chief = contract.node_name(contract.CHIEF, 0) if chief else contract.node_name(contract.WORKER, 0)
        self.args = list(args)
        self.env = dict(env or {})
        self.threads_per_node = threads_per_node
        self.python = python
        self.supervisor = Supervisor(echo=echo, poll_seconds=POLL_SECONDS)

    @property
    def logs(self) -> dict[str, list[str]]:
        """Every started node's output lines so far."""
        return self.supervisor.logs

    def _environment(self, tf_config: str) -> dict[str, str]:
        environment = dict(os.environ)
        environment.update(self.env)
        environment["TF_CONFIG"] = tf_config
        # Local nodes share one machine: no GPU, so every node behaves alike.
        environment["CUDA_VISIBLE_DEVICES"] = ""
        environment["PYTHONUNBUFFERED"] = "1"
        environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # `python -m trainer.task` imports the trainer from the repository root.
        pythonpath = environment.get("PYTHONPATH", "")
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), pythonpath]))
        if self.threads_per_node:
            # Several TensorFlow processes on few cores thrash if each sizes its
            # thread pools for the whole machine.
            # Only the intra-op pool: a parameter-server worker with one inter-op
            # thread deadlocks (a remote step waits on ops that need a second one).
            threads = str(self.threads_per_node)
            environment["TF_NUM_INTRAOP_THREADS"] = threads
            environment["OMP_NUM_THREADS"] = threads
        return environment

    def start(self) -> BareTrainerCluster:
        configs = tf_configs(self.nodes)
        for node in self.nodes:
            self.supervisor.start(
                node.name,
                [self.python, "-m", "trainer.task", *self.args],
                env=self._environment(configs[node.name]),
                cwd=PROJECT_ROOT,
            )
        return self

    def signal_all(self, signal_number: int = signal.SIGKILL) -> None:
        """Sends a signal to every node's process group (SIGKILL = a host restart)."""
        self.supervisor.signal_all(signal_number)

    def wait(self, timeout: float | None = None, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> ClusterResult:
        """Waits for the chief, then lets the rest finish or stops them."""
        supervisor = self.supervisor
        deadline = None if timeout is None else time.monotonic() + timeout
        workers = [node.name for node in self.nodes if node.task_type == contract.WORKER]
        failed_at: list[float] = []

        def chief_done() -> bool:
            if supervisor.poll(self.chief) is not None:
                return True
            # A failed worker leaves synchronous peers waiting; give them time
            # to notice, then end the run instead of hanging.
            if any(supervisor.poll(name) not in (None, 0) for name in workers):
                if not failed_at:
                    failed_at.append(time.monotonic())
                return time.monotonic() - failed_at[0] > FAILURE_GRACE_SECONDS
            return False

        finished = supervisor.wait_for(chief_done, deadline)
        others = [name for name in supervisor.names if name != self.chief]
        if finished:
            # After a failed chief the others usually fail the same way (say, bad
            # data on every node) or wait for it forever; a short grace tells the two apart.
            grace = (
                grace_seconds if supervisor.poll(self.chief) == 0 else min(grace_seconds, CHIEF_FAILED_GRACE_SECONDS)
            )
            supervisor.wait_for(lambda: supervisor.all_exited(others), time.monotonic() + grace)
        supervisor.stop()
        supervisor.close()
        return ClusterResult(
            chief=self.chief,
            chief_exit_code=supervisor.returncode(self.chief) if finished else None,
            exit_codes=supervisor.returncodes(),
            logs=supervisor.logs,
            timed_out=not finished,
        )


def run_local_cluster(
    workers: int = 2,
    ps: int = 0,
    chief: bool = False,
    evaluator: bool = False,
    args: Sequence[str] = (),
    job_dir: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    threads_per_node: int | None = None,
    echo: bool = True,
) -> ClusterResult:
    """Runs a whole job and returns the chief's exit code and every node's log."""
    full_args = list(args) + (["--job-dir", os.fspath(job_dir)] if job_dir is not None else [])
    cluster = BareTrainerCluster(
        workers=workers,
        ps=ps,
        chief=chief,
        evaluator=evaluator,
        args=full_args,
        env=env,
        threads_per_node=threads_per_node,
        echo=echo,
    )
    cluster.start()
    try:
        return cluster.wait(timeout=timeout)
    except BaseException:
        cluster.signal_all(signal.SIGKILL)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainstack.localrun.bare_trainers",
        description="Run trainer.task as a local multi-process cluster; arguments after -- go to every node.",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=0, help="parameter servers (needs --chief)")
    parser.add_argument("--chief", action="store_true", help="add a chief task")
    parser.add_argument("--evaluator", action="store_true", help="add a side-car evaluator")
    parser.add_argument("--threads-per-node", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=None, help="seconds before giving up")
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    trainer_args: list[str] = options.trainer_args
    if trainer_args and trainer_args[0] == "--":
        trainer_args = trainer_args[1:]
    result = run_local_cluster(
        workers=options.workers,
        ps=options.ps,
        chief=options.chief,
        evaluator=options.evaluator,
        args=trainer_args,
        timeout=options.timeout,
        threads_per_node=options.threads_per_node,
    )
    status = "timed out" if result.timed_out else f"exit status {result.chief_exit_code}"
    print(f"[bare_trainers] chief {result.chief}: {status}; all nodes: {result.exit_codes}", file=sys.stderr)
    return 1 if result.chief_exit_code is None else result.chief_exit_code


if __name__ == "__main__":
    sys.exit(main())
