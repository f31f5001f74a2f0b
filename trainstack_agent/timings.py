"""How long the agent waits between looks, and how long it gives things to settle or end.

The defaults are for Compute Engine: API reads cost quota and latency, and a preempted VM has
about 30 s before it is stopped. ``trainstack local`` runs the same agent against stand-ins
that answer in milliseconds; there ``TRAINSTACK_AGENT_TIME_SCALE`` (a factor from 0.05 to 1)
shortens every one of these waits alike, so that a rehearsal or a test of a preemption does not
sit idle for what a real VM's API needs. On a VM nothing sets it: the factor is 1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Timings:
    """Seconds; every one of them scales with :meth:`scaled`."""

    # Between a non-chief node's reads of the job's status (one storage read each), so a
    # chief's recorded FAILED, or a peer it saw go down, reaches the other nodes within seconds.
    peer_poll: float = 5.0
    # Between the chief's looks at its peers' status objects (one read per peer).
    peer_watch: float = 3.0
    # Between the chief's looks at its Spot peers (one Compute Engine read each).
    recover_poll: float = 10.0
    # The same, while a Spot peer is known to be down: it is started once it has stopped.
    recover_fast_poll: float = 2.0
    # The most one such look goes on before its next peer: the chief's heartbeat waits for it.
    recover_look_budget: float = 30.0
    # How long the job's code gets to end after SIGTERM when its peer is down (it cannot train).
    peer_down_grace: float = 5.0
    # After SIGTERM, how long a child (the job's code, an install) gets before SIGKILL: within a
    # preempted VM's 30 s, after the node has recorded why it stops.
    stop_grace: float = 10.0
    # Between looks at the peers' status objects while waiting for the cluster.
    peer_wait_poll: float = 2.0
    # After the job's code exits non-zero, how long the node looks for the peer whose loss may
    # have caused it: TensorFlow can notice a lost peer before that peer's agent has said so.
    peer_settle: float = 20.0
    # After the chief recorded the job SUCCEEDED, how long another node's code may go on before
    # the node ends it: code that ends with the chief's (MultiWorkerMirroredStrategy's workers)
    # has its own exit recorded, while a server that never ends by itself (a parameter server's
    # or worker's `server.join()`) is ended rather than billing until the heartbeat timeout.
    chief_end_grace: float = 20.0
    # Between two start calls for one preempted peer: the first wait, and the most it doubles to.
    start_backoff_first: float = 30.0
    start_backoff_last: float = 600.0
    # In a multi-node cluster, between looks at whether the job's code listens on this node's
    # TF_CONFIG port (two reads of /proc/net), until it does; after the window, less often.
    cluster_port_poll: float = 1.0
    cluster_port_late_poll: float = 30.0
    # How long the job's code may run without listening there before the node warns that it
    # ignores TF_CONFIG (a strategy built from TF_CONFIG listens as it is made, at the start:
    # after TensorFlow's import, 5 s on this project's 2-core machines, and the program's own
    # set-up). A warning is withdrawn when the code listens later.
    cluster_port_window: float = 60.0
    # A code that ends well without having listened is judged only after running this long:
    # code that finds its work done exits before it builds a strategy (the built-in trainer on
    # a finished job: under a second, a few with a gs:// job directory), while a job that trains
    # anything runs longer (an AI Platform sample's 40 epochs on three local nodes: about 40 s).
    cluster_port_min_run: float = 10.0
    # A team's code is judged sooner: an AI Platform sample that trains 8 epochs and saves its
    # model runs 7 s on this project's machines, TensorFlow's import included, while code that
    # stops at a bad flag or import ends in a second or two.
    cluster_port_min_run_own_code: float = 3.0
    # A standing node with no queued job to run: between its looks at the queue's index (one
    # read of a small object: 7,200 an idle hour, about $0.003 at Cloud Storage's class B
    # price; a multi-node job starts when its slowest node has looked), and between its log
    # lines saying how long it has been idle.
    queue_poll: float = 0.5
    queue_idle_log: float = 60.0
    # While the job's code runs, between looks at its cloudml-hypertune report (one stat of a
    # local file; one upload only when it changed): a tuning process that stops a trial early
    # sees an intermediate report within this long of the code's writing it.
    metric_copy: float = 5.0
    # A flex-start node ends its job this long before Compute Engine deletes the machine at the
    # end of its run duration: time for the code to end (stop_grace) and the status to be written.
    run_end_margin: float = 300.0

    @property
    def start_backoff(self) -> tuple[float, float]:
        return self.start_backoff_first, self.start_backoff_last

    def scaled(self, factor: float) -> Timings:
        return replace(self, **{each.name: getattr(self, each.name) * factor for each in fields(self)})
