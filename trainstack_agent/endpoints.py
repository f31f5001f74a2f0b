"""Where the agent's cloud is, and the few ways a local run differs from a VM.

On a VM no ``TRAINSTACK_*`` variable is set and every value is Google's. ``trainstack local``
sets them to point the same agent at its stand-ins (a metadata server, a Compute Engine API and
a token service on loopback, a directory for the bucket, a log for self-stops); the tests point
``TRAINSTACK_STORAGE_API`` at a Cloud Storage emulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


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
    defaults = Endpoints()
    endpoints = Endpoints(
        metadata=environment.get("TRAINSTACK_METADATA_ROOT") or defaults.metadata,
        compute=environment.get("TRAINSTACK_COMPUTE_API") or defaults.compute,
        storage=environment.get("TRAINSTACK_STORAGE_API") or defaults.storage,
        tpu=environment.get("TRAINSTACK_TPU_API") or defaults.tpu,
        secrets=environment.get("TRAINSTACK_SECRETS_API") or defaults.secrets,
        sts=environment.get("TRAINSTACK_STS_API") or defaults.sts,
    )
    host_defaults = Host()
    stop_log = environment.get("TRAINSTACK_SELF_STOP_LOG")
    host = Host(
        state_dir=Path(environment.get("TRAINSTACK_STATE_DIR") or host_defaults.state_dir),
        profile_dir=Path(environment.get("TRAINSTACK_PROFILE_DIR") or host_defaults.profile_dir),
        self_stop_log=Path(stop_log) if stop_log else None,
        skip_registry_login=bool(environment.get("TRAINSTACK_SKIP_REGISTRY_LOGIN")),
        secrets_from_environment=bool(environment.get("TRAINSTACK_SECRETS_FROM_ENVIRONMENT")),
        pip_find_links=Path(environment["TRAINSTACK_PIP_FIND_LINKS"])
        if environment.get("TRAINSTACK_PIP_FIND_LINKS")
        else None,
        job_as_agent_user=bool(environment.get("TRAINSTACK_JOB_AS_AGENT_USER")),
    )
    return endpoints, host
