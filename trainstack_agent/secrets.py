"""The job's secrets, from Secret Manager into the environment of the job's process alone.

Metadata names them (``ENV_NAME=SECRET_ID``); the values are read just before the job
starts, with the VM's token in a header
(https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access),
and go into the job's environment: never into a file, a log line, argv or metadata. A secret
that cannot be read fails the job rather than run its code without it. A local run takes
each from the environment `trainstack local` was started in.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping

from trainstack_agent.cloud import CloudError, Http, Request
from trainstack_agent.metadata import Metadata

# Secret Manager holds at most 64 KiB per version; the answer is that, base64, in JSON.
MAX_ANSWER_BYTES = 128 * 1024


class SecretError(Exception):
    """A secret the job names cannot be read; the message names the variable, never a value."""


def read_secrets(
    secrets: tuple[tuple[str, str], ...],
    *,
    from_environment: Mapping[str, str] | None,
    http: Http,
    metadata: Metadata,
    root: str,
) -> dict[str, str]:
    """Each secret's value by its environment variable name."""
    values: dict[str, str] = {}
    if not secrets:
        return values
    if from_environment is not None:
        for name, _ in secrets:
            if not from_environment.get(name):
                raise SecretError(f"secret {name} is not set in the environment of this local run")
            values[name] = from_environment[name]
        return values
    project = metadata.require("project/project-id")
    for name, secret in secrets:
        url = f"{root.rstrip('/')}/projects/{project}/secrets/{secret}/versions/latest:access"
        try:
            answer = json.loads(http.call(Request("GET", url, metadata.authorization()), MAX_ANSWER_BYTES))
            values[name] = base64.b64decode(answer["payload"]["data"], validate=True).decode("utf-8")
        except CloudError as error:
            raise SecretError(f"cannot read secret {secret} (for {name}) from Secret Manager: {error}") from None
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise SecretError(f"Secret Manager's answer for {secret} (for {name}) holds no text value") from None
    return values
