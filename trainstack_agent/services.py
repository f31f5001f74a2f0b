"""What a node's life needs from the world (:class:`Services`); the tests pass stand-ins."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from trainstack_agent.board import Board
from trainstack_agent.clusterport import port_listening
from trainstack_agent.environment import Prepared
from trainstack_agent.job import JobCommand
from trainstack_agent.jobuser import JobUser
from trainstack_agent.recovery import SpotRecovery
from trainstack_agent.runend import RunEnd
from trainstack_agent.timings import Timings


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class RunningChild(Protocol):
    def poll(self) -> int | None: ...

    def stop(self, grace: float | None = ...) -> int: ...


class Launcher(Protocol):
    def start(self, command: JobCommand) -> RunningChild: ...

    def stop_all(self, close: bool = True) -> None:
        """Ends every child; ``close``: none starts after this (the agent is ending)."""
        ...


@contextlib.contextmanager
def no_credentials(user: JobUser | None) -> Iterator[dict[str, str]]:
    """A job that gets no cloud credentials of its own (the tests' stand-in)."""
    yield {}


# While its block runs, the job's own credentials are served to its user; it yields the
# variables that point the job's code at them (trainstack_agent.jobtoken.job_credentials).
Credentials = Callable[[JobUser | None], contextlib.AbstractContextManager[dict[str, str]]]


@dataclass
class Services:
    """What a node's life needs from the world; the tests pass stand-ins."""

    board: Board
    launcher: Launcher
    # The job's preparation (environment, code or image), and a node's without a job.
    prepare: Callable[[], Prepared]
    ready: Callable[[], None]
    secrets: Callable[[], dict[str, str]]
    release: Callable[[str], None]
    preempted: Callable[[], bool]
    recovery: SpotRecovery | None
    clock: Clock
    log: Callable[[str], None]
    # The environment the job's code starts from.
    environment: Mapping[str, str]
    timings: Timings = field(default_factory=Timings)
    # Whether anything on this node listens on a TCP port (None: cannot tell).
    listening: Callable[[int], bool | None] = port_listening
    # A queued job's: why it was cancelled (`trainstack cancel`), or None; asked every peer_poll.
    cancelled: Callable[[], str | None] | None = None
    # A flex-start node's: when its work ends, before Compute Engine deletes the machine.
    run_end: RunEnd | None = None
    credentials: Credentials = no_credentials
