"""The nodes of a local run: each with the metadata ``pulumi up`` would give its VM, the
trainer flags a local run changes, the TPU VM's CPU stand-in and which nodes `--preempt` may
name."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import trainstack_contract as contract
from trainstack.cloud import bootscripts
from trainstack.jobcode.arguments import override_arguments
from trainstack.localrun.supervisor import free_loopback_ports
from trainstack.stackmodel.resolved import ResolvedCluster, ResolvedJob, ResolvedStack


@dataclass(frozen=True)
class TrainerOverrides:
    """Trainer flags a local run changes to keep a CPU job short (``--epochs 2`` ...)."""

    values: dict[str, str] = field(default_factory=dict)
    # Arguments for the job's code overriding the stack's flag by flag (`local --args`:
    # trainstack.jobcode.arguments).
    extra: tuple[str, ...] = ()
    # The job's arguments in place of the stack's whole (`local --args-replace`).
    replaced: tuple[str, ...] | None = None

    def apply(self, args: list[str], dropped: tuple[str, ...] = ()) -> list[str]:
        """``args`` (or the ``replaced`` ones) with every occurrence of each overridden flag
        (``--f V`` and ``--f=V``) replaced by one ``--f value`` at the end, the ``dropped``
        flags left out, and ``extra`` overriding flag by flag."""
        result: list[str] = []
        skip_value = False
        for arg in args if self.replaced is None else self.replaced:
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
        return override_arguments(result, self.extra)


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
        overrides.replaced,
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


@dataclass
class LocalMachines:
    """The machines of a local run: which boot script they run, each node with its metadata,
    the project metadata they share, what differs from the cloud, and the nodes to preempt."""

    template: str
    script_name: str
    nodes: list[LocalNode]
    project_attributes: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    preempt: tuple[str, ...] = ()
    # The loopback ports TF_CONFIG gives the nodes' TensorFlow servers: kept clear of every
    # stand-in server the run starts (trainstack.localrun.spot.serve_stand_ins).
    cluster_ports: tuple[int, ...] = ()


def without_queue(metadata: dict[str, str], idle_seconds: int | None) -> dict[str, str]:
    """A one-shot local run (``idle_seconds`` None): its nodes run the stack's own job alone,
    with no queue, and apply on_finish at its end, as nodes did before the queue."""
    if idle_seconds is None:
        metadata.pop(contract.METADATA_KEYS.idle_seconds, None)
    return metadata


@dataclass(frozen=True)
class NodeSetup:
    """What a local run's nodes are made from, beside the stack, for a TPU VM and a cluster alike."""

    # The nodes' job (the stand-in's job directory in it); None: the stack has none.
    job: ResolvedJob | None
    # The bucket's stand-in, as the nodes' metadata names it.
    bucket_uri: str
    overrides: TrainerOverrides
    kind: bootscripts.NodeKind
    # The run's work directory: each node's state is under nodes/<name>/state.
    workdir: Path
    # The nodes `--preempt` names (:func:`check_preemptible` says which may be named).
    preempt: tuple[str, ...]
    # How long nodes that run the job queue wait for a job; None: a one-shot run, no queue.
    idle_seconds: int | None = None

    def state_dir(self, node_name: str) -> Path:
        return self.workdir / "nodes" / node_name / "state"


def tpu_machine(stack: ResolvedStack, setup: NodeSetup) -> LocalMachines:
    """The TPU VM as one node on this machine's CPU (:func:`tpu_stand_in`)."""
    tpu, job, idle_seconds = stack.tpu, setup.job, setup.idle_seconds
    assert tpu is not None
    if setup.preempt:
        raise PreemptError("--preempt: a TPU stack has no Compute Engine Spot VM for `local` to preempt")
    builtin = job is not None and job.builtin
    args, notes = tpu_stand_in(list(tpu.trainer_args), setup.overrides, builtin, tpu.accelerator_type)
    node = LocalNode(
        contract.TPU_NODE,
        contract.CHIEF,
        0,
        tpu.vm_name,
        without_queue(
            bootscripts.tpu_node_metadata(
                stack, tpu, setup.bucket_uri, tuple(args), setup.kind, job, idle_seconds
            ).to_metadata(),
            idle_seconds,
        ),
        setup.state_dir(contract.TPU_NODE),
    )
    return LocalMachines(bootscripts.TPU_VM, "tpu-vm.sh", [node], notes=notes)


def cluster_machines(stack: ResolvedStack, setup: NodeSetup, gpu_count: int) -> LocalMachines:
    """Every node of the cluster, with the metadata ``pulumi up`` gives its VM; TF_CONFIG's
    cluster has loopback ports where the cloud has internal DNS names."""
    cluster, idle_seconds = stack.cluster, setup.idle_seconds
    assert cluster is not None
    args = tuple(setup.overrides.apply(list(cluster.trainer_args)))
    nodes = [
        LocalNode(
            node.name,
            node.role,
            node.index,
            node.vm_name,
            without_queue(
                bootscripts.cluster_node_metadata(
                    cluster,
                    node,
                    setup.bucket_uri,
                    setup.job,
                    args,
                    gpu_count=gpu_count,
                    kind=setup.kind,
                    wheelhouse=stack.wheelhouse,
                    idle_seconds=idle_seconds,
                ).to_metadata(),
                idle_seconds,
            ),
            setup.state_dir(node.name),
        )
        for node in cluster.nodes
    ]
    project_attributes: dict[str, str] = {}
    if cluster.tf_cluster:
        ports = free_loopback_ports(len(cluster.nodes))
        local_cluster = contract.tf_cluster(
            (node.role, f"127.0.0.1:{port}") for node, port in zip(cluster.nodes, ports, strict=True)
        )
        project_attributes[cluster.tf_cluster_metadata_key] = json.dumps(local_cluster)
    return LocalMachines(
        bootscripts.CLUSTER_NODE,
        "cluster-node.sh",
        nodes,
        project_attributes=project_attributes,
        preempt=check_preemptible(cluster, setup.preempt),
        cluster_ports=tuple(ports) if cluster.tf_cluster else (),
    )
