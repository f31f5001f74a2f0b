"""What both of the node agent's programs (the node's boot, a TPU VM's run-time cap) are made
of: the log, HTTP, the metadata server, storage and the machine's release; and the stop of a
node that cannot tell what to do."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from trainstack_agent.board import Board
from trainstack_agent.cloud import CloudError, Http
from trainstack_agent.compute import Place
from trainstack_agent.endpoints import Endpoints, Host, from_environment
from trainstack_agent.gcs import Storage
from trainstack_agent.metadata import Metadata
from trainstack_agent.processes import Log
from trainstack_agent.release import Release
from trainstack_agent.settings import (
    KEYS,
    known_identity,
)
from trainstack_contract import CLUSTER_NODE_KIND, TPU_NODE_KIND
from trainstack_contract.lifecycle import JobState

EXIT_ABORTED = 1


class Agent:
    """The pieces every command of the agent shares: log, HTTP, metadata, storage, release."""

    def __init__(
        self,
        environment: Mapping[str, str],
        http: Http | None = None,
        run: Callable[[Sequence[str]], object] | None = None,
    ) -> None:
        """``http`` and ``run`` (what runs the guest shutdown) are the tests' to replace."""
        self.environment = environment
        self.endpoints: Endpoints
        self.host: Host
        self.endpoints, self.host = from_environment(environment)
        self.log = Log()
        self.http = http or Http()
        self.metadata = Metadata(self.http, self.endpoints.metadata)
        self.storage = Storage(self.http, self.metadata, self.endpoints.storage)
        self._run = run

    def release(self, kind: str, node: str, tpu_name: str | None, place: Place | None = None) -> Release:
        release = Release(
            kind,
            node,
            tpu_name,
            self.metadata,
            self.http,
            self.endpoints,
            self.log,
            self.host.self_stop_log,
            place=place,
        )
        if self._run is not None:
            release.run = self._run
        return release


def new_incarnation() -> str:
    """Names one run of a node's agent in its status objects."""
    return os.urandom(8).hex()


def abort(agent: Agent, reason: str) -> int:
    """A boot that cannot tell what to do: record FAILED where that is known, then stop the
    machine, whatever on_finish says."""
    agent.log(f"boot aborted: {reason}; stopping this machine")
    node, job_dir = known_identity(agent.metadata)
    if node is not None and job_dir is not None:
        try:
            Board(agent.storage, job_dir, node, new_incarnation()).write_node(JobState.FAILED, 1, reason)
        except Exception as error:  # noqa: BLE001 - the machine stops whatever happens here
            agent.log(f"could not record FAILED: {error}")
    try:
        kind = agent.metadata.attribute(KEYS.node_kind) or CLUSTER_NODE_KIND
        tpu_name = agent.metadata.attribute(KEYS.tpu_name) if kind == TPU_NODE_KIND else None
    except CloudError:
        kind, tpu_name = CLUSTER_NODE_KIND, None
    agent.release(kind, node or "node", tpu_name)("stop")
    return EXIT_ABORTED
