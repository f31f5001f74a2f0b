"""How `trainstack local` binds a node's agent to this machine: its ``TRAINSTACK_*`` variables.

On a VM none is set and the agent calls Google's services. ``trainstack local`` sets them
(trainstack.localrun.run) to point the same agent at its stand-ins (a metadata server, a Compute
Engine API and a token service on loopback, a directory for the bucket, a log for self-stops);
the agent reads them (trainstack_agent.endpoints); the tests point the storage API at a Cloud
Storage emulator. Both sides go through :class:`LocalOverrides`, so a variable has one name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final

_VARIABLE: Final = "variable"


def _variable(name: str) -> dict[str, str]:
    return {_VARIABLE: f"TRAINSTACK_{name}"}


@dataclass(frozen=True)
class LocalOverrides:
    """What differs from a VM; None (or False) leaves the VM's value."""

    metadata_root: str | None = field(default=None, metadata=_variable("METADATA_ROOT"))
    compute_api: str | None = field(default=None, metadata=_variable("COMPUTE_API"))
    storage_api: str | None = field(default=None, metadata=_variable("STORAGE_API"))
    tpu_api: str | None = field(default=None, metadata=_variable("TPU_API"))
    secrets_api: str | None = field(default=None, metadata=_variable("SECRETS_API"))
    sts_api: str | None = field(default=None, metadata=_variable("STS_API"))
    # The Python environment, the job's code and the boot lock (a VM's /var/lib/trainstack).
    state_dir: str | None = field(default=None, metadata=_variable("STATE_DIR"))
    # Where login shells pick up TF_CONFIG (a VM's /etc/profile.d).
    profile_dir: str | None = field(default=None, metadata=_variable("PROFILE_DIR"))
    # A self-stop is recorded as a line in this file instead of done.
    self_stop_log: str | None = field(default=None, metadata=_variable("SELF_STOP_LOG"))
    # The local Docker engine pulls with its user's own credentials.
    skip_registry_login: bool = field(default=False, metadata=_variable("SKIP_REGISTRY_LOGIN"))
    # The job's secrets are already in the environment `trainstack local` ran in.
    secrets_from_environment: bool = field(default=False, metadata=_variable("SECRETS_FROM_ENVIRONMENT"))
    # pip installs the job's requirements and project from this directory of wheels and
    # archives, fetched before the nodes start (they reach no package index).
    pip_find_links: str | None = field(default=None, metadata=_variable("PIP_FIND_LINKS"))
    # The job's unprivileged user cannot reach this machine's Python or the run's files (a
    # clone under a home others may not enter): the job's code runs as the agent.
    job_as_agent_user: bool = field(default=False, metadata=_variable("JOB_AS_AGENT_USER"))

    def to_environment(self) -> dict[str, str]:
        """The variables of the values set (a switch that is on as ``1``)."""
        environment = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value:
                environment[item.metadata[_VARIABLE]] = "1" if value is True else str(value)
        return environment

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> LocalOverrides:
        """The overrides ``environment`` sets; an empty variable sets nothing."""
        values: dict[str, object] = {}
        for item in fields(cls):
            text = environment.get(item.metadata[_VARIABLE])
            if text:
                values[item.name] = True if item.type in (bool, "bool") else text
        return cls(**values)  # type: ignore[arg-type]


def variable(name: str) -> str:
    """The environment variable of the field ``name`` (a test sets one alone)."""
    return str(next(item.metadata[_VARIABLE] for item in fields(LocalOverrides) if item.name == name))
