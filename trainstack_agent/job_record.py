"""What a job was first started with, kept beside its status objects.

A job is resumed by name: its code restores whatever backup its job directory holds. Changed
under the same name (other arguments or job.env, another module or image), it would restore a
backup made with other settings: into another shape, which fails deep inside the framework, or with fewer
epochs, which ships an old model as final. So the chief records the job's settings when it
first starts it (``status/settings.json``) and refuses to start the job with other ones,
naming each difference and the ways on. The code's digest is not a setting: a fixed bug
resumes from the same backup.
"""

from __future__ import annotations

import json
from typing import Any

from trainstack_agent.gcs import Storage
from trainstack_agent.settings import JobSettings
from trainstack_contract import LAYOUT
from trainstack_contract.documents import json_object

# job.args are bounded to 32 KiB in the stack file; a record is that and a few names.
MAX_RECORD_BYTES = 64 * 1024


class SettingsChanged(Exception):
    """The job is started with other settings than it was first started with."""


def record_uri(job_dir: str) -> str:
    return f"{job_dir}/{LAYOUT.job_settings}"


def started_with(job: JobSettings) -> dict[str, Any]:
    return {
        "mode": job.mode,
        "module": job.module,
        "image": job.image,
        "args": list(job.trainer_args),
        "env": [f"{name}={value}" for name, value in sorted(job.env)],
    }


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(each) for each in value) or "(none)"
    return "(none)" if value is None else str(value)


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    return [
        f"{key} {_shown(current.get(key))[:300]} (first started with: {_shown(recorded.get(key))[:300]})"
        for key in current
        if recorded.get(key) != current[key]
    ]


def check_or_record(storage: Storage, job: JobSettings) -> None:
    """Records the job's settings at its first start; SettingsChanged when they differ later."""
    uri = record_uri(job.job_dir)
    current = started_with(job)
    raw = storage.read(uri, MAX_RECORD_BYTES)
    if raw is None:
        storage.write(uri, (json.dumps(current, indent=2) + "\n").encode())
        return
    recorded = json_object(raw)
    if recorded is None:
        raise SettingsChanged(
            f"{uri} is not a record of the job's settings; not starting the job over what its job directory "
            "holds: give the job a new name (trainstack:job.name) to start over"
        )
    changed = differences(recorded, current)
    if changed:
        raise SettingsChanged(
            f"the job in {job.job_dir} was first started with other settings: {'; '.join(changed)}. Its job "
            "directory holds what that run made (its backup too): deploy the job with those settings to resume "
            "it, or give it a new name (trainstack:job.name) to start over"
        )
