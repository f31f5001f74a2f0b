"""The agent's entry point, run by every node's boot script once its digest checks out.

    python3 trainstack-agent-<digest>.pyz            the node's work (one boot)
    python3 trainstack-agent-<digest>.pyz cap PID --tpu-name ... --deadline EPOCH
                                                     a TPU VM's run-time cap (started by the above)

Exit status: the job's code's on a finished job (0 when it succeeded), 143 when a signal or
a duty ended the work, 1 when the node could not read its settings (it then records FAILED
where it can and stops the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Final, Protocol

from trainstack_agent.board import Board
from trainstack_agent.cloud import NO_RETRY, CloudError, Http, Unavailable
from trainstack_agent.compute import ComputeApi, Place
from trainstack_agent.endpoints import Endpoints, Host, from_environment
from trainstack_agent.environment import Environment
from trainstack_agent.gcs import Storage
from trainstack_agent.jobqueue import JobQueue, QueueServices, running_job_dir
from trainstack_agent.jobtoken import job_credentials
from trainstack_agent.jobuser import JobUser
from trainstack_agent.metadata import Metadata
from trainstack_agent.node import NodeAgent
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.recovery import CALL_SECONDS as RECOVERY_CALL_SECONDS
from trainstack_agent.recovery import SpotRecovery
from trainstack_agent.release import Release
from trainstack_agent.runend import RunEnd, flex_start_end
from trainstack_agent.secrets import read_secrets
from trainstack_agent.services import Clock, Launcher, Services, SystemClock
from trainstack_agent.settings import (
    KEYS,
    NodeSettings,
    SettingsError,
    known_identity,
    read_settings,
)
from trainstack_agent.timings import Timings
from trainstack_agent.warm import WarmStarts
from trainstack_contract import CLUSTER_NODE_KIND, LAYOUT, NO_JOB, TPU_NODE, TPU_NODE_KIND
from trainstack_contract.jobaccess import JobAccess
from trainstack_contract.lifecycle import JobState
from trainstack_contract.metadata import MAX_RUN_SECONDS
from trainstack_contract.names import NODE_NAME, PROJECT_ID
from trainstack_contract.timescale import TIME_SCALE_VARIABLE, TimeScaleError, parse_time_scale

EXIT_ABORTED = 1
# After the TPU run-time cap's SIGTERM, how long the agent gets to record and end its work.
CAP_GRACE_SECONDS = 30.0
# The cap looks at the clock at least this often while it waits for its deadline, so that a
# step of the system clock moves the stop with it.
CAP_CHECK_SECONDS = 60.0
# What the cap reads and writes to record FAILED gets at most this long before the stop.
CAP_RECORD_SECONDS = 180.0
# The cap's arguments (it runs as root): a project id as the stack file takes it, a zone (the
# AI zones' suffixes, like us-central1-ai1, included), whole numbers.
ZONE: Final = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z][a-z0-9]{0,7}")
_CAP_NUMBER: Final = re.compile(r"[0-9]{1,12}")
_CAP_RELEASE: Final = re.compile(r"stop|delete")


class CapClock(Clock, Protocol):
    """The cap's clock: the system's (seconds since the epoch) for its deadline as well."""

    def utc(self) -> datetime: ...


class CapSystemClock(SystemClock):
    def utc(self) -> datetime:
        return datetime.now(timezone.utc)


class Agent:
    """The pieces every command of the agent shares: log, HTTP, metadata, storage, release."""

    def __init__(
        self,
        environment: Mapping[str, str],
        http: Http | None = None,
        run: Callable[[Sequence[str]], object] | None = None,
    ) -> None:
        """``http`` and ``run`` (what runs the guest shutdown) are the tests' to replace."""
        self.environment = environment
        self.endpoints: Endpoints
        self.host: Host
        self.endpoints, self.host = from_environment(environment)
        self.log = Log()
        self.http = http or Http()
        self.metadata = Metadata(self.http, self.endpoints.metadata)
        self.storage = Storage(self.http, self.metadata, self.endpoints.storage)
        self._run = run

    def release(self, kind: str, node: str, tpu_name: str | None, place: Place | None = None) -> Release:
        release = Release(
            kind,
            node,
            tpu_name,
            self.metadata,
            self.http,
            self.endpoints,
            self.log,
            self.host.self_stop_log,
            place=place,
        )
        if self._run is not None:
            release.run = self._run
        return release


def new_incarnation() -> str:
    """Names one run of a node's agent in its status objects."""
    return os.urandom(8).hex()


def abort(agent: Agent, reason: str) -> int:
    """A boot that cannot tell what to do: record FAILED where that is known, then stop the
    machine, whatever on_finish says."""
    agent.log(f"boot aborted: {reason}; stopping this machine")
    node, job_dir = known_identity(agent.metadata)
    if node is not None and job_dir is not None:
        try:
            Board(agent.storage, job_dir, node, new_incarnation()).write_node(JobState.FAILED, 1, reason)
        except Exception as error:  # noqa: BLE001 - the machine stops whatever happens here
            agent.log(f"could not record FAILED: {error}")
    try:
        kind = agent.metadata.attribute(KEYS.node_kind) or CLUSTER_NODE_KIND
        tpu_name = agent.metadata.attribute(KEYS.tpu_name) if kind == TPU_NODE_KIND else None
    except CloudError:
        kind, tpu_name = CLUSTER_NODE_KIND, None
    agent.release(kind, node or "node", tpu_name)("stop")
    return EXIT_ABORTED


def take_boot_lock(state_dir: Path) -> int | None:
    """One agent per node at a time: two boots racing (a restart while the first still runs)
    would start two trainers on one job directory. The lock is inherited by every child, so it
    is held as long as anything of this boot still runs. None when another boot holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(state_dir / "boot.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def boot_ready(agent: Agent, settings: NodeSettings, environment: Environment) -> None:
    """A node without a job (a dev box): the environment is installed and TF_CONFIG written
    where a user's shell finds it; nothing starts, and the run-time cap still stops it."""
    environment.packages.install()
    where = ""
    if settings.tf_config is not None:
        state_file = agent.host.state_dir / "tf_config.json"
        state_file.write_text(settings.tf_config + "\n")
        if agent.host.profile_dir.is_dir():
            profile = agent.host.profile_dir / "trainstack-tf-config.sh"
            profile.write_text(f"export TF_CONFIG={shlex.quote(settings.tf_config)}\n")
        where = f", TF_CONFIG in {state_file}"
    agent.log(f"node {settings.node} ready: no job to run; python environment {environment.packages.venv}{where}")


class CapOrdersError(ValueError):
    """A run-time cap argument that is missing or does not match; the message names it."""


@dataclass(frozen=True)
class CapOrders:
    """What the TPU run-time cap stops, how, and when: told on its command line by the agent,
    which read and checked this node's settings, so the cap needs no metadata to stop the TPU.
    ``deadline``: seconds since the epoch, the agent's start plus the cap; a cap started again
    later stops at the same time."""

    agent_pid: int
    tpu_name: str
    place: Place
    release: str
    cap_seconds: int
    deadline: int

    def arguments(self) -> list[str]:
        """The agent's command line after the archive: ``cap PID --option VALUE ...``."""
        return [
            "cap",
            str(self.agent_pid),
            *("--tpu-name", self.tpu_name, "--project", self.place.project, "--zone", self.place.zone),
            *("--release", self.release, "--cap-seconds", str(self.cap_seconds), "--deadline", str(self.deadline)),
        ]


def _cap_argument(name: str, value: str | None, pattern: re.Pattern[str], what: str) -> str:
    if value is None:
        raise CapOrdersError(f"{name} is missing: the agent gives {what}")
    if pattern.fullmatch(value) is None:
        raise CapOrdersError(f"{name} {value!r} is not {what}")
    return value


def _cap_number(name: str, value: str | None, low: int, high: int) -> int:
    number = int(_cap_argument(name, value, _CAP_NUMBER, f"a whole number from {low} to {high}"))
    if not low <= number <= high:
        raise CapOrdersError(f"{name} {value!r} is not a whole number from {low} to {high}")
    return number


def read_cap_orders(options: argparse.Namespace) -> CapOrders:
    """The cap's arguments, each matched whole (the cap runs as root); CapOrdersError names
    the first that is missing or refused."""
    place = Place(
        _cap_argument("--project", options.project, PROJECT_ID, "a Google Cloud project id"),
        _cap_argument("--zone", options.zone, ZONE, "a zone name like us-central1-a"),
    )
    release = _cap_argument("--release", options.release, _CAP_RELEASE, "stop or delete")
    return CapOrders(
        agent_pid=_cap_number("agent_pid", options.agent_pid, 2, 2**22),
        tpu_name=_cap_argument("--tpu-name", options.tpu_name, NODE_NAME, "a TPU node name"),
        place=place,
        release=release,
        cap_seconds=_cap_number("--cap-seconds", options.cap_seconds, 1, MAX_RUN_SECONDS),
        deadline=_cap_number("--deadline", options.deadline, 1, 10**12 - 1),
    )


def cap_orders(metadata: Metadata, settings: NodeSettings, started: float, agent_pid: int) -> CapOrders:
    """The cap's orders from this node's checked settings and the agent's start (seconds since
    the epoch); this VM's project and zone come from the metadata server now, at boot."""
    assert settings.tpu_name is not None
    assert settings.max_run_seconds is not None
    return CapOrders(
        agent_pid=agent_pid,
        tpu_name=settings.tpu_name,
        place=Place.of_this_vm(metadata),
        release="delete" if settings.on_finish == "delete" else "stop",
        cap_seconds=settings.max_run_seconds,
        deadline=int(started) + settings.max_run_seconds,
    )


def start_run_time_cap(agent: Agent, settings: NodeSettings, started: float) -> None:
    """The TPU API has no run-time limit for TPU VMs, so the agent keeps one: a watcher that
    outlives it (a job that ends with on_finish=keep still stops at the cap). It stays in the
    boot's process group, so a reboot ends it and the next boot starts a new one. Its orders
    are checked as the cap will check them before it starts (CapOrdersError)."""
    import subprocess

    orders = cap_orders(agent.metadata, settings, started, os.getpid())
    arguments = orders.arguments()
    if parse_cap(arguments) != orders:
        raise CapOrdersError(f"the cap would not read back its orders {arguments}")
    # The archive the boot script ran (python3 -I ARCHIVE), or the package (python -m trainstack_agent).
    entry = [sys.argv[0]] if not sys.argv[0].endswith("__main__.py") else ["-m", "trainstack_agent"]
    subprocess.Popen([sys.executable, *entry, *arguments], stdin=subprocess.DEVNULL)
    when = datetime.fromtimestamp(orders.deadline, timezone.utc).isoformat()
    agent.log(f"run-time cap of {orders.cap_seconds} s: TPU node {orders.tpu_name} stops at {when}")


def end_agent(agent: Agent, agent_pid: int, clock: Clock) -> None:
    """Ends the agent as a termination would (the job stays resumable): SIGTERM, then up to
    CAP_GRACE_SECONDS for it to record and end its work."""
    try:
        os.kill(agent_pid, signal.SIGTERM)
        deadline = clock.monotonic() + CAP_GRACE_SECONDS
        while clock.monotonic() < deadline:
            os.kill(agent_pid, 0)
            clock.sleep(0.5)
    except ProcessLookupError:
        pass
    except OSError as error:
        agent.log(f"run-time cap: cannot end the agent ({error})")


def record_cap(agent: Agent) -> None:
    """FAILED (exit 124) for the node and the job, unless the job SUCCEEDED; this node's
    settings are read once for where. A job status that cannot be read (too large, refused) is
    no success; when the metadata server or Cloud Storage gives up, nothing is written: the
    stop comes first."""
    try:
        settings = read_settings(agent.metadata)
    except Exception as error:  # noqa: BLE001 - whatever fails, the cap still stops the machine
        agent.log(f"run-time cap: cannot read this node's settings ({error}); nothing recorded")
        return
    # A standing TPU VM's queued job, when one runs: the cap ends that one.
    job_dir = running_job_dir(agent.host.state_dir, settings.bucket) if settings.idle_seconds is not None else None
    if job_dir is None and settings.job is not None:
        job_dir = settings.job.job_dir
    if job_dir is None:
        return
    board = Board(agent.storage, job_dir, settings.node, new_incarnation())
    try:
        job = board.job()
    except Unavailable as error:
        agent.log(f"run-time cap: Cloud Storage gave up ({error}); nothing recorded")
        return
    except Exception as error:  # noqa: BLE001 - whatever fails, the cap still stops the machine
        agent.log(f"run-time cap: cannot read {board.job_uri} ({error}); recording FAILED")
        job = None
    if job is not None and job.state == JobState.SUCCEEDED:
        return
    try:
        board.write_node(JobState.FAILED, 124, "run-time cap reached")
        board.write_job(JobState.FAILED, 124, "run-time cap reached")
    except Exception as error:  # noqa: BLE001 - whatever fails, the cap still stops the machine
        agent.log(f"could not record FAILED: {error}")


def bounded(agent: Agent, action: Callable[[], None], seconds: float, what: str) -> None:
    """Runs ``action`` for at most ``seconds`` (real time), then goes on without it."""
    import threading

    worker = threading.Thread(target=action, daemon=True)
    worker.start()
    worker.join(timeout=seconds)
    if worker.is_alive():
        agent.log(f"run-time cap: {what} took over {seconds:g} s; going on without it")


def run_cap(agent: Agent, orders: CapOrders, clock: CapClock | None = None) -> int:
    """At the deadline: end the agent, record FAILED unless the job SUCCEEDED (best effort,
    within CAP_RECORD_SECONDS), and stop the TPU (delete it with on_finish: delete). When and
    what to stop are the orders': no metadata server outage delays or hastens the stop."""
    clock = clock or CapSystemClock()
    while (left := orders.deadline - clock.utc().timestamp()) > 0:
        clock.sleep(min(left, CAP_CHECK_SECONDS))
    agent.log(f"run-time cap of {orders.cap_seconds} s reached: stopping this machine")
    end_agent(agent, orders.agent_pid, clock)
    bounded(agent, lambda: record_cap(agent), CAP_RECORD_SECONDS, "recording FAILED")
    agent.release(TPU_NODE_KIND, TPU_NODE, orders.tpu_name, orders.place)(orders.release)
    return 0


def refused_cap(agent: Agent, error: CapOrdersError) -> int:
    """A cap that cannot tell when or what to stop must not leave the TPU billing: it stops
    the machine now, as a boot that cannot read its settings does."""
    agent.log(f"run-time cap: {error}")
    return abort(agent, "the run-time cap refused its arguments")


def spot_recovery(agent: Agent, settings: NodeSettings, board: Board, timings: Timings) -> SpotRecovery | None:
    """The chief's recovery of its Spot peers (None: it has none to recover). Each Compute Engine
    call is tried once, for at most ``RECOVERY_CALL_SECONDS``: the next look is the retry, and
    the chief's heartbeat waits for a look."""
    if not settings.recover:
        return None
    one_try = Http(timeout=RECOVERY_CALL_SECONDS, retry=NO_RETRY)
    compute = ComputeApi(one_try, agent.metadata, agent.endpoints.compute, Place.of_this_vm(agent.metadata))
    return SpotRecovery(
        settings.recover,
        settings.max_restarts,
        compute,
        board,
        time.monotonic,
        agent.log,
        timings.start_backoff,
        unreadable_bound=settings.peer_timeout_seconds,
        budget=timings.recover_look_budget,
    )


def job_node(
    agent: Agent,
    settings: NodeSettings,
    incarnation: str,
    processes: Processes,
    timings: Timings,
    cancelled: Callable[[], str | None] | None = None,
    release_at_end: bool = True,
    launcher: Launcher | None = None,
    run_end: RunEnd | None = None,
) -> NodeAgent:
    """One job's life on this node (``settings.job``; None: a node without a job), with its
    own status objects, environment, secrets and Spot recovery."""
    host, log = agent.host, agent.log
    job_dir = settings.job.job_dir if settings.job else LAYOUT.job_dir(settings.bucket, NO_JOB)
    board = Board(agent.storage, job_dir, settings.node, incarnation)
    environment = job_environment(agent, settings, processes)
    recovery = spot_recovery(agent, settings, board, timings)
    job = settings.job
    services = Services(
        board=board,
        launcher=launcher or JobLauncher(processes),
        prepare=environment.prepare_for_job_user,
        ready=lambda: boot_ready(agent, settings, environment),
        secrets=lambda: read_secrets(
            job.secrets if job else (),
            from_environment=agent.environment if host.secrets_from_environment else None,
            http=agent.http,
            metadata=agent.metadata,
            root=agent.endpoints.secrets,
        ),
        release=agent.release(settings.kind, settings.node, settings.tpu_name),
        preempted=agent.metadata.preempted,
        recovery=recovery,
        clock=SystemClock(),
        log=log,
        environment=dict(agent.environment),
        timings=timings,
        cancelled=cancelled,
        run_end=run_end,
        credentials=lambda user: own_credentials(agent, settings, user),
    )
    return NodeAgent(settings, services, datetime.now(timezone.utc), release_at_end=release_at_end)


def own_credentials(
    agent: Agent, settings: NodeSettings, user: JobUser | None
) -> contextlib.AbstractContextManager[dict[str, str]]:
    """The job's own token while its code runs: its directory and the places the stack decided
    it reads and writes (job.buckets), for its user alone (trainstack_agent.jobtoken)."""
    job = settings.job
    assert job is not None
    access = JobAccess(job.job_dir, job.reads, job.writes)
    return job_credentials(
        access,
        user.uid if user is not None else None,
        agent.http,
        agent.metadata,
        (agent.endpoints.metadata, agent.endpoints.sts),
        agent.log,
    )


def job_environment(agent: Agent, settings: NodeSettings, processes: Processes) -> Environment:
    host = agent.host
    return Environment(
        settings,
        host.state_dir,
        agent.storage,
        processes,
        agent.log,
        host.skip_registry_login,
        host.pip_find_links,
        host.job_as_agent_user,
    )


def job_queue(
    agent: Agent,
    settings: NodeSettings,
    incarnation: str,
    processes: Processes,
    timings: Timings,
    time_scale: float,
    run_end: RunEnd | None = None,
) -> JobQueue:
    """A standing node's boot: its own job, then the queue (``trainstack_agent.jobqueue``),
    the built-in trainer's jobs started in a warm interpreter where they can be."""
    warm = WarmStarts(JobLauncher(processes), agent.log)
    services = QueueServices(
        storage=agent.storage,
        board=lambda job_dir: Board(agent.storage, job_dir, settings.node, incarnation),
        new_job=lambda job_settings, cancelled: job_node(
            agent,
            job_settings,
            incarnation,
            processes,
            timings,
            cancelled,
            release_at_end=False,
            launcher=warm.for_job(job_settings.job is not None and job_settings.job.warm_start),
            run_end=run_end,
        ),
        between_jobs=lambda ended: warm.prepare_next(ended.job is not None and ended.job.warm_start),
        before_release=warm.discard,
        ready=lambda: boot_ready(agent, settings, job_environment(agent, settings, processes)),
        release=agent.release(settings.kind, settings.node, settings.tpu_name),
        clock=SystemClock(),
        log=agent.log,
        state_dir=agent.host.state_dir,
        timings=timings,
        time_scale=time_scale,
        run_end=run_end,
    )
    return JobQueue(settings, services)


def run_node(agent: Agent) -> int:
    started = time.time()
    try:
        settings = read_settings(agent.metadata)
        time_scale = parse_time_scale(agent.environment.get(TIME_SCALE_VARIABLE))
    except (SettingsError, CloudError, TimeScaleError) as error:
        return abort(agent, str(error))
    try:
        return boot_node(agent, settings, time_scale, started)
    except Exception as error:  # noqa: BLE001 - a node must never idle and bill, whatever failed
        # Outside a job's own guard (NodeAgent.run): the boot lock, a full disk, a metadata
        # outage past its retries between queued jobs. The boot script exec'd this process, so
        # nothing after it would record the failure or stop the machine.
        return abort(agent, f"the node agent failed: {type(error).__name__}: {str(error)[:300]}")


def boot_node(agent: Agent, settings: NodeSettings, time_scale: float, started: float) -> int:
    """This boot's work once its settings are read: the run-time cap where there is one, the
    boot lock, then the node's job or its queue until they end."""
    host, log = agent.host, agent.log
    timings = Timings().scaled(time_scale)
    if settings.kind == TPU_NODE_KIND:
        try:
            start_run_time_cap(agent, settings, started)
        except (OSError, CloudError, CapOrdersError) as error:
            # The TPU VM's only run-time cap: without it the node must not run at all.
            return abort(agent, f"cannot start the run-time cap: {error}")
    lock = take_boot_lock(host.state_dir)
    if lock is None:
        log(f"another boot of this node holds {host.state_dir / 'boot.lock'}; leaving the job to it")
        return 0
    # One incarnation per boot: every job this boot runs names it in its status objects.
    incarnation = new_incarnation()
    processes = Processes(log, keep_fds=(lock,), stop_grace=timings.stop_grace)
    # A flex-start node ends its work before Compute Engine deletes the machine; the margin
    # scales with the other waits, the run itself does not.
    ends = flex_start_end(settings, host.state_dir, time.time(), time.monotonic(), timings.run_end_margin)
    if ends is not None:
        log(f"flex-start: this node ends its work {timings.run_end_margin:g} s before its run ends")
    node: NodeAgent | JobQueue
    if settings.idle_seconds is None:
        node = job_node(agent, settings, incarnation, processes, timings, run_end=ends)
    else:
        node = job_queue(agent, settings, incarnation, processes, timings, time_scale, run_end=ends)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        for each in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(each, signal.SIG_IGN)
        raise SystemExit(node.on_termination(signal.Signals(signum).name))

    for each in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(each, on_signal)
    if settings.job is not None:
        log(f"node {settings.node} starting; job dir {settings.job.job_dir}")
    if settings.idle_seconds is not None:
        log(f"node {settings.node} runs the job queue; on_finish after {settings.idle_seconds} s with none to run")
    if time_scale != 1:
        log(f"{TIME_SCALE_VARIABLE}={time_scale:g}: every wait of this agent is that share of Compute Engine's")
    return node.run()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainstack-agent", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command")
    cap = commands.add_parser("cap", help="a TPU VM's run-time cap (the agent starts it)")
    cap.add_argument("agent_pid")
    for option, what in (
        ("--tpu-name", "the TPU node to stop"),
        ("--project", "its project"),
        ("--zone", "its zone"),
        ("--release", "stop, or delete (on_finish: delete)"),
        ("--cap-seconds", "the run-time cap"),
        ("--deadline", "when to stop it: seconds since the epoch"),
    ):
        cap.add_argument(option, help=what)
    return parser


def parse_cap(arguments: Sequence[str]) -> CapOrders:
    """``cap PID --option VALUE ...`` read into the cap's orders (CapOrdersError)."""
    return read_cap_orders(parser().parse_args(arguments))


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    agent = Agent(os.environ)
    try:
        if options.command == "cap":
            try:
                orders = read_cap_orders(options)
            except CapOrdersError as error:
                return refused_cap(agent, error)
            return run_cap(agent, orders)
        return run_node(agent)
    finally:
        agent.log.close()
