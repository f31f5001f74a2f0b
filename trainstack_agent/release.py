"""A node releases its machine: stop (no more vCPU, GPU or TPU billing) or delete.

A Compute Engine VM stops by a guest shutdown, which needs no permission; it deletes itself
with one API call. A TPU VM keeps its TPU (and bills) through a guest shutdown, so it stops
or deletes itself through the TPU API. Should deletion be refused, stopping still ends the
billing; should every call fail, the guest shuts down. A TPU VM asks the TPU API again for a
day first (:data:`TPU_API_ROUNDS`), since its guest shutdown keeps the TPU billing.
``trainstack local`` records the action in a log instead.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainstack_agent.cloud import NO_RETRY, CloudError, Http, Retry
from trainstack_agent.compute import ComputeApi, Place, TpuApi
from trainstack_agent.endpoints import Endpoints
from trainstack_agent.metadata import Metadata
from trainstack_contract import TPU_NODE_KIND

SHUTDOWN = ("shutdown", "-h", "now")
# A TPU VM whose release through the TPU API failed (each call already retried by Http) tries
# again after 15 s, doubling to every 10 minutes, for a day (150 rounds, 24.1 h of waits)
# before it shuts its guest down: that shutdown keeps the TPU billing and ends the process that
# would have asked again (the run-time cap's too), so it comes only after a TPU API outage
# longer than any a retry can wait out.
TPU_API_ROUNDS = Retry(attempts=150, first_delay=15.0, max_delay=600.0)


@dataclass(eq=False)
class Release:
    kind: str
    node: str
    tpu_name: str | None
    metadata: Metadata
    http: Http
    endpoints: Endpoints
    log: Callable[[str], None]
    self_stop_log: Path | None = None
    run: Callable[[Sequence[str]], object] = lambda argv: subprocess.run(list(argv), check=False, timeout=60)
    # This machine's project and zone where already known (the TPU run-time cap is told them),
    # else read from the metadata server when the API call needs them.
    place: Place | None = None

    def __call__(self, action: str) -> None:
        """``delete`` deletes the machine; anything else stops it."""
        if self.self_stop_log is not None:
            self.self_stop_log.parent.mkdir(parents=True, exist_ok=True)
            with self.self_stop_log.open("a", encoding="utf-8") as handle:
                handle.write(f"{time.time():.6f} {action} {self.node}\n")
            return
        rounds = TPU_API_ROUNDS if self.kind == TPU_NODE_KIND and self.tpu_name is not None else NO_RETRY
        delays = rounds.delays()
        for attempt in range(rounds.attempts):
            try:
                if self._through_api(action):
                    return
                break
            except Exception as error:  # noqa: BLE001 - whatever failed, the machine must still stop
                again = f"; asking again in {delays[attempt]:g} s" if attempt < len(delays) else ""
                self.log(f"releasing this machine through the API failed ({error}){again}")
            if attempt < len(delays):
                self.http.sleep(delays[attempt])
        self.log("shutting the guest down")
        self.run(SHUTDOWN)

    def _through_api(self, action: str) -> bool:
        """Releases the machine through an API where that is how it is done: True once done,
        False where only a guest shutdown does it (a VM's stop, a refused VM deletion, a TPU
        VM without its name)."""
        place = self.place or Place.of_this_vm(self.metadata)
        if self.kind == TPU_NODE_KIND and self.tpu_name is not None:
            self._release_tpu(action, TpuApi(self.http, self.metadata, self.endpoints.tpu, place))
            return True
        if action == "delete":
            name = self.metadata.require("instance/name")
            try:
                ComputeApi(self.http, self.metadata, self.endpoints.compute, place).delete(name)
                return True
            except CloudError as error:
                self.log(f"deleting this instance failed ({error}); stopping it instead")
        return False

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
