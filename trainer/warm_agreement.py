"""One choice per multi-worker job: start with the strategy the nodes rehearsed together, or
every node afresh.

A rehearsed strategy (:mod:`trainer.prepared`) is bound to the servers and collectives of the
processes that made it together. If one node's rehearsed interpreter is gone before the next
job (killed, out of memory, its rehearsal failed), that node starts the job in a new process,
and the others must not start with their rehearsed strategy: their collectives would meet a
process that never took part in them. So before any node touches its strategy, the nodes
agree, through small files in the job's temporary directory (``tmp/warm-start/``, local or
gs://, removed with the rest of it when the job ends):

- every node but the decider (the chief, else worker 0) writes its claim: the token of the
  rehearsal it holds (the same on every node that rehearsed together: the chief's, broadcast
  over the rehearsal's own strategy), or none, and a nonce of its own;
- the decider, if it holds a rehearsal, waits for every claim (at most ``CLAIMS_SECONDS``):
  all with its own token, it writes the decision "rehearsed" naming the claims' nonces;
  anything else (a fresh node, a claim that never came), "fresh". A decider that holds no
  rehearsal writes "fresh" at once;
- a node that holds a rehearsal waits for the decision (at most ``DECISION_SECONDS``, longer
  than the decider's wait): "rehearsed" counts only where it names this node's nonce, so no
  decision of another start is taken for this one's. With none in time it withdraws its claim
  and starts afresh. A node without a rehearsal starts afresh without waiting.
- so that no "rehearsed" is written after a node stopped waiting for it, each claim says until
  when (the wall clock, which Compute Engine keeps in step) its node waits, and the decider
  writes "rehearsed" only while every claim still has ``DECISION_MARGIN_SECONDS`` to run; a
  decider that comes later decides "fresh".

A node that starts afresh while holding a rehearsal replaces its process (``prepared.start_anew``).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from trainer import jobdir
from trainer.jobdir import JobLayout
from trainer.strategy import ClusterInfo
from trainstack_contract import CHIEF, WORKER, node_name

log = logging.getLogger(__name__)

AGREEMENT_DIR = "warm-start"
DECISION = "decision.json"
# How long the decider waits for the other nodes' claims: a standing cluster's nodes take a
# queued job within a poll of each other.
CLAIMS_SECONDS = 10.0
# How long a rehearsed node waits for the decision: past the decider's own wait, so that a
# decider that waited its whole bound has written it.
DECISION_SECONDS = 30.0
# What a "rehearsed" decision leaves of every claimant's wait, at least: time to write the
# decision and for the claimant to read it.
DECISION_MARGIN_SECONDS = 5.0
# Between reads: a local directory answers at once, Cloud Storage in tens of milliseconds.
LOCAL_POLL_SECONDS = 0.02
REMOTE_POLL_SECONDS = 0.2


def participants(cluster: ClusterInfo) -> list[str]:
    """The nodes of a multi-worker strategy: the chief, then the workers."""
    return [node_name(role, index) for role in (CHIEF, WORKER) for index in range(len(cluster.cluster.get(role, [])))]


def decider(cluster: ClusterInfo) -> str:
    """The node that decides: the chief, or worker 0 where the cluster has none (as
    MultiWorkerMirroredStrategy makes worker 0 the chief)."""
    return node_name(CHIEF, 0) if cluster.cluster.get(CHIEF) else node_name(WORKER, 0)


class Agreement:
    """One node's part in the choice (the module's docstring): :meth:`agree` returns whether
    this node starts with its rehearsal."""

    def __init__(
        self,
        layout: JobLayout,
        cluster: ClusterInfo,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        claims_seconds: float = CLAIMS_SECONDS,
        decision_seconds: float = DECISION_SECONDS,
    ) -> None:
        self.directory = jobdir.join(layout.tmp_dir, AGREEMENT_DIR)
        self.cluster = cluster
        self.me = cluster.task_name
        self.clock = clock
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.claims_seconds = claims_seconds
        self.decision_seconds = decision_seconds
        self.poll = REMOTE_POLL_SECONDS if "://" in layout.tmp_dir else LOCAL_POLL_SECONDS
        self.nonce = secrets.token_hex(8)

    def agree(self, token: str | None) -> bool:
        """Whether this node starts with the rehearsal whose token it holds (None: it holds
        none, and starts afresh whatever the others do)."""
        if len(participants(self.cluster)) <= 1:
            return token is not None
        if self.me == decider(self.cluster):
            return self._decide(token)
        return self._follow(token)

    def _path(self, name: str) -> str:
        return jobdir.join(self.directory, name)

    def _decide(self, token: str | None) -> bool:
        others = [name for name in participants(self.cluster) if name != self.me]
        seen: dict[str, str] = {}
        agreed = False
        if token is not None:
            deadline = self.clock() + self.claims_seconds
            while True:
                claims = {name: jobdir.read_json(self._path(f"{name}.json")) for name in others}
                present = {name: claim for name, claim in claims.items() if claim is not None}
                if any(claim.get("rehearsal") != token for claim in present.values()):
                    break
                if len(present) == len(others):
                    if not self._every_claimant_waits(present.values()):
                        log.warning("a node's wait for this decision is (nearly) over: every node starts afresh")
                        break
                    seen = {name: str(claim.get("nonce")) for name, claim in present.items()}
                    agreed = True
                    break
                if self.clock() >= deadline:
                    log.warning("not every node's claim came in %.0f s: every node starts afresh", self.claims_seconds)
                    break
                self.sleep(self.poll)
        decision: dict[str, Any] = {"rehearsal": token if agreed else None, "claims": seen}
        jobdir.write_json_atomically(self._path(DECISION), decision)
        return agreed

    def _every_claimant_waits(self, claims: Iterable[dict[str, Any]]) -> bool:
        """Whether every claimant still waits for the decision, with the margin to spare."""
        latest = self.wall_clock() + DECISION_MARGIN_SECONDS
        for claim in claims:
            until = claim.get("waits_until")
            if not isinstance(until, (int, float)) or isinstance(until, bool) or until < latest:
                return False
        return True

    def _follow(self, token: str | None) -> bool:
        claim_path = self._path(f"{self.me}.json")
        waits_until = self.wall_clock() + self.decision_seconds
        claim = {"rehearsal": token, "nonce": self.nonce, "waits_until": waits_until}
        jobdir.write_json_atomically(claim_path, claim)
        if token is None:
            return False
        deadline = self.clock() + self.decision_seconds
        while self.clock() < deadline:
            decision = jobdir.read_json(self._path(DECISION))
            if decision is not None:
                if decision.get("rehearsal") is None:
                    return False
                if decision.get("rehearsal") == token and decision.get("claims", {}).get(self.me) == self.nonce:
                    return True
            self.sleep(self.poll)
        log.warning("no decision on the rehearsed start came in %.0f s: this node starts afresh", self.decision_seconds)
        jobdir.write_json_atomically(claim_path, {"rehearsal": None, "nonce": self.nonce})
        return False


def remove(layout: JobLayout) -> None:
    """The agreement's files, once the job has ended."""
    jobdir.remove_tree_if_exists(jobdir.join(layout.tmp_dir, AGREEMENT_DIR))
