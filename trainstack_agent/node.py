"""One boot of a node: prepare, wait for the cluster, train, recover from lost peers, finish.

What a node does, in order (:class:`NodeAgent`):

1. A job that already SUCCEEDED is not trained again; on_finish is applied.
2. The node records RUNNING, then prepares the job (environment, verified code or image).
3. It waits until no peer is down (PREEMPTED or INTERRUPTED, not booted again yet;
   :mod:`trainstack_agent.peers`).
4. It runs the job's code (:mod:`trainstack_agent.training`). Meanwhile, every tick
   (:mod:`trainstack_agent.duties`), the chief refreshes its heartbeat in the job's status and
   starts preempted Spot peers again; every other node watches that heartbeat and ends its
   work when the chief recorded FAILED or fell silent.
5. When the job's code exits non-zero, the node looks at its peers: if one is down or has
   rebooted since the code started, the exit is the peer's loss, whatever its code, and the
   node starts the code again once the cluster is whole (it resumes from its backup), at
   most :func:`~trainstack_agent.training.restart_limit` times. Otherwise the job failed.
6. It records SUCCEEDED or FAILED (the chief also for the job) and applies on_finish
   (:mod:`trainstack_agent.jobend`).

A termination signal (a guest shutdown, a reboot, host maintenance, a Spot preemption) is not
the job's end: the node records PREEMPTED or INTERRUPTED, ends its children and exits 143,
without on_finish; its next boot resumes. Anything unexpected records FAILED and applies
on_finish: a node must never idle and bill.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from trainstack_agent import job_record
from trainstack_agent.artifacts import DigestMismatch
from trainstack_agent.duties import Duties, supervised_preparation
from trainstack_agent.hypertune import JobMetrics, MetricCopy
from trainstack_agent.jobend import JobEnd
from trainstack_agent.jobuser import take_back_tree
from trainstack_agent.outcome import Ended, Outcome, ended_outcome
from trainstack_agent.peers import PeerWatch
from trainstack_agent.services import Services
from trainstack_agent.settings import NodeSettings
from trainstack_agent.training import CodeRun, Training
from trainstack_contract import LAYOUT
from trainstack_contract.lifecycle import ENDED_JOB_STATES, JobState


class NodeAgent:
    """One job's life on this node. ``release_at_end``: apply on_finish when the job ends (a
    node without a queue); a queued job leaves that to the queue (:mod:`trainstack_agent.jobqueue`),
    except when the node refused what it was given to run."""

    def __init__(
        self, settings: NodeSettings, services: Services, started_at: datetime, release_at_end: bool = True
    ) -> None:
        self.settings = settings
        self.release_at_end = release_at_end
        # How the job ended in this boot (None: it did not, or was not run).
        self.outcome: Outcome | None = None
        self.services = services
        self.started_at = started_at
        self.log = services.log
        self.board = services.board
        self.duties = Duties(settings, services, started_at)
        # The job's cloudml-hypertune report and its copy in the job directory, once prepared.
        self.metrics = JobMetrics(services.log)
        peers = PeerWatch(self.duties, started_at)
        self.training = Training(peers, CodeRun(self.duties, peers, self.metrics))
        self.end = JobEnd(settings, services, self.metrics, release_at_end)
        self._terminating = False
        # Whether this boot recorded the job RUNNING, and whether it has recorded its end: a
        # termination signal after the end (the shutdown on_finish asked for) records nothing.
        self._running = False
        self._finished = False

    def run(self) -> int:
        settings = self.settings
        if settings.job is None:
            self.services.ready()
            return 0
        try:
            job = self.board.job()
        except Exception as error:  # noqa: BLE001 - a node must record and release, whatever failed
            # An oversize or unreadable status/job.json, or Cloud Storage giving up: the node
            # cannot tell whether the job already ended, so it fails and releases its machine
            # rather than idle (and bill) until the run-time cap.
            return self.finish(Outcome(1, f"cannot read the job's status {self.board.job_uri}: {str(error)[:300]}"))
        if job is not None and job.state == JobState.SUCCEEDED:
            self.log(f"job already SUCCEEDED ({self.board.job_uri}); not training again")
            if self.release_at_end:
                self.end.apply_on_finish()
            return 0
        try:
            self.board.write_node(JobState.RUNNING)
            self._running = True
            outcome = self.run_job()
        except Exception as error:  # a node must record and release, whatever failed
            if self._terminating:
                raise
            outcome = Outcome(1, f"the node agent failed: {type(error).__name__}: {str(error)[:300]}")
        return self.finish(outcome)

    def run_job(self) -> Outcome:
        job = self.settings.job
        assert job is not None
        if self.settings.is_chief:
            try:
                job_record.check_or_record(self.board.storage, job)
            except job_record.SettingsChanged as changed:
                return Outcome(1, str(changed)[:1200], refused=True)
        try:
            # A duty may end the work before anything starts (a flex-start run already over).
            self.duties.tick()
            prepared = supervised_preparation(self.duties)
        except Ended as ended:
            return ended_outcome(ended)
        except DigestMismatch as error:
            return Outcome(1, str(error)[:400], refused=True)
        except Exception as error:  # noqa: BLE001 - the reason names what failed
            return Outcome(1, f"preparing the job failed: {str(error)[:300]}")
        if prepared.metric_file is not None:
            uri = f"{job.job_dir}/{LAYOUT.hypertune_metrics(self.settings.node)}"
            self.metrics.follow(MetricCopy(prepared.metric_file, prepared.user, self.board.storage, uri, self.log))
        return self.training.train(prepared)

    def finish(self, outcome: Outcome) -> int:
        self._finished = True
        self.outcome = outcome
        code = self.end.finished(outcome)
        job = self.settings.job
        if job is not None and not job.job_dir.startswith("gs://") and self._last_to_end():
            # Once the job's code has ended on every node, a local job directory is no longer
            # its code's to write (a later job's code runs as the same user). Not before: on
            # Google Cloud a node's token lasts until its own job ends, whoever ended first.
            try:
                take_back_tree(Path(job.job_dir))
            except OSError as error:
                self.log(f"could not take the job directory back from the job's user: {error}")
        return code

    def _last_to_end(self) -> bool:
        """Whether every other node has recorded the job's end (or never ran it). Each node
        records its own end before it asks, so the last of them to ask sees every end."""
        for peer in self.settings.other_nodes:
            try:
                document = self.board.peer(peer)
            except Exception:  # noqa: BLE001 - unreadable: the peer may still be writing
                return False
            if document is not None and document.state not in ENDED_JOB_STATES:
                return False
        return True

    def on_termination(self, signal_name: str) -> int:
        """A termination signal: record why, end every child, and leave the job resumable."""
        self._terminating = True
        return self.end.terminated(signal_name, finished=self._finished, running=self._running)
