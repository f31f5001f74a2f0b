"""The job's status objects, as one node reads and writes them.

Each node writes only its own object (``status/<node>.json``) and the chief also the job's
(``status/job.json``), so a node's writes need no lock: it keeps its last object in memory and
carries its history on from there. Peers' objects are read to tell a lost peer from a failed
one; one that cannot be parsed counts as unknown, never as a state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from trainstack_agent.cloud import CloudError
from trainstack_agent.gcs import Storage
from trainstack_contract import LAYOUT
from trainstack_contract.status import (
    MAX_STATUS_BYTES,
    StatusDocument,
    StatusFormatError,
    first_status,
    utc_now,
    with_warning,
)


@dataclass(eq=False)
class Board:
    """Status objects of the job at ``job_dir``, seen from ``node`` in its ``incarnation``."""

    storage: Storage
    job_dir: str
    node: str
    incarnation: str
    now: Callable[[], str] = utc_now
    # Trainer starts by this incarnation; peers see it change when this node restarts its trainer.
    attempt: int = field(default=0, init=False)
    _own: StatusDocument | None = field(default=None, init=False)
    _own_loaded: bool = field(default=False, init=False)
    _job: StatusDocument | None = field(default=None, init=False)

    def node_uri(self, node: str) -> str:
        return f"{self.job_dir}/{LAYOUT.node_status(node)}"

    @property
    def job_uri(self) -> str:
        return f"{self.job_dir}/{LAYOUT.job_status}"

    def read_raw(self, uri: str) -> bytes | None:
        return self.storage.read(uri, MAX_STATUS_BYTES)

    def read(self, uri: str) -> StatusDocument | None:
        """The status object at ``uri``; None when there is none or it is not one."""
        data = self.read_raw(uri)
        if data is None:
            return None
        try:
            return StatusDocument.from_json(data)
        except StatusFormatError:
            return None

    def peer(self, node: str) -> StatusDocument | None:
        return self.read(self.node_uri(node))

    def job(self) -> StatusDocument | None:
        return self.read(self.job_uri)

    def own(self) -> StatusDocument | None:
        """This node's last status object (read once from the bucket, then kept)."""
        if not self._own_loaded:
            self._own = self.read(self.node_uri(self.node))
            self._own_loaded = True
        return self._own

    def _next(
        self,
        previous: StatusDocument | None,
        state: str,
        exit_code: int | None,
        reason: str | None,
        peers_down: tuple[str, ...] = (),
    ) -> StatusDocument:
        now, incarnation, attempt = self.now(), self.incarnation, self.attempt
        if previous is None:
            previous = first_status(
                self.node, state, time=now, incarnation=incarnation, attempt=attempt, exit_code=exit_code, reason=reason
            )
        return previous.then(
            state,
            time=now,
            incarnation=incarnation,
            attempt=attempt,
            exit_code=exit_code,
            reason=reason,
            peers_down=peers_down,
        )

    def write_node(self, state: str, exit_code: int | None = None, reason: str | None = None) -> StatusDocument:
        document = self._next(self.own(), state, exit_code, reason)
        self.storage.write(self.node_uri(self.node), document.to_json().encode())
        self._own = document
        return document

    def record(
        self, state: str, exit_code: int | None, reason: str | None, job_too: bool, log: Callable[[str], None]
    ) -> None:
        """This node's status (and, ``job_too``, the job's) in ``state``; a write Cloud Storage
        gave up on is logged, and the other is still made."""
        for write in (self.write_node, *([self.write_job] if job_too else [])):
            try:
                write(state, exit_code, reason)
            except CloudError as error:
                log(f"could not record {state}: {error}")

    def set_warning(self, name: str, text: str | None) -> None:
        """Records (or, with None, withdraws) one of this node's warnings in its status, which
        keeps its state; later statuses carry it on. Writes only when it changes."""
        own = self.own()
        if own is None or dict(own.warnings).get(name) == text:
            return
        document = with_warning(own, name, text)
        document = replace(document, time=self.now())
        self.storage.write(self.node_uri(self.node), document.to_json().encode())
        self._own = document

    def write_job(
        self, state: str, exit_code: int | None = None, reason: str | None = None, peers_down: tuple[str, ...] = ()
    ) -> StatusDocument:
        """The job's status (the chief's); a RUNNING one written again is the heartbeat, with
        the peers the chief sees down."""
        document = self._next(self._job, state, exit_code, reason, peers_down)
        self.storage.write(self.job_uri, document.to_json().encode())
        self._job = document
        return document
