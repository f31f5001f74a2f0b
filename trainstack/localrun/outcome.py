"""What a local run ends with: each node's status and exit, the calls and preemptions it
saw, the report `trainstack local` prints and its exit code."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import trainstack_contract as contract
from trainstack_contract.lifecycle import JobState


@dataclass
class LocalStackRunResult:
    job_status: dict[str, Any] | None
    node_status: dict[str, dict[str, Any] | None]
    exit_codes: dict[str, int | None]
    self_stops: list[str]
    # A local path with the default stand-in bucket; a gs:// URI with a GcsBucket.
    job_dir: Path | str
    logs: dict[str, list[str]]
    # False for a cluster without a job: its nodes boot ready and start nothing.
    has_job: bool = True
    # The Compute Engine API calls the nodes made ("POST multiworker-worker-0/start"), and
    # the preemptions `--preempt` caused: (node, time.time() of the preemption notice).
    compute_calls: list[str] = field(default_factory=list)
    preemptions: list[tuple[str, float]] = field(default_factory=list)

    @property
    def start_calls(self) -> list[str]:
        return [call for call in self.compute_calls if call.startswith("POST ") and call.endswith("/start")]

    @property
    def found_finished(self) -> bool:
        """The chief's boot found the job SUCCEEDED already (an earlier run in this work directory)."""
        return any("job already SUCCEEDED" in line for line in self.logs.get(contract.CHIEF, []))

    @property
    def ready(self) -> bool:
        """A cluster without a job: every node's boot script ended well."""
        return not self.has_job and all(code == 0 for code in self.exit_codes.values())

    @property
    def succeeded(self) -> bool:
        return self.job_status is not None and self.job_status.get("state") == JobState.SUCCEEDED


class LocalStackRunInterrupted(Exception):
    """The run was stopped by SIGINT (Ctrl-C), SIGTERM or SIGHUP; every node has been stopped."""

    def __init__(self, signal_name: str, result: LocalStackRunResult) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.result = result


def _exit_text(code: int | None) -> str:
    """An exit status for the terminal: a node or job that has not exited has none yet."""
    return "not exited" if code is None else f"exit {code}"


def report(result: LocalStackRunResult, out: Any = None) -> None:
    from trainstack.jobstate.report import history_text, warning_lines

    # Looked up at call time: a default bound at import would miss a redirected sys.stdout.
    out = out or sys.stdout
    if not result.has_job:
        print(f"no job: the nodes booted {'ready' if result.ready else 'with errors'}", file=out)
        for node, code in result.exit_codes.items():
            print(f"  {node:<10} boot script exit {code}", file=out)
        return
    state = (result.job_status or {}).get("state", "UNKNOWN")
    print(f"job {state}", file=out)
    if result.found_finished:
        print(
            "  (it had already succeeded in this work directory, so nothing was trained this time; "
            "add --fresh to train it again from the start)",
            file=out,
        )
    for warning in warning_lines(result.node_status.items()):
        print(warning, file=out)
    for node, status in result.node_status.items():
        if status is None:
            print(f"  {node:<10} no status written ({_exit_text(result.exit_codes[node])})", file=out)
        else:
            print(
                f"  {node:<10} {status['state']:<10} {_exit_text(status['exit_code'])}  at {status['time']}", file=out
            )
            history = history_text(status)
            if history:
                print(f"  {'':<10} history: {history}", file=out)
    for node, _ in result.preemptions:
        print(f"preempted: {node}", file=out)
    if result.preemptions or result.start_calls:
        print(f"start calls recorded: {len(result.start_calls)}", file=out)
        for call in result.start_calls:
            print(f"  {call}", file=out)
    print(f"job directory: {result.job_dir}", file=out)
    for name in (contract.LAYOUT.model_dir, contract.LAYOUT.metrics):
        # A gs:// job directory (a test's GcsBucket) is not looked into.
        path = result.job_dir / name if isinstance(result.job_dir, Path) else None
        if path is not None and path.exists():
            print(f"  {name}: {path}", file=out)
    print(f"self-stop calls recorded: {len(result.self_stops)}", file=out)
    for line in result.self_stops:
        print(f"  {line}", file=out)


class LocalExit(IntEnum):
    """`trainstack local`'s exit codes: one meaning each, whatever code the job's own code
    exits with (the report shows that, node by node)."""

    # The job succeeded (a cluster without a job: every node booted ready).
    SUCCEEDED = 0
    # Nothing ran: the stack has problems (one line each), or this machine lacks what it needs
    # (a Docker engine for an image), or the work directory or the wheels could not be had.
    NOT_RUN = 1
    # The command line: options argparse refuses, or that do not fit the stack.
    USAGE = 2
    # The job ran and did not succeed: its code failed, a node's boot script failed, or --timeout.
    JOB_FAILED = 3
    # Ctrl-C, SIGTERM or SIGHUP: every node was stopped (128 + SIGINT, as a shell reports
    # Ctrl-C; one code for every interruption, since each leaves the job resumable).
    INTERRUPTED = 130


# For `trainstack local --help` and docs/cli.md.
EXIT_CODES_HELP = (
    f"Exit codes: {LocalExit.SUCCEEDED.value} the job succeeded; {LocalExit.NOT_RUN.value} nothing ran (the stack has "
    f"problems, or this machine lacks what it needs); {LocalExit.USAGE.value} the options do not parse or do not fit "
    f"the stack; {LocalExit.JOB_FAILED.value} the job ran and failed (whatever code the job's own code exited with: "
    f"the report shows it); {LocalExit.INTERRUPTED.value} interrupted (Ctrl-C)."
)


def exit_code(result: LocalStackRunResult) -> LocalExit:
    """SUCCEEDED when the job succeeded (or, without a job, every node booted ready); else
    JOB_FAILED, whatever the chief's code exited with (its own 2 is not `local`'s usage error)."""
    return LocalExit.SUCCEEDED if result.succeeded or result.ready else LocalExit.JOB_FAILED
