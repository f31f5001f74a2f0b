"""A TPU VM's run-time cap: the TPU API has no run-time limit for TPU VMs, so the node's agent
starts this watcher (``trainstack-agent cap PID ...``), which outlives it and, at the deadline,
ends the agent, records FAILED unless the job succeeded, and stops or deletes the TPU."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, Protocol

from trainstack_agent.agent import Agent, abort, new_incarnation
from trainstack_agent.board import Board
from trainstack_agent.cloud import Unavailable
from trainstack_agent.compute import Place
from trainstack_agent.jobqueue import running_job_dir
from trainstack_agent.metadata import Metadata
from trainstack_agent.services import Clock, SystemClock
from trainstack_agent.settings import (
    NodeSettings,
    read_settings,
)
from trainstack_contract import TPU_NODE, TPU_NODE_KIND
from trainstack_contract.lifecycle import JobState
from trainstack_contract.metadata import MAX_RUN_SECONDS
from trainstack_contract.names import NODE_NAME, PROJECT_ID

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


def add_cap_command(commands: Any) -> None:
    """The ``cap`` command of the agent's command line (``commands``: argparse's subparsers)."""
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


def parse_cap(arguments: Sequence[str]) -> CapOrders:
    """``cap PID --option VALUE ...`` read into the cap's orders (CapOrdersError)."""
    parser = argparse.ArgumentParser()
    add_cap_command(parser.add_subparsers(dest="command"))
    return read_cap_orders(parser.parse_args(arguments))
