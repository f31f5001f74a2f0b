"""Which TPU VMs trainstack runs: one host, with a single-host runtime.

The trainer finds its TPU with ``TPUClusterResolver(LOCAL_TPU)``: the TPU attached to the host
it runs on. A pod slice spans several hosts, runs the boot script on each of them, and needs a
launcher this project does not have; its runtimes carry ``-pod-`` in their names
(tpu-vm-tf-2.17.0-pod-pjrt). The catalog, the stack's checks, `trainstack tpus` and the AI
Platform import all ask these two questions here.

Standard library only, Python 3.10.
"""

from __future__ import annotations

from typing import Final

# What marks a TPU runtime for pod slices in its version name.
POD_RUNTIME_MARK: Final = "-pod-"


def is_pod_runtime(version: str) -> bool:
    """True for a TPU runtime made for pod slices (several hosts), which trainstack does not run."""
    return POD_RUNTIME_MARK in version


def is_multi_host(chips: int, chips_per_host: int) -> bool:
    """True when a slice of ``chips`` spans more than one host of ``chips_per_host``: a pod slice."""
    return chips > chips_per_host
