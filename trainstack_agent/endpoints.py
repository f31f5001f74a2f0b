"""Where the agent's cloud is, and the few ways a local run differs from a VM: Google's values,
with what `trainstack local` overrides (trainstack_contract.overrides) applied."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainstack_contract.overrides import LocalOverrides


@dataclass(frozen=True)
class Endpoints:
    """The roots of the services the agent calls."""

    metadata: str = "http://metadata.google.internal/computeMetadata/v1"
    compute: str = "https://compute.googleapis.com/compute/v1"
    storage: str = "https://storage.googleapis.com"
    tpu: str = "https://tpu.googleapis.com/v2"
    secrets: str = "https://secretmanager.googleapis.com/v1"
    # Google's Security Token Service: where the agent downscopes the node's token for a job.
    sts: str = "https://sts.googleapis.com"


@dataclass(frozen=True)
class Host:
    """This machine: where the agent keeps its state, and what a local run does instead."""

    # The Python environment, the job's code and the boot lock; kept across reboots.
    state_dir: Path = Path("/var/lib/trainstack")
    # Where login shells pick up TF_CONFIG on a node without a job.
    profile_dir: Path = Path("/etc/profile.d")
    # Set locally: a self-stop is recorded as a line in this file instead of done.
    self_stop_log: Path | None = None
    # Set locally: the local Docker engine pulls with its user's own credentials.
    skip_registry_login: bool = False
    # Set locally: the job's secrets are already in the environment `trainstack local` ran in.
    secrets_from_environment: bool = False
    # Set locally: pip installs the job's requirements and project from this directory of
    # wheels and archives, fetched before the nodes start (they reach no package index).
    pip_find_links: Path | None = None
    # Set locally where the job's unprivileged user cannot reach this machine's Python or the
    # run's files (a clone under a home others may not enter): the job's code runs as the agent.
    job_as_agent_user: bool = False


def from_environment(environment: Mapping[str, str]) -> tuple[Endpoints, Host]:
    """The endpoints and host, with every ``TRAINSTACK_*`` override applied."""
    local = LocalOverrides.from_environment(environment)
    defaults, host_defaults = Endpoints(), Host()
    endpoints = Endpoints(
        metadata=local.metadata_root or defaults.metadata,
        compute=local.compute_api or defaults.compute,
        storage=local.storage_api or defaults.storage,
        tpu=local.tpu_api or defaults.tpu,
        secrets=local.secrets_api or defaults.secrets,
        sts=local.sts_api or defaults.sts,
    )
    host = Host(
        state_dir=Path(local.state_dir) if local.state_dir else host_defaults.state_dir,
        profile_dir=Path(local.profile_dir) if local.profile_dir else host_defaults.profile_dir,
        self_stop_log=Path(local.self_stop_log) if local.self_stop_log else None,
        skip_registry_login=local.skip_registry_login,
        secrets_from_environment=local.secrets_from_environment,
        pip_find_links=Path(local.pip_find_links) if local.pip_find_links else None,
        job_as_agent_user=local.job_as_agent_user,
    )
    return endpoints, host
