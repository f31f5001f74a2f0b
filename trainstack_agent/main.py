"""The agent's entry point, run by every node's boot script once its digest checks out.

    python3 trainstack-agent-<digest>.pyz            the node's work (one boot)
    python3 trainstack-agent-<digest>.pyz cap PID    a TPU VM's run-time cap (started by the above)

Exit status: the job's code's on a finished job (0 when it succeeded), 143 when a signal or
a duty ended the work, 1 when the node could not read its settings (it then records FAILED
where it can and stops the machine).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError, Http
from trainstack_agent.compute import ComputeApi, Place
from trainstack_agent.endpoints import Endpoints, Host, from_environment
from trainstack_agent.environment import Environment
from trainstack_agent.gcs import Storage
from trainstack_agent.metadata import Metadata
from trainstack_agent.node import NodeAgent, Services, SystemClock
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.recovery import SpotRecovery
from trainstack_agent.release import Release
from trainstack_agent.secrets import read_secrets
from trainstack_agent.settings import KEYS, NodeSettings, SettingsError, known_identity, read_settings
from trainstack_agent.timings import TIME_SCALE_VARIABLE, TimeScaleError, Timings, parse_time_scale
from trainstack_contract import CLUSTER_NODE_KIND, LAYOUT, NO_JOB, STATES, TPU_NODE_KIND

EXIT_ABORTED = 1
# After the TPU run-time cap's SIGTERM, how long the agent gets to record and end its work.
CAP_GRACE_SECONDS = 30.0


class Agent:
    """The pieces every command of the agent shares: log, HTTP, metadata, storage, release."""

    def __init__(self, environment: Mapping[str, str]) -> None:
        self.environment = environment
        self.endpoints: Endpoints
        self.host: Host
        self.endpoints, self.host = from_environment(environment)
        self.log = Log()
        self.http = Http()
        self.metadata = Metadata(self.http, self.endpoints.metadata)
        self.storage = Storage(self.http, self.metadata, self.endpoints.storage)

    def release(self, kind: str, node: str, tpu_name: str | None) -> Release:
        return Release(
            kind, node, tpu_name, self.metadata, self.http, self.endpoints, self.log, self.host.self_stop_log
        )


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
            Board(agent.storage, job_dir, node, new_incarnation()).write_node(STATES.failed, 1, reason)
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
    environment.python_environment()
    where = ""
    if settings.tf_config is not None:
        state_file = agent.host.state_dir / "tf_config.json"
        state_file.write_text(settings.tf_config + "\n")
        if agent.host.profile_dir.is_dir():
            profile = agent.host.profile_dir / "trainstack-tf-config.sh"
            profile.write_text(f"export TF_CONFIG={shlex.quote(settings.tf_config)}\n")
        where = f", TF_CONFIG in {state_file}"
    agent.log(f"node {settings.node} ready: no job to run; python environment {environment.venv}{where}")


def start_run_time_cap(agent: Agent) -> None:
    """The TPU API has no run-time limit for TPU VMs, so the agent keeps one: a watcher that
    outlives it (a job that ends with on_finish=keep still stops at the cap). It stays in the
    boot's process group, so a reboot ends it and the next boot starts a new one."""
    import subprocess

    # The archive the boot script ran (python3 -I ARCHIVE), or the package (python -m trainstack_agent).
    entry = [sys.argv[0]] if not sys.argv[0].endswith("__main__.py") else ["-m", "trainstack_agent"]
    subprocess.Popen([sys.executable, *entry, "cap", str(os.getpid())], stdin=subprocess.DEVNULL)


def run_cap(agent: Agent, agent_pid: int) -> int:
    """At the cap: end the agent as a termination would (the job stays resumable), record
    FAILED unless the job SUCCEEDED, and stop the machine (delete it with on_finish: delete)."""
    try:
        settings = read_settings(agent.metadata)
    except (SettingsError, CloudError) as error:
        agent.log(f"run-time cap: cannot read this node's settings ({error})")
        return EXIT_ABORTED
    assert settings.max_run_seconds is not None
    time.sleep(settings.max_run_seconds)
    agent.log(f"run-time cap of {settings.max_run_seconds} s reached: stopping this machine")
    try:
        os.kill(agent_pid, signal.SIGTERM)
        deadline = time.monotonic() + CAP_GRACE_SECONDS
        while time.monotonic() < deadline:
            os.kill(agent_pid, 0)
            time.sleep(0.5)
    except ProcessLookupError:
        pass
    if settings.job is not None:
        board = Board(agent.storage, settings.job.job_dir, settings.node, new_incarnation())
        job = board.job()
        if job is None or job.state != STATES.succeeded:
            try:
                board.write_node(STATES.failed, 124, "run-time cap reached")
                board.write_job(STATES.failed, 124, "run-time cap reached")
            except CloudError as error:
                agent.log(f"could not record FAILED: {error}")
    agent.release(settings.kind, settings.node, settings.tpu_name)(
        "delete" if settings.on_finish == "delete" else "stop"
    )
    return 0


def run_node(agent: Agent) -> int:
    try:
        settings = read_settings(agent.metadata)
        time_scale = parse_time_scale(agent.environment.get(TIME_SCALE_VARIABLE))
    except (SettingsError, CloudError, TimeScaleError) as error:
        return abort(agent, str(error))
    host, log = agent.host, agent.log
    timings = Timings().scaled(time_scale)
    if settings.kind == TPU_NODE_KIND:
        start_run_time_cap(agent)
    lock = take_boot_lock(host.state_dir)
    if lock is None:
        log(f"another boot of this node holds {host.state_dir / 'boot.lock'}; leaving the job to it")
        return 0
    incarnation = new_incarnation()
    started_at = datetime.now(timezone.utc)
    job_dir = settings.job.job_dir if settings.job else LAYOUT.job_dir(settings.bucket, NO_JOB)
    board = Board(agent.storage, job_dir, settings.node, incarnation)
    processes = Processes(log, keep_fds=(lock,), stop_grace=timings.stop_grace)
    launcher = JobLauncher(processes)
    environment = Environment(
        settings, host.state_dir, agent.storage, processes, log, host.skip_registry_login, host.pip_find_links
    )
    recovery = None
    if settings.recover:
        compute = ComputeApi(agent.http, agent.metadata, agent.endpoints.compute, Place.of_this_vm(agent.metadata))
        recovery = SpotRecovery(
            settings.recover,
            settings.max_restarts,
            compute,
            board,
            time.monotonic,
            log,
            timings.start_backoff,
            unreadable_bound=settings.peer_timeout_seconds,
        )
    job = settings.job
    services = Services(
        board=board,
        launcher=launcher,
        prepare=environment.prepare,
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
    )
    node = NodeAgent(settings, services, started_at)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        for each in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(each, signal.SIG_IGN)
        raise SystemExit(node.on_termination(signal.Signals(signum).name))

    for each in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(each, on_signal)
    if job is not None:
        log(f"node {settings.node} starting; job dir {job_dir}")
    if time_scale != 1:
        log(f"{TIME_SCALE_VARIABLE}={time_scale:g}: every wait of this agent is that share of Compute Engine's")
    return node.run()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainstack-agent", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command")
    cap = commands.add_parser("cap", help="a TPU VM's run-time cap (the agent starts it)")
    cap.add_argument("agent_pid", type=int)
    options = parser.parse_args(argv)
    agent = Agent(os.environ)
    try:
        if options.command == "cap":
            return run_cap(agent, options.agent_pid)
        return run_node(agent)
    finally:
        agent.log.close()
