"""A node releases its machine: stop (no more vCPU, GPU or TPU billing) or delete.

A Compute Engine VM stops by a guest shutdown, which needs no permission; it deletes itself
with one API call. A TPU VM keeps its TPU (and bills) through a guest shutdown, so it stops
or deletes itself through the TPU API. Should deletion be refused, stopping still ends the
billing; should every call fail, the guest shuts down. ``trainstack local`` records the
action in a log instead.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from trainstack_agent.cloud import CloudError, Http
from trainstack_agent.compute import ComputeApi, Place, TpuApi
from trainstack_agent.endpoints import Endpoints
from trainstack_agent.metadata import Metadata
from trainstack_contract import TPU_NODE_KIND

SHUTDOWN = ("shutdown", "-h", "now")


class Release:
    def __init__(
        self,
        kind: str,
        node: str,
        tpu_name: str | None,
        metadata: Metadata,
        http: Http,
        endpoints: Endpoints,
        log: Callable[[str], None],
        self_stop_log: Path | None = None,
        run: Callable[[Sequence[str]], object] = lambda argv: subprocess.run(list(argv), check=False, timeout=60),
    ) -> None:
        self.kind = kind
        self.node = node
        self.tpu_name = tpu_name
        self.metadata = metadata
        self.http = http
        self.endpoints = endpoints
        self.log = log
        self.self_stop_log = self_stop_log
        self.run = run

    def __call__(self, action: str) -> None:
        """``delete`` deletes the machine; anything else stops it."""
        if self.self_stop_log is not None:
            self.self_stop_log.parent.mkdir(parents=True, exist_ok=True)
            with self.self_stop_log.open("a", encoding="utf-8") as handle:
                handle.write(f"{time.time():.6f} {action} {self.node}\n")
            return
        try:
            place = Place.of_this_vm(self.metadata)
            if self.kind == TPU_NODE_KIND and self.tpu_name is not None:
                self._release_tpu(action, TpuApi(self.http, self.metadata, self.endpoints.tpu, place))
                return
            if action == "delete":
                name = self.metadata.require("instance/name")
                try:
                    ComputeApi(self.http, self.metadata, self.endpoints.compute, place).delete(name)
                    return
                except CloudError as error:
                    self.log(f"deleting this instance failed ({error}); stopping it instead")
        except CloudError as error:
            self.log(f"releasing this machine through the API failed ({error}); shutting the guest down")
        self.run(SHUTDOWN)

    def _release_tpu(self, action: str, tpu: TpuApi) -> None:
        assert self.tpu_name is not None
        # Without its name a TPU VM can only shut its guest down, which keeps the TPU billing
        # until the stack's run-time cap; with it, the TPU API stops or deletes the node.
        if action == "delete":
            try:
                tpu.delete(self.tpu_name)
                return
            except CloudError as error:
                self.log(f"deleting TPU node {self.tpu_name} failed ({error}); stopping it instead")
        tpu.stop(self.tpu_name)
