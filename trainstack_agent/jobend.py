"""The end of a job's run on this node (:class:`JobEnd`): how it ended, recorded in its status,
and on_finish applied (:func:`apply_on_finish`); or a termination signal, recorded PREEMPTED or
INTERRUPTED, which leaves the job to the next boot.

A job recorded FAILED or CANCELLED runs nothing more, whatever on_finish keeps: on_finish=keep
keeps the machine, not the job's code. The code's last hypertune report reaches the job
directory before its end does.
"""

from __future__ import annotations

from collections.abc import Callable

from trainstack_agent.hypertune import JobMetrics
from trainstack_agent.outcome import EXIT_ENDED, Outcome
from trainstack_agent.services import Services
from trainstack_agent.settings import NodeSettings
from trainstack_contract.lifecycle import JobState


def apply_on_finish(
    on_finish: str,
    release: Callable[[str], None],
    log: Callable[[str], None],
    refused: bool = False,
    what: str = "job over",
) -> None:
    """stop, delete or keep this machine; one that refused what it was given to run stops."""
    if refused and on_finish == "keep":
        log("this node refused what it was given to run: releasing it whatever on_finish says")
        release("stop")
        return
    if on_finish == "keep":
        log(f"{what}; on_finish=keep: this machine keeps running (and billing)")
        return
    log(f"{what}; on_finish={on_finish}: releasing this machine")
    release(on_finish)


class JobEnd:
    """Records how the job's run on this node ended and releases the machine as on_finish says
    (``release_at_end``: a node without a queue; a queued job leaves that to the queue, except
    when the node refused what it was given to run)."""

    def __init__(self, settings: NodeSettings, services: Services, metrics: JobMetrics, release_at_end: bool) -> None:
        self.settings = settings
        self.services = services
        self.metrics = metrics
        self.release_at_end = release_at_end

    def apply_on_finish(self, refused: bool = False) -> None:
        apply_on_finish(self.settings.on_finish, self.services.release, self.services.log, refused=refused)

    def finished(self, outcome: Outcome) -> int:
        """Records SUCCEEDED, FAILED or CANCELLED (the chief also for the job); the exit status."""
        state = JobState.SUCCEEDED if outcome.exit_code == 0 else JobState.FAILED
        if outcome.cancelled:
            state = JobState.CANCELLED
        reason = f" ({outcome.reason})" if outcome.reason else ""
        self.services.log(f"job step ended with status {outcome.exit_code}: {state}{reason}")
        if state != JobState.SUCCEEDED or outcome.ended_by_chief:
            # A job recorded FAILED or CANCELLED runs nothing more, whatever on_finish keeps: on_finish=keep
            # keeps the machine, not the job's code (which an unexpected error may have left running).
            # Nor does a node that the chief's SUCCEEDED ended (its install may still run).
            try:
                # A standing node's next job still starts its processes.
                self.services.launcher.stop_all(close=self.release_at_end)
            except Exception as error:  # noqa: BLE001 - the end is recorded whatever happens here
                self.services.log(f"could not end the job's processes: {type(error).__name__}: {error}")
        # The code has ended: its last report reaches the job directory before its end does, so
        # a reader that sees SUCCEEDED sees the final metric too.
        self.metrics.copy()
        self.services.board.record(state, outcome.exit_code, outcome.reason, self.settings.is_chief, self.services.log)
        if self.release_at_end or outcome.refused:
            self.apply_on_finish(refused=outcome.refused)
        return outcome.exit_code

    def terminated(self, signal_name: str, finished: bool, running: bool) -> int:
        """A termination signal: record why, end every child, and leave the job resumable.
        ``finished``: the job's end is recorded; ``running``: this boot recorded it RUNNING."""
        log = self.services.log
        if finished:
            # The job's end is recorded; this is the shutdown that ends the machine.
            log(f"received {signal_name} after the job's end was recorded")
            self.services.launcher.stop_all()
            return EXIT_ENDED
        state, why = JobState.INTERRUPTED, "a guest shutdown, reboot or host maintenance"
        if self.services.preempted():
            state, why = JobState.PREEMPTED, "Compute Engine preempted this Spot VM"
        log(
            f"received {signal_name} ({why}): recording {state}; on_finish is not applied, and the next boot resumes the job"
        )
        # The status first: a preempted VM has about 30 s, and its peers look for this state.
        # The chief's also says so of the job (`trainstack status`): resumable, not running.
        self.services.board.record(state, None, signal_name, self.settings.is_chief and running, log)
        self.services.launcher.stop_all()
        # After the status (a preempted VM has about 30 s): the ended code's last report.
        self.metrics.copy()
        return EXIT_ENDED
