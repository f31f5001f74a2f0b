"""Compute Engine and Cloud TPU calls on this node's own project and zone.

The training account holds only what the cluster's custom roles grant, per instance:
get/stop/delete on its own nodes (on_finish: delete), get/start on the chief's Spot peers;
the TPU VM's account get/stop/delete on TPU nodes. Each call is one REST request with the
VM's token in its Authorization header
(https://cloud.google.com/compute/docs/reference/rest/v1/instances,
https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.nodes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from trainstack_agent.cloud import CloudError, Http, Request
from trainstack_agent.metadata import Metadata

MAX_ANSWER_BYTES = 1 << 20


@dataclass(frozen=True)
class Place:
    project: str
    zone: str

    @classmethod
    def of_this_vm(cls, metadata: Metadata) -> Place:
        # instance/zone is "projects/NUMBER/zones/ZONE".
        return cls(metadata.require("project/project-id"), metadata.require("instance/zone").rsplit("/", 1)[-1])


class ComputeApi:
    """Instances of this VM's project and zone."""

    def __init__(self, http: Http, metadata: Metadata, root: str, place: Place) -> None:
        self.http = http
        self.metadata = metadata
        self.base = f"{root.rstrip('/')}/projects/{place.project}/zones/{place.zone}/instances"

    def _call(self, method: str, path: str) -> bytes:
        # POST verbs (start) take no body, but Google's front end wants a Content-Length.
        body = b"" if method == "POST" else None
        return self.http.call(
            Request(method, f"{self.base}/{path}", self.metadata.authorization(), body), MAX_ANSWER_BYTES
        )

    def status(self, instance: str) -> str:
        """RUNNING, STOPPING, TERMINATED, ... (Compute Engine's instance status)."""
        try:
            status = json.loads(self._call("GET", instance))["status"]
        except (ValueError, KeyError, TypeError):
            raise CloudError(f"the Compute Engine answer for {instance} has no status") from None
        if not isinstance(status, str):
            raise CloudError(f"the Compute Engine answer for {instance} has no status")
        return status

    def start(self, instance: str) -> None:
        self._call("POST", f"{instance}/start")

    def delete(self, instance: str) -> None:
        """Returns once Compute Engine accepted the deletion; nothing more is needed."""
        self._call("DELETE", instance)


class TpuApi:
    """TPU nodes of this VM's project and zone."""

    def __init__(self, http: Http, metadata: Metadata, root: str, place: Place) -> None:
        self.http = http
        self.metadata = metadata
        self.base = f"{root.rstrip('/')}/projects/{place.project}/locations/{place.zone}/nodes"

    def stop(self, node: str) -> None:
        # The operation runs on after this returns; waiting would need tpu.operations.get.
        headers = {**self.metadata.authorization(), "Content-Type": "application/json"}
        self.http.call(Request("POST", f"{self.base}/{node}:stop", headers, b"{}"), MAX_ANSWER_BYTES)

    def delete(self, node: str) -> None:
        self.http.call(Request("DELETE", f"{self.base}/{node}", self.metadata.authorization()), MAX_ANSWER_BYTES)
