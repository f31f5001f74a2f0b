"""The stack's machines, and how each kind is started, stopped and looked at.

One interface, :class:`MachineKind`, with an implementation per kind of machine (as each has
its own API): Compute Engine VMs go through the Compute Engine client library
(``google.cloud.compute_v1``): each node's status is read first (a node already in the target
state is reported, not touched), then every start or stop request is sent, then the operations
are awaited with one deadline for all of them. The TPU VM and the Workbench instance have their
own APIs, whose client libraries are not dependencies of trainstack: they go through
``gcloud``. `start`, `stop` and `submit` act through :func:`act_on_machines`; the local
Compute Engine stand-in answers with the same statuses.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from trainstack.base.googleapis import api_reasons, perimeter_refusal

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
RUNNING, STOPPING_NOW, TERMINATED = "RUNNING", "STOPPING", "TERMINATED"
STOPPED = frozenset({TERMINATED, "STOPPED"})
STOPPING = frozenset({STOPPING_NOW, "PENDING_STOP", "DEPROVISIONING"})
UP = frozenset({RUNNING, "PROVISIONING", "STAGING", "PENDING", "REPAIRING"})
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


# --- One interface, an implementation per kind ----------------------------------------------------
class MachineKind(Protocol):
    """How one kind of machine is started and stopped."""

    @property
    def kind(self) -> Kind:
        """The kind of machine it acts on."""
        ...

    def dry_run(self, action: Action, stack: ResolvedStack, machine: Machine) -> str:
        """The API call or command that ``action`` would make."""
        ...

    def act(
        self, action: Action, stack: ResolvedStack, machines: Sequence[Machine], deadline: float, wait: bool
    ) -> tuple[list[Outcome], Callable[[], list[Outcome]]]:
        """Sends ``action`` for each machine now: the outcomes known at once, and what awaits
        the rest (``wait``) or reports them requested."""
        ...


@dataclass(frozen=True)
class ComputeEngineVms:
    """The cluster's VMs, through the Compute Engine client library."""

    factory: Callable[[], ComputeClients] | None = None
    kind: Kind = "vm"

    def dry_run(self, action: Action, stack: ResolvedStack, machine: Machine) -> str:
        return api_call(action, stack, machine)

    def act(
        self, action: Action, stack: ResolvedStack, machines: Sequence[Machine], deadline: float, wait: bool
    ) -> tuple[list[Outcome], Callable[[], list[Outcome]]]:
        return _act_on_vms(action, stack, machines, self.factory or compute_clients, deadline, wait)


@dataclass(frozen=True)
class GcloudMachines:
    """A TPU VM or a Workbench instance, through the Google Cloud CLI, which waits for its own
    operation."""

    kind: Kind

    def dry_run(self, action: Action, stack: ResolvedStack, machine: Machine) -> str:
        return shlex.join(gcloud_command(action, stack, machine))

    def act(
        self, action: Action, stack: ResolvedStack, machines: Sequence[Machine], deadline: float, wait: bool
    ) -> tuple[list[Outcome], Callable[[], list[Outcome]]]:
        if not machines:
            return [], list
        gcloud = shutil.which("gcloud")
        if gcloud is None:
            missing = (
                "gcloud not found: the TPU and Workbench APIs are reached through the Google Cloud CLI; "
                "install it (https://cloud.google.com/sdk/docs/install)"
            )
            return [Outcome(m, False, missing) for m in machines], list
        return [_run_gcloud(action, stack, m, gcloud, deadline) for m in machines], list


def machine_kinds(factory: Callable[[], ComputeClients] | None = None) -> tuple[MachineKind, ...]:
    """Each kind's implementation, VMs first: their requests are sent before gcloud runs, and
    their operations go on meanwhile."""
    return (ComputeEngineVms(factory), GcloudMachines("tpu"), GcloudMachines("notebook"))


def refusals(action: Action, stack: ResolvedStack, machines: Sequence[Machine]) -> list[Outcome]:
    """What ``action`` is refused on before any request: a Spot TPU's start (it can only be
    created anew)."""
    return [
        Outcome(m, False, spot_tpu_refusal(stack, m))
        for m in machines
        if action == "start" and m.kind == "tpu" and m.spot
    ]


def act_on_machines(
    action: Action,
    stack: ResolvedStack,
    machines: Sequence[Machine],
    timeout: float,
    wait: bool = True,
    factory: Callable[[], ComputeClients] | None = None,
) -> list[Outcome]:
    """``action`` on each machine, by its kind, within ``timeout`` seconds for all; the outcomes
    in the stack's order. A Spot TPU is refused a start (it can only be created anew)."""
    refused = refusals(action, stack, machines)
    deadline = time.monotonic() + timeout
    outcomes = list(refused)
    awaiting = []
    for kind in machine_kinds(factory):
        mine = [m for m in machines if m.kind == kind.kind and m not in {o.machine for o in refused}]
        now, later = kind.act(action, stack, mine, deadline, wait)
        outcomes += now
        awaiting.append(later)
    for later in awaiting:
        outcomes += later()
    order = {m.node: i for i, m in enumerate(stack_machines(stack))}
    return sorted(outcomes, key=lambda o: order[o.machine.node])


def dry_run_lines(action: Action, stack: ResolvedStack, machines: Sequence[Machine]) -> list[str]:
    """The calls and commands ``action`` would make, by kind (VMs first)."""
    return [kind.dry_run(action, stack, m) for kind in machine_kinds() for m in machines if m.kind == kind.kind]
