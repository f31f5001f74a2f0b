"""``trainstack start`` and ``trainstack stop``: the stack's machines, started or stopped in place.

Cluster VMs go through the Compute Engine client library (``google.cloud.compute_v1``):
each node's status is read first (a node already in the target state is reported, not
touched), then every start or stop request is sent, then the operations are awaited with
one deadline for all of them. The TPU VM and the Workbench instance have their own APIs,
whose client libraries are not dependencies of trainstack: they go through ``gcloud``.

A started cluster node runs its boot script, which resumes an unfinished job or, after
``trainstack:job.name`` changed and ``pulumi up`` updated its metadata, trains the new job.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from trainstack.base.googleapis import api_reasons, perimeter_refusal
from trainstack.commands.parsers import number_argument
from trainstack.commands.stackargs import add_stack_arguments, load_resolved

if TYPE_CHECKING:
    from google.cloud.compute_v1 import InstancesClient, Operation, ZoneOperationsClient

    from trainstack.stackmodel.resolved import ResolvedStack

Action = Literal["start", "stop"]
ACTIONS: tuple[Action, ...] = ("start", "stop")
Kind = Literal["vm", "tpu", "notebook"]

# Seconds, for every request and operation together.
DEFAULT_TIMEOUT = 600.0
# Between two polls of an operation that is not done; zoneOperations.wait itself returns
# when the operation is done or after at most about two minutes.
POLL_SECONDS = 2.0
CREDENTIALS_HINT = "run `gcloud auth application-default login`"

# Compute Engine instance statuses (compute_v1.Instance.Status), by what start and stop do with them.
STOPPED = frozenset({"TERMINATED", "STOPPED"})
STOPPING = frozenset({"STOPPING", "PENDING_STOP", "DEPROVISIONING"})
UP = frozenset({"RUNNING", "PROVISIONING", "STAGING", "PENDING", "REPAIRING"})
SUSPENDED = frozenset({"SUSPENDED", "SUSPENDING"})


@dataclass(frozen=True)
class ComputeClients:
    """What the cluster's VMs are started and stopped with."""

    instances: InstancesClient
    # Awaits the operations. Not the ExtendedOperation that InstancesClient.start returns:
    # its polling client ignores the api_endpoint the instances client was given.
    operations: ZoneOperationsClient


def default_compute_clients() -> ComputeClients:
    """Compute Engine's public endpoint with Application Default Credentials."""
    from google.cloud import compute_v1

    return ComputeClients(compute_v1.InstancesClient(), compute_v1.ZoneOperationsClient())


# The tests replace it with clients of a local fake Compute Engine API.
compute_clients: Callable[[], ComputeClients] = default_compute_clients


@dataclass(frozen=True)
class Machine:
    node: str  # chief, worker-0, ps-0, tpu, notebook: what --node names
    name: str  # the Compute Engine, TPU or Workbench instance name
    kind: Kind
    spot: bool = False


@dataclass(frozen=True)
class Outcome:
    machine: Machine
    ok: bool
    text: str


class NodeSelectionError(ValueError):
    pass


def stack_machines(stack: ResolvedStack) -> list[Machine]:
    machines = [Machine(n.name, n.vm_name, "vm", n.spot) for n in stack.cluster.nodes] if stack.cluster else []
    if stack.tpu is not None:
        machines.append(Machine(stack.tpu.name, stack.tpu.vm_name, "tpu", stack.tpu.spot))
    if stack.notebook is not None:
        from trainstack_contract import NOTEBOOK_NODE

        machines.append(Machine(NOTEBOOK_NODE, stack.notebook.instance_name, "notebook"))
    return machines


def vm_statuses(stack: ResolvedStack, clients: ComputeClients | None = None) -> dict[str, str]:
    """Each cluster VM's status by node (compute.instances.get, which a teammate who queues jobs
    holds on each VM); a VM that cannot be read is left out."""
    from google.api_core import exceptions as api

    clients = clients or compute_clients()
    statuses = {}
    for machine in stack_machines(stack):
        if machine.kind != "vm":
            continue
        try:
            found = clients.instances.get(project=stack.project, zone=stack.zone, instance=machine.name, timeout=60.0)
        except api.GoogleAPICallError:
            continue
        statuses[machine.node] = str(found.status)
    return statuses


def select_machines(machines: Sequence[Machine], wanted: Sequence[str] | None) -> list[Machine]:
    """Every machine, or those --node names (in the stack's order)."""
    if not wanted:
        return list(machines)
    known = {m.node for m in machines}
    unknown = [w for w in dict.fromkeys(wanted) if w not in known]
    if unknown:
        raise NodeSelectionError(
            f"--node {', '.join(unknown)}: not a node of this stack; its nodes are {', '.join(m.node for m in machines)}"
        )
    return [m for m in machines if m.node in wanted]


def api_call(action: Action, stack: ResolvedStack, machine: Machine) -> str:
    return f"compute.instances.{action} project={stack.project} zone={stack.zone} instance={machine.name}"


def _in_zone(stack: ResolvedStack) -> list[str]:
    return ["--zone", stack.zone, "--project", stack.project]


def gcloud_command(action: Action, stack: ResolvedStack, machine: Machine) -> list[str]:
    if machine.kind == "tpu":
        return ["gcloud", "compute", "tpus", "tpu-vm", action, machine.name, *_in_zone(stack), "--quiet"]
    if machine.kind == "notebook":
        # Workbench instances are zonal; the CLI calls the zone their location.
        location = ["--location", stack.zone, "--project", stack.project]
        return ["gcloud", "workbench", "instances", action, machine.name, *location]
    raise ValueError(f"{machine.node} is a Compute Engine VM: it goes through the client library")


def spot_tpu_refusal(stack: ResolvedStack, machine: Machine) -> str:
    delete = shlex.join(["gcloud", "compute", "tpus", "tpu-vm", "delete", machine.name, *_in_zone(stack)])
    # https://cloud.google.com/tpu/docs/spot: "You can't restart TPU Spot VMs, and you must
    # recreate them after preemption."
    return (
        "a Spot TPU cannot be started again once it has stopped or been preempted, only created anew: "
        f"`{delete}`, then `pulumi up --refresh`"
    )


# --- Compute Engine ----------------------------------------------------------------------------
def _api_error(error: BaseException, stack: ResolvedStack, action: Action) -> str:
    """One line for a failed request: what it means and what to do."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    if isinstance(error, auth.DefaultCredentialsError):
        return f"no Google Cloud credentials found: {CREDENTIALS_HINT}"
    if isinstance(error, auth.GoogleAuthError):
        return f"Google Cloud credentials refused ({_first_line(error)}): {CREDENTIALS_HINT}"
    if isinstance(error, api.NotFound):
        return (
            f"no such VM in project {stack.project}, zone {stack.zone}: run `pulumi up` first "
            "(`pulumi up --refresh` when it deleted itself with on_finish: delete)"
        )
    refusal = perimeter_refusal(str(error.message), api_reasons(error)) if isinstance(error, api.Forbidden) else None
    if refusal is not None:
        return f"project {stack.project}: {refusal}"
    if isinstance(error, api.Forbidden):
        return (
            f"permission denied in project {stack.project} (compute.instances.get and compute.instances.{action} "
            f"are needed, e.g. roles/compute.instanceAdmin.v1): {_first_line(error)}"
        )
    if isinstance(error, api.GoogleAPICallError):
        return f"Compute Engine refused: {_first_line(error)}"
    return f"Compute Engine could not be reached: {_first_line(error)}"


def _first_line(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return str(message).strip().splitlines()[0] if str(message).strip() else type(error).__name__


def _request_errors() -> tuple[type[BaseException], ...]:
    """What a request to Compute Engine raises for a reason outside this program: API
    errors, credentials, and the network (requests' errors are OSErrors)."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    return (api.GoogleAPICallError, api.RetryError, auth.GoogleAuthError, OSError)


def _operation_failure(operation: Operation) -> str | None:
    """The error a DONE operation carries, or None when it succeeded."""
    messages = [f"{e.code}: {e.message}" if e.code else e.message for e in operation.error.errors]
    if messages:
        return "; ".join(messages)
    if operation.http_error_status_code >= 400:
        return f"{operation.http_error_status_code} {operation.http_error_message}".strip()
    return None


@dataclass(frozen=True)
class _Pending:
    machine: Machine
    operation: str
    was: str


def _plan_vm(action: Action, stack: ResolvedStack, machine: Machine, status: str) -> Outcome | None:
    """What the node's status means for the action: an outcome now, or None to send the request."""
    if action == "start":
        if status in STOPPED:
            return None
        if status in UP:
            return Outcome(machine, True, f"already {status}")
        if status in STOPPING:
            return Outcome(machine, False, f"still {status}: run `trainstack start` again once it has stopped")
        if status in SUSPENDED:
            resume = shlex.join(["gcloud", "compute", "instances", "resume", machine.name, *_in_zone(stack)])
            return Outcome(machine, False, f"{status}, not stopped: resume it with `{resume}`")
        return Outcome(machine, False, f"status {status or 'unknown'}: not started")
    if status in STOPPED:
        return Outcome(machine, True, f"already {status}")
    if status in STOPPING:
        return Outcome(machine, True, f"already {status}")
    return None


def _issue_vm_requests(
    action: Action, stack: ResolvedStack, machines: Sequence[Machine], clients: ComputeClients, deadline: float
) -> tuple[list[Outcome], list[_Pending]]:
    from google.api_core import exceptions as api
    from google.api_core import retry as retries
    from google.cloud.compute_v1 import Operation

    outcomes: list[Outcome] = []
    pending: list[_Pending] = []
    for machine in machines:
        remaining = max(deadline - time.monotonic(), 1.0)
        try:
            # Reads retry on transient errors, within the deadline.
            transient = retries.Retry(
                predicate=retries.if_exception_type(api.ServiceUnavailable, api.DeadlineExceeded), timeout=remaining
            )
            status = clients.instances.get(
                project=stack.project,
                zone=stack.zone,
                instance=machine.name,
                retry=transient,
                timeout=min(remaining, 60.0),
            ).status
            decided = _plan_vm(action, stack, machine, status)
            if decided is not None:
                outcomes.append(decided)
                continue
            send = clients.instances.start_unary if action == "start" else clients.instances.stop_unary
            operation = send(
                project=stack.project, zone=stack.zone, instance=machine.name, timeout=min(remaining, 60.0)
            )
        except _request_errors() as error:
            outcomes.append(Outcome(machine, False, _api_error(error, stack, action)))
            continue
        if operation.status == Operation.Status.DONE:
            failure = _operation_failure(operation)
            outcomes.append(Outcome(machine, failure is None, failure or _done(action, status)))
        else:
            pending.append(_Pending(machine, operation.name, status))
    return outcomes, pending


def _done(action: Action, was: str) -> str:
    return f"{'started' if action == 'start' else 'stopped'} (was {was})"


def _await_operations(
    action: Action, stack: ResolvedStack, pending: Sequence[_Pending], clients: ComputeClients, deadline: float
) -> list[Outcome]:
    from google.cloud.compute_v1 import Operation

    outcomes = []
    for item in pending:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                outcomes.append(
                    Outcome(
                        item.machine,
                        False,
                        f"{action} requested, not done within the time limit (operation {item.operation}); "
                        f"see `gcloud compute instances describe {item.machine.name} --zone {stack.zone} "
                        f"--project {stack.project}`",
                    )
                )
                break
            try:
                operation = clients.operations.wait(
                    project=stack.project, zone=stack.zone, operation=item.operation, timeout=remaining
                )
            except _request_errors() as error:
                if time.monotonic() < deadline:
                    outcomes.append(Outcome(item.machine, False, _api_error(error, stack, action)))
                    break
                continue  # the request ran out of time: reported as not done above
            if operation.status == Operation.Status.DONE:
                failure = _operation_failure(operation)
                outcomes.append(Outcome(item.machine, failure is None, failure or _done(action, item.was)))
                break
            time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0.0)))
    return outcomes


def _act_on_vms(
    action: Action,
    stack: ResolvedStack,
    machines: Sequence[Machine],
    factory: Callable[[], ComputeClients],
    deadline: float,
    wait: bool = True,
) -> tuple[list[Outcome], Callable[[], list[Outcome]]]:
    """Sends every request now; the returned callable awaits the operations (``wait``) or
    reports them requested."""
    if not machines:
        return [], list
    try:
        clients = factory()
    except _request_errors() as error:
        return [Outcome(m, False, _api_error(error, stack, action)) for m in machines], list
    outcomes, pending = _issue_vm_requests(action, stack, machines, clients, deadline)
    if not wait:
        requested = [
            Outcome(p.machine, True, f"{action} requested (was {p.was}; operation {p.operation})") for p in pending
        ]
        return outcomes, lambda: requested
    return outcomes, lambda: _await_operations(action, stack, pending, clients, deadline)


# --- gcloud: the TPU VM and the Workbench instance ------------------------------------------------
def _run_gcloud(action: Action, stack: ResolvedStack, machine: Machine, gcloud: str, deadline: float) -> Outcome:
    argv = gcloud_command(action, stack, machine)
    shown = shlex.join(argv)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return Outcome(machine, False, f"not done within the time limit: `{shown}` was not run")
    try:
        # The path shutil.which found, so a gcloud.cmd on Windows runs as well.
        result = subprocess.run([gcloud, *argv[1:]], check=False, timeout=remaining)
    except subprocess.TimeoutExpired:
        return Outcome(machine, False, f"`{shown}` did not finish within the time limit; the operation may go on")
    except OSError as error:
        return Outcome(machine, False, f"`{shown}` could not start: {error.strerror or error}")
    if result.returncode != 0:
        return Outcome(machine, False, f"`{shown}` failed with exit code {result.returncode} (its message is above)")
    return Outcome(machine, True, "started" if action == "start" else "stopped")


# --- The command -----------------------------------------------------------------------------
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
    refused = [
        Outcome(m, False, spot_tpu_refusal(stack, m))
        for m in machines
        if action == "start" and m.kind == "tpu" and m.spot
    ]
    machines = [m for m in machines if m not in {o.machine for o in refused}]
    vms = [m for m in machines if m.kind == "vm"]
    others = [m for m in machines if m.kind != "vm"]
    if dry_run:
        for machine in vms:
            print(api_call(action, stack, machine))
        for machine in others:
            print(shlex.join(gcloud_command(action, stack, machine)))
        if vms:
            print(f"(each VM is read first with compute.instances.get; {action} is sent only to a VM {_needs(action)})")
        _report(action, refused)
        return 1 if refused else 0

    print(f"trainstack {action}: stack {stack.stack}, project {stack.project}, zone {stack.zone}")
    deadline = time.monotonic() + timeout
    outcomes = list(refused)
    gcloud = shutil.which("gcloud") if others else None
    if others and gcloud is None:
        outcomes += [
            Outcome(
                m,
                False,
                "gcloud not found: the TPU and Workbench APIs are reached through the Google Cloud CLI; "
                "install it (https://cloud.google.com/sdk/docs/install)",
            )
            for m in others
        ]
    immediate, await_vms = _act_on_vms(action, stack, vms, factory or compute_clients, deadline, wait)
    outcomes += immediate
    if gcloud is not None:
        # While the VMs' operations run; gcloud waits for its own.
        outcomes += [_run_gcloud(action, stack, m, gcloud, deadline) for m in others]
    outcomes += await_vms()
    order = {m.node: i for i, m in enumerate(stack_machines(stack))}
    outcomes.sort(key=lambda o: order[o.machine.node])
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


def _positive_seconds(text: str) -> float:
    value = number_argument(text, float, f"{text!r} is not a number of seconds")
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text}: give between 0 and 86400 seconds")
    return value


def _command(action: Action) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:

        return run_machines(load_resolved(args), action, nodes=args.node, dry_run=args.dry_run, timeout=args.timeout)

    return run


HELP = {
    "start": "start the stack's stopped machines (their boot scripts resume or start the job)",
    "stop": "stop the stack's machines: compute stops billing, disks and the bucket stay",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `start` and `stop` to the trainstack command line."""
    for action in ACTIONS:
        parser = subparsers.add_parser(action, help=HELP[action])
        add_stack_arguments(parser)
        parser.add_argument(
            "--node",
            action="append",
            metavar="NODE",
            help="only this node (chief, worker-0, ps-0, tpu, notebook); repeat for several",
        )
        parser.add_argument("--dry-run", action="store_true", help="print the API calls and commands; change nothing")
        parser.add_argument(
            "--timeout",
            type=_positive_seconds,
            default=DEFAULT_TIMEOUT,
            help=f"seconds to wait for all machines together (default {DEFAULT_TIMEOUT:.0f})",
        )
        parser.set_defaults(func=_command(action))
