"""The job's code on this node: one run of it, supervised (:class:`CodeRun`), and its runs until
it ends on its own (:class:`Training`).

When the job's code exits non-zero, the node looks at its peers: if one is down or has rebooted
since the code started, the exit is the peer's loss, whatever its code, and the node starts the
code again once the cluster is whole (it resumes from its backup), at most :func:`restart_limit`
times. Otherwise the job failed.
"""

from __future__ import annotations

import shlex

from trainstack_agent.cloud import CloudError
from trainstack_agent.clusterport import cluster_port_watch
from trainstack_agent.duties import Duties, supervise
from trainstack_agent.environment import Prepared
from trainstack_agent.hypertune import JobMetrics
from trainstack_agent.job import job_command
from trainstack_agent.jobtoken import CredentialError
from trainstack_agent.outcome import Ended, Outcome, ended_outcome
from trainstack_agent.peers import PeerSnapshot, PeerWatch
from trainstack_agent.secrets import SecretError
from trainstack_agent.settings import NodeSettings
from trainstack_contract.lifecycle import JobState


def restart_limit(settings: NodeSettings) -> int:
    """The most times one node starts its job's code again after a lost peer: each
    preemption of a peer costs every node one restart, and the chief ends the job once one
    peer has been preempted more than ``max_restarts`` times; one more for a peer lost
    without being preempted."""
    return settings.max_restarts * max(len(settings.peers) - 1, 0) + 1


class CodeRun:
    """Starts the job's code and watches it, this node's duties ticking, until it exits, a duty
    ends it, or (a synchronous cluster) a peer is lost; meanwhile its report is copied."""

    def __init__(self, duties: Duties, peers: PeerWatch, metrics: JobMetrics) -> None:
        self.duties = duties
        self.peers = peers
        self.metrics = metrics
        self.settings = duties.settings
        self.services = duties.services
        # The starts of the job's code by this boot (the first included).
        self.starts = 0

    def run(self, prepared: Prepared) -> tuple[Outcome, PeerSnapshot]:
        """How the code ended, and the peers' incarnations when it started."""
        services = self.services
        snapshot = self.peers.snapshot()
        secrets = services.secrets()
        self.starts += 1
        services.board.attempt = self.starts
        # The job's own token, served to its user alone while its code runs (trainstack_agent.jobtoken).
        with services.credentials(prepared.user) as credentials:
            return self._run(prepared, snapshot, secrets, credentials)

    def _run(
        self, prepared: Prepared, snapshot: PeerSnapshot, secrets: dict[str, str], credentials: dict[str, str]
    ) -> tuple[Outcome, PeerSnapshot]:
        services = self.services
        command = job_command(
            self.settings,
            services.environment,
            prepared.python,
            prepared.code_dir,
            prepared.state_dir,
            secrets,
            prepared.user,
            prepared.metric_file,
            credentials,
        )
        job = self.settings.job
        assert job is not None
        arguments = f": {shlex.join(job.trainer_args)}" if job.trainer_args else " (no arguments)"
        services.log(f"starting the job ({job.mode}){arguments}")
        clock = services.clock
        # Does the code join the cluster (listen on this node's TF_CONFIG port)? Warned if not.
        watch = cluster_port_watch(self.settings, services.board, services.listening, services.timings, services.log)
        if watch is not None:
            watch.start(clock.monotonic())
        child = services.launcher.start(command)
        started = clock.monotonic()
        broken: list[str] = []
        next_copy = started + services.timings.metric_copy

        def done() -> bool:
            nonlocal next_copy
            if watch is not None:
                watch.look(clock.monotonic())
            if child.poll() is not None:
                return True
            if clock.monotonic() >= next_copy:
                # An intermediate report: a tuning process may stop the trial early on it.
                next_copy = clock.monotonic() + services.timings.metric_copy
                self.metrics.copy()
            lost = self.peers.broken(snapshot, started)
            if lost is not None:
                broken.append(lost)
            return lost is not None

        try:
            supervise(self.duties, done)
        except Ended:
            child.stop()
            raise
        if broken:
            services.log(f"{broken[0]}: ending the job's code, which cannot train without it")
            return Outcome(child.stop(services.timings.peer_down_grace), lost=broken[0]), snapshot
        code = child.poll()
        assert code is not None
        # Exited on its own: what it left running (a daemon in a session of its own) ends with it.
        child.stop(0)
        if watch is not None:
            watch.end(clock.monotonic(), code)
        return Outcome(code), snapshot


def resume_words(settings: NodeSettings) -> str:
    """What a restart resumes from: the built-in trainer keeps a backup in the job directory; a
    team's code only what it saved there itself (trainstack cannot tell)."""
    job = settings.job
    if job is not None and job.builtin:
        return "it resumes from its backup"
    return "the job's code resumes from what it saved in its job directory, if anything (BackupAndRestore)"


class Training:
    """The job's code run until it ends on its own: started again once the cluster is whole
    after a peer was lost, at most :func:`restart_limit` times."""

    def __init__(self, peers: PeerWatch, code: CodeRun) -> None:
        self.peers = peers
        self.code = code

    def train(self, prepared: Prepared) -> Outcome:
        settings, services = self.code.settings, self.code.services
        limit, restarts = restart_limit(settings), 0
        while True:
            try:
                self.peers.wait_until_whole()
                outcome, snapshot = self.code.run(prepared)
            except Ended as ended:
                return ended_outcome(ended)
            except (SecretError, CredentialError) as error:
                # The job's code must not run without a secret it was promised, nor with the
                # node's own credentials open to it.
                return Outcome(1, str(error))
            if (outcome.exit_code == 0 and outcome.lost is None) or outcome.reason is not None:
                return outcome
            try:
                lost = outcome.lost or self.peers.lost(snapshot)
            except Ended as ended:
                return ended_outcome(ended)
            if lost is None:
                return outcome
            if restarts >= limit:
                return Outcome(
                    outcome.exit_code,
                    f"the job's code exited {outcome.exit_code} after {lost}, {restarts} times: "
                    f"the most this node restarts it ({limit})",
                )
            restarts += 1
            services.log(
                f"the job's code exited {outcome.exit_code} after {lost}: restart {restarts} of at most {limit} "
                f"once the cluster is whole; {resume_words(settings)}"
            )
            try:
                services.board.write_node(JobState.RUNNING, reason=f"{lost}; restarting the job's code")
            except CloudError as error:
                services.log(f"could not record the restart: {error}")
