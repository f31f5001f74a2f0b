"""The node's boot: its settings read, the run-time cap started where there is one, the boot
lock taken, then the node's job or its queue run until they end. A boot that cannot tell what
to do records FAILED where it can and stops the machine."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

from trainstack_agent.agent import Agent, abort, new_incarnation
from trainstack_agent.board import Board
from trainstack_agent.cap import CapOrdersError, start_run_time_cap
from trainstack_agent.cloud import NO_RETRY, CloudError, Http
from trainstack_agent.compute import ComputeApi, Place
from trainstack_agent.environment import Environment
from trainstack_agent.jobqueue import JobQueue, QueueServices
from trainstack_agent.jobtoken import job_credentials
from trainstack_agent.jobuser import JobUser
from trainstack_agent.node import NodeAgent
from trainstack_agent.processes import JobLauncher, Processes
from trainstack_agent.recovery import CALL_SECONDS as RECOVERY_CALL_SECONDS
from trainstack_agent.recovery import SpotRecovery
from trainstack_agent.runend import RunEnd, flex_start_end
from trainstack_agent.secrets import read_secrets
from trainstack_agent.services import Launcher, Services, SystemClock
from trainstack_agent.settings import (
    NodeSettings,
    SettingsError,
    read_settings,
)
from trainstack_agent.timings import Timings
from trainstack_agent.warm import WarmStarts
from trainstack_contract import LAYOUT, NO_JOB, TPU_NODE_KIND
from trainstack_contract.jobaccess import JobAccess
from trainstack_contract.timescale import TIME_SCALE_VARIABLE, TimeScaleError, parse_time_scale


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
    warm = WarmStarts(JobLauncher(processes), agent.log, keep_apart=settings.gpu_count == 0)
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
