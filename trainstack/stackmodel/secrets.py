"""The job's secrets: trainstack:secrets, kept in Secret Manager and never shown.

A stack file holds only Pulumi's ciphertext of each secret; the value exists only under
`pulumi up`, wrapped in :class:`JobSecret` so that no message, log or plan can print it. Any
other setting that holds an encrypted value is refused: it would reach the machines' metadata
in clear text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trainstack.base.errors import shorten

# A job's secret is handed to its code as an environment variable of this name.
SECRET_NAME_PATTERN = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
# Names the boot script or the trainer already set, or that change how programs load.
RESERVED_SECRET_PREFIXES = ("AIP_", "TF_", "TRAINSTACK_", "CLOUDSDK_", "GOOGLE_", "LD_", "PYTHON", "CUDA_", "NVIDIA_")
RESERVED_SECRET_NAMES = frozenset({"PATH", "HOME", "USER", "SHELL", "IFS", "PS4", "BASH_ENV", "ENV"})
MAX_SECRETS = 20
# Secret Manager's limit on one version's payload.
MAX_SECRET_BYTES = 64 * 1024
# How a secret is set, the one command every message that asks for one names.
SECRET_COMMAND = "pulumi config set --path --secret 'trainstack:secrets.{name}' VALUE"  # noqa: S105 - a command, no secret
_ANY_NAME = "<NAME>"


class JobSecret:
    """One secret value the job needs. ``value`` is None offline, where the stack file holds
    only Pulumi's ciphertext; under `pulumi up` it is the decrypted value. Its repr never
    shows the value, so no error message, log or plan can."""

    __slots__ = ("value",)

    def __init__(self, value: str | None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "JobSecret(<set>)" if self.value is None else "JobSecret(<value>)"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(cls._validate)

    @classmethod
    def _validate(cls, value: Any) -> JobSecret:
        if isinstance(value, JobSecret):
            return value
        if isinstance(value, Mapping) and set(value) == {"secure"} and isinstance(value["secure"], str):
            return cls(None)
        if isinstance(value, str):
            raise ValueError(f"is written in clear text; set it as a secret: {SECRET_COMMAND.format(name=_ANY_NAME)}")
        raise ValueError(f"a secret set with {SECRET_COMMAND.format(name=_ANY_NAME)}")


SECRET_ELSEWHERE = (
    "is set as a secret (pulumi config set --secret), but this setting reaches the machines' metadata and boot "
    f"log in clear text; keep secret values in trainstack:secrets ({SECRET_COMMAND.format(name=_ANY_NAME)}): "
    "the job's code reads $NAME from its environment"
)
# How the Pulumi CLI writes an encrypted value in a stack file.
_SECURE = "secure"


def holds_secure_value(value: Any, depth: int = 0) -> bool:
    """Whether a stack file's value holds a ``{secure: ...}`` value anywhere (``--path --secret``
    encrypts one leaf of a structured value)."""
    if depth > 32:
        return False
    if isinstance(value, Mapping):
        if set(value) == {_SECURE}:
            return True
        return any(holds_secure_value(item, depth + 1) for item in value.values())
    if isinstance(value, list):
        return any(holds_secure_value(item, depth + 1) for item in value)
    return False


def engine_secrets(value: Any) -> Any:
    """The engine's decrypted ``trainstack:secrets`` (a key it marks secret), each value wrapped
    so that nothing downstream can print it."""
    if not isinstance(value, Mapping):
        return value
    return {
        name: JobSecret(secret) if isinstance(secret, str) and len(secret.encode()) <= MAX_SECRET_BYTES else secret
        for name, secret in value.items()
    }


def check_secret_names(secrets: dict[str, JobSecret]) -> dict[str, JobSecret]:
    if len(secrets) > MAX_SECRETS:
        raise ValueError(f"{len(secrets)} secrets: at most {MAX_SECRETS}")
    for name in secrets:
        if not isinstance(name, str) or not SECRET_NAME_PATTERN.fullmatch(name):
            raise ValueError(
                f"secret name {shorten(name)}: an environment variable name, capital letters, digits and '_', "
                "starting with a letter, at most 64 characters"
            )
        if name in RESERVED_SECRET_NAMES or name.startswith(RESERVED_SECRET_PREFIXES):
            raise ValueError(
                f"secret name {name}: reserved (names {', '.join(sorted(RESERVED_SECRET_NAMES))} and names starting "
                f"{', '.join(RESERVED_SECRET_PREFIXES)} are set by the system, trainstack or TensorFlow)"
            )
    return secrets


# A name that says it holds a secret (HF_TOKEN, WANDB_API_KEY, DB_PASSWORD): job.env is written
# in clear text into the machines' metadata, their boot log and the plan.
SECRET_LIKE_ENV_NAME = re.compile(
    r"(?i)(?:.*_)?(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN|CREDENTIALS?|API_?KEY|KEYS?|AUTH|PAT)(?:_.*)?"
)
