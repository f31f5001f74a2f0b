"""One choice per multi-worker job: start with the strategy the nodes rehearsed together, or
every node afresh.

A rehearsed strategy (:mod:`trainer.prepared`) is bound to the servers and collectives of the
processes that made it together. If one node's rehearsed interpreter is gone before the next
job (killed, out of memory, its rehearsal failed), that node starts the job in a new process.
No node may then make its strategy while another still holds a rehearsed one: the new
process's collectives would meet the rehearsal's (a mismatched collective, a peer of another
incarnation, and the job fails). So before any node touches its strategy, the nodes agree,
through small files in the job's temporary directory (``tmp/warm-start/``, local or gs://,
removed with the rest of it when the job ends):

- every node but the decider (the chief, else worker 0) writes its claim: the token of the
  rehearsal it holds (the same on every node that rehearsed together: the chief's, broadcast
  over the rehearsal's own strategy), or none, and a nonce of its own;
- a decider that holds a rehearsal waits for every claim (at most ``CLAIMS_SECONDS``): all with
  its own token, it writes "rehearsed" naming the claims' nonces. Anything else (a fresh node,
  a claim that never came) is "release", and it replaces its own process (a new interpreter
  running the same job, ``prepared.start_anew``), which decides again, without a rehearsal;
- a decider that holds none writes "release" while any claim still names a rehearsal, and
  "fresh" once every node's claim names none (at most ``RELEASE_SECONDS``: a node that never
  claims is one the strategy will wait for anyway);
- a node that holds a rehearsal waits for the decision: "rehearsed" naming its nonce, it
  starts with the rehearsal; "release" or "fresh", it replaces its process, whose claim then
  names none. A node that holds none waits for "fresh". No node makes its strategy before.
- so that no "rehearsed" is written after a node stopped waiting for it, each claim says until
  when (the wall clock, which Compute Engine keeps in step) its node waits, and the decider
  writes "rehearsed" only while every claim still has ``DECISION_MARGIN_SECONDS`` to run.
  A node that waits ``DECISION_SECONDS`` for nothing (its decider is gone) starts afresh.

Rehearsals run only between jobs, never between the attempts of one job, so a claim left by an
earlier attempt's process that named none still tells the truth, and a "fresh" decision holds
for every later attempt of the job.
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
# The decisions: every node starts with the rehearsal; every node that holds one lets it go
# (a new process) and the others wait; every node starts afresh.
REHEARSED, RELEASE, FRESH = "rehearsed", "release", "fresh"
# How long the decider waits for the other nodes' claims: a standing cluster's nodes take a
# queued job within a poll of each other.
CLAIMS_SECONDS = 10.0
# How long a decider without a rehearsal waits for every node's claim to name none: the nodes
# that held one start a new interpreter (TensorFlow's import) and claim again.
RELEASE_SECONDS = 120.0
# How long a node waits for the decision: past the decider's own waits, so that a decider that
# waited its whole bound has written it.
DECISION_SECONDS = 180.0
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
        release_seconds: float = RELEASE_SECONDS,
    ) -> None:
        self.directory = jobdir.join(layout.tmp_dir, AGREEMENT_DIR)
        self.cluster = cluster
        self.me = cluster.task_name
        self.clock = clock
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.claims_seconds = claims_seconds
        self.decision_seconds = decision_seconds
        self.release_seconds = release_seconds
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

    def _claims(self) -> dict[str, dict[str, Any]]:
        """The other nodes' claims, by node, of those present."""
        others = [name for name in participants(self.cluster) if name != self.me]
        claims = {name: jobdir.read_json(self._path(f"{name}.json")) for name in others}
        return {name: claim for name, claim in claims.items() if isinstance(claim, dict)}

    def _write(self, decision: str, claims: dict[str, dict[str, Any]], token: str | None = None) -> None:
        nonces = {name: str(claim.get("nonce")) for name, claim in claims.items()}
        record = {"decision": decision, "rehearsal": token, "claims": nonces}
        jobdir.write_json_atomically(self._path(DECISION), record)

    def _decide(self, token: str | None) -> bool:
        others = len(participants(self.cluster)) - 1
        if token is not None:
            deadline = self.clock() + self.claims_seconds
            while True:
                present = self._claims()
                if any(claim.get("rehearsal") != token for claim in present.values()):
                    break
                if len(present) == others:
                    if self._every_claimant_waits(present.values()):
                        self._write(REHEARSED, present, token)
                        return True
                    log.warning("a node's wait for this decision is (nearly) over: every node starts afresh")
                    break
                if self.clock() >= deadline:
                    log.warning("not every node's claim came in %.0f s: every node starts afresh", self.claims_seconds)
                    break
                self.sleep(self.poll)
            # This process lets its rehearsal go too: the one that replaces it decides again.
            self._write(RELEASE, self._claims())
            return False
        deadline = self.clock() + self.release_seconds
        released: set[str] = set()
        while True:
            present = self._claims()
            holding = {name for name, claim in present.items() if claim.get("rehearsal") is not None}
            if not holding and len(present) == others:
                break
            if self.clock() >= deadline:
                log.warning("not every node let its rehearsal go or claimed in %.0f s", self.release_seconds)
                break
            if holding - released:
                # Written again only for a node that came to hold one since: few writes to a bucket.
                self._write(RELEASE, present)
                released |= holding
            self.sleep(self.poll)
        self._write(FRESH, present)
        return False

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
        deadline = self.clock() + self.decision_seconds
        while self.clock() < deadline:
            decision = jobdir.read_json(self._path(DECISION))
            kind = decision.get("decision") if isinstance(decision, dict) else None
            if kind == FRESH:
                return False
            if token is not None and isinstance(decision, dict):
                claims = decision.get("claims")
                named = isinstance(claims, dict) and claims.get(self.me) == self.nonce
                if kind == REHEARSED and named and decision.get("rehearsal") == token:
                    return True
                if kind == RELEASE:
                    return False
            self.sleep(self.poll)
        log.warning("no decision on the start came in %.0f s: this node starts afresh", self.decision_seconds)
        jobdir.write_json_atomically(claim_path, {"rehearsal": None, "nonce": self.nonce, "waits_until": 0})
        return False


def remove(layout: JobLayout) -> None:
    """The agreement's files, once the job has ended."""
    jobdir.remove_tree_if_exists(jobdir.join(layout.tmp_dir, AGREEMENT_DIR))
