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
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

from trainstack_agent.board import Board
from trainstack_agent.cloud import NO_RETRY, CloudError, Http, Retry, Unavailable
from trainstack_agent.compute import ComputeApi, Place
from trainstack_agent.endpoints import Endpoints, Host, from_environment
from trainstack_agent.environment import Environment
from trainstack_agent.gcs import Storage
from trainstack_agent.metadata import Metadata
from trainstack_agent.node import Clock, NodeAgent, Services, SystemClock
from trainstack_agent.processes import JobLauncher, Log, Processes
from trainstack_agent.recovery import SpotRecovery
from trainstack_agent.release import Release
from trainstack_agent.secrets import read_secrets
from trainstack_agent.settings import (
    KEYS,
    NodeSettings,
    SettingsError,
    known_identity,
    known_tpu_name,
    read_settings,
)
from trainstack_agent.timings import TIME_SCALE_VARIABLE, TimeScaleError, Timings, parse_time_scale
from trainstack_contract import CLUSTER_NODE_KIND, LAYOUT, NO_JOB, STATES, TPU_NODE, TPU_NODE_KIND

EXIT_ABORTED = 1
# After the TPU run-time cap's SIGTERM, how long the agent gets to record and end its work.
CAP_GRACE_SECONDS = 30.0
# The cap asks for its settings again after 5, 10, 20, 40, 80, 120 and 120 s (about 6.5
# minutes, each round retrying every key) before it takes the cap as reached.
CAP_SETTINGS_ROUNDS = Retry(attempts=8, first_delay=5.0, max_delay=120.0)


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

    def release(self, kind: str, node: str, tpu_name: str | None) -> Release:
        release = Release(
            kind, node, tpu_name, self.metadata, self.http, self.endpoints, self.log, self.host.self_stop_log
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


def cap_settings(agent: Agent, clock: Clock, rounds: Retry = CAP_SETTINGS_ROUNDS) -> NodeSettings | None:
    """This node's settings for the cap, asked for again while the metadata server does not
    answer (each round already retries every key); None when they cannot be learned."""
    delays = rounds.delays()
    for attempt in range(rounds.attempts):
        try:
            return read_settings(agent.metadata)
        except SettingsError as error:
            agent.log(f"run-time cap: this node's settings are refused ({error})")
            return None
        except Exception as error:  # noqa: BLE001 - whatever fails, the cap still stops the machine
            agent.log(f"run-time cap: cannot read this node's settings ({error})")
        if attempt < len(delays):
            clock.sleep(delays[attempt])
    return None


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


def record_cap(agent: Agent, settings: NodeSettings) -> None:
    """FAILED (exit 124) for the node and the job, unless the job SUCCEEDED. A job status that
    cannot be read (too large, refused) is no success; when Cloud Storage gives up, nothing is
    written: the stop comes first."""
    if settings.job is None:
        return
    board = Board(agent.storage, settings.job.job_dir, settings.node, new_incarnation())
    try:
        job = board.job()
    except Unavailable as error:
        agent.log(f"run-time cap: Cloud Storage gave up ({error}); nothing recorded")
        return
    except Exception as error:  # noqa: BLE001 - whatever fails, the cap still stops the machine
        agent.log(f"run-time cap: cannot read {board.job_uri} ({error}); recording FAILED")
        job = None
    if job is not None and job.state == STATES.succeeded:
        return
    try:
        board.write_node(STATES.failed, 124, "run-time cap reached")
        board.write_job(STATES.failed, 124, "run-time cap reached")
    except Exception as error:  # noqa: BLE001 - whatever fails, the cap still stops the machine
        agent.log(f"could not record FAILED: {error}")


def run_cap(agent: Agent, agent_pid: int, clock: Clock | None = None) -> int:
    """At the cap: end the agent, record FAILED unless the job SUCCEEDED, and stop the machine
    (delete it with on_finish: delete). Whatever it cannot read, it stops the machine: a cap it
    cannot learn (no answer from the metadata server in every round, or a refused value) is
    reached at once, since a node that cannot tell when to stop must not bill on."""
    clock = clock or SystemClock()
    started = clock.monotonic()
    settings = cap_settings(agent, clock)
    if settings is None or settings.max_run_seconds is None:
        agent.log("run-time cap: the cap cannot be learned; stopping this machine now")
    else:
        clock.sleep(max(0.0, started + settings.max_run_seconds - clock.monotonic()))
        agent.log(f"run-time cap of {settings.max_run_seconds} s reached: stopping this machine")
    end_agent(agent, agent_pid, clock)
    if settings is None:
        settings = cap_settings(agent, clock, NO_RETRY)
    if settings is not None:
        record_cap(agent, settings)
        kind, node, tpu_name, on_finish = settings.kind, settings.node, settings.tpu_name, settings.on_finish
    else:
        kind, node, tpu_name, on_finish = TPU_NODE_KIND, TPU_NODE, known_tpu_name(agent.metadata), "stop"
    agent.release(kind, node, tpu_name)("delete" if on_finish == "delete" else "stop")
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
        try:
            start_run_time_cap(agent)
        except OSError as error:
            # The TPU VM's only run-time cap: without it the node must not run at all.
            return abort(agent, f"cannot start the run-time cap: {error}")
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
        settings,
        host.state_dir,
        agent.storage,
        processes,
        log,
        host.skip_registry_login,
        host.pip_find_links,
        host.job_as_agent_user,
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
