"""A stack's machines woken for its queue, or started and stopped: the cloud's through
trainstack.cloud.machines (reported as `start` and `stop` report them), a standing local run's
by waking its `trainstack local` process; and a cluster that was idle as a job came watched
until a node takes it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from trainstack.cloud.machines import (
    DEFAULT_TIMEOUT,
    Action,
    ComputeClients,
    Machine,
    NodeSelectionError,
    Outcome,
    act_on_machines,
    dry_run_lines,
    refusals,
    select_machines,
    stack_machines,
)
from trainstack.experiments.place import QueuePlace

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack
    from trainstack_contract.queue import QueueEntry

# How long `submit` watches a cluster that was up when its job came, for a node that stops at
# the end of its idle wait without having seen the job (seconds; Compute Engine stops a VM in
# about a minute), and how often it looks.
STOPPING_WATCH_SECONDS = 240.0
STOPPING_WATCH_POLL = 5.0


def start_machines(stack: ResolvedStack) -> int:
    """The cluster's and the TPU VM's start requested (not awaited: a teammate who queues jobs
    may start each VM, not read the project's operations); the exit status."""
    nodes = [node.name for node in stack.cluster.nodes] if stack.cluster else []
    nodes += [stack.tpu.name] if stack.tpu else []
    return run_machines(stack, "start", nodes=nodes, wait=False)


def up_and_idle(stack: ResolvedStack, place: QueuePlace, entry: QueueEntry) -> bool:
    """Every VM of the cluster up, and no job before this one still to end: its nodes are in
    their idle wait, and one may end it as the job comes."""
    from trainstack.cloud.machines import UP, vm_statuses
    from trainstack.jobqueue.history import outstanding
    from trainstack.jobqueue.queue import read_index

    if stack.cluster is None:
        return False
    statuses = vm_statuses(stack)
    if len(statuses) != len(stack.cluster.nodes) or not all(status in UP for status in statuses.values()):
        return False
    earlier = [e for e in read_index(place.bucket).entries if e.id < entry.id]
    return not outstanding(earlier, place.bucket)


def watch_until_taken(
    stack: ResolvedStack,
    place: QueuePlace,
    entry: QueueEntry,
    seconds: float = STOPPING_WATCH_SECONDS,
    poll: float = STOPPING_WATCH_POLL,
) -> int:
    """The job came to a cluster whose nodes were all in their idle wait: until a node takes it,
    a node that stops anyway (its wait ended as the job came) is started again once stopped,
    and the submitter is told so. Exit status of the starts, or 0."""
    from trainstack.cloud.machines import STOPPED, STOPPING, vm_statuses
    from trainstack.jobqueue.queue import job_prefix, job_state

    deadline, told = time.monotonic() + seconds, False
    while time.monotonic() < deadline:
        if job_state(place.bucket, job_prefix(entry)) is not None:
            return 0  # a node has taken it (RUNNING, or ended already)
        statuses = vm_statuses(stack)
        stopped = [node for node, status in statuses.items() if status in STOPPED]
        stopping = [node for node, status in statuses.items() if status in STOPPING]
        if stopped and not stopping:
            print(f"{', '.join(stopped)} stopped at the end of its idle wait as job {entry.id} came: starting it again")
            return run_machines(stack, "start", nodes=stopped, wait=False)
        if stopping and not told:
            print(
                f"{', '.join(stopping)} is stopping (its idle wait ended as job {entry.id} came); "
                "it is started again once stopped"
            )
            told = True
        time.sleep(poll)
    print(f"no node has taken job {entry.id} within {seconds:.0f} s; `trainstack jobs` says when one does")
    return 0


def wake_standing(place: QueuePlace, stack: ResolvedStack, stack_option: str) -> str:
    """--local: wakes the stack's standing `trainstack local` run, which boots its nodes that
    have exited; what happened, in words. ``stack_option``: how the command line named the stack."""
    from trainstack.localrun.standing import wake

    assert place.workdir is not None
    return wake(place.workdir, stack.stack, stack_option)


def run_machines(
    stack: ResolvedStack,
    action: Action,
    *,
    nodes: Sequence[str] | None = None,
    dry_run: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    factory: Callable[[], ComputeClients] | None = None,
    wait: bool = True,
) -> int:
    """Start or stop the stack's machines (or those named in ``nodes``); returns the exit status.
    ``wait=False`` (`submit`): the VMs' requests are sent and reported as requested, their
    operations not awaited (awaiting needs compute.zoneOperations.get, which only a project-wide
    grant gives: a teammate who queues jobs holds get and start on each VM alone)."""
    try:
        machines = select_machines(stack_machines(stack), nodes)
    except NodeSelectionError as error:
        print(f"trainstack: {action}: {error}", file=sys.stderr)
        return 2
    if dry_run:
        refused = refusals(action, stack, machines)
        allowed = [m for m in machines if m not in {o.machine for o in refused}]
        for line in dry_run_lines(action, stack, allowed):
            print(line)
        if any(m.kind == "vm" for m in allowed):
            print(f"(each VM is read first with compute.instances.get; {action} is sent only to a VM {_needs(action)})")
        _report(action, refused)
        return 1 if refused else 0
    print(f"trainstack {action}: stack {stack.stack}, project {stack.project}, zone {stack.zone}")
    outcomes = act_on_machines(action, stack, machines, timeout, wait, factory)
    _report(action, outcomes)
    failed = any(not o.ok for o in outcomes)
    afterword = _afterword(action, stack, [o.machine for o in outcomes])
    if not failed and afterword:
        print(afterword)
    return 1 if failed else 0


def _needs(action: Action) -> str:
    return "that is TERMINATED (stopped)" if action == "start" else "that is not already TERMINATED or STOPPING"


def _report(action: Action, outcomes: Sequence[Outcome]) -> None:
    for outcome in outcomes:
        machine = outcome.machine
        if outcome.ok:
            print(f"  {machine.node:<10} {machine.name:<32} {outcome.text}")
        else:
            print(f"trainstack: {action}: {machine.node} ({machine.name}): {outcome.text}", file=sys.stderr)


def _afterword(action: Action, stack: ResolvedStack, machines: Sequence[Machine]) -> str | None:
    kinds = {m.kind for m in machines}
    if action == "stop":
        tpu = " (what a stopped TPU VM still bills is not confirmed here)" if "tpu" in kinds else ""
        return (
            "Stopped machines no longer bill for vCPUs, memory or GPUs; their disks and the bucket still bill "
            f"until `pulumi destroy --exclude-protected`{tpu}."
        )
    if not kinds & {"vm", "tpu"}:
        return None
    if stack.job is None:
        return "The stack has no job: the machines boot ready, with no trainer started."
    return (
        f"Each started node's boot script runs job {stack.job.name} ({stack.job.job_dir}): it resumes the job when "
        "unfinished; a job that already succeeded is not trained again (set a new trainstack:job.name and "
        "`pulumi up` to train another)."
    )
